"""Every page in Chromium with a hostile checkpoint (issue 51, item 6): a real ``streamlit run`` given a model whose
tokens, file name and predictions are Markdown images and links, HTML, formulas and icons (``tests/hostile_ui.py``),
and a dictionary set uploaded through the page with hostile top contexts.

On every page: no request leaves for an address a hostile string names, no ``<img>`` or ``<a href>`` of a hostile
string is in the DOM, no formula is typeset, and where a page shows a hostile token its text is there as typed.
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlparse

import pytest
from playwright.sync_api import expect

from hostile_ui import HOSTILE, TEXT, dictionary_set, hostile_model, hostile_tokenizer
from test_browser import browser, settled, settled_after, start_server, stop, visit  # noqa: F401  (browser: a fixture)
from viz_model import save_checkpoint
from viz_model.features.job import zip_folder
from viz_ui.app.navigation import PAGES

# A file name that is Markdown and HTML too (no "/" in a file's name: its image points at the server itself, a request
# seen all the same)
FILE_NAME = "![m](name.png) **model** <b>b $y$ :red[red] :smile:.safetensors"
SET_NAME = "![u](upload.png) <b>set</b>.zip"
TRAPS = ("127.0.0.1:9", "name.png", "upload.png", "md.png", "html.png")
SLUGS = ["" if p == "app.py" else p.removeprefix("pages/").removesuffix(".py") for p, _, _ in PAGES]

DOM = """() => {
  const app = document.querySelector('[data-testid=stApp]');
  const attr = (sel, name) => [...document.querySelectorAll(sel)].map(e => e.getAttribute(name) || '');
  return {
    imgs: attr('img', 'src'),
    links: attr('a[href]', 'href'),
    strong: [...app.querySelectorAll('strong, b, em, del, s')].map(e => e.textContent),
    tex: [...app.querySelectorAll('.katex annotation')].map(e => e.textContent.trim()),
    text: app.innerText.replaceAll('\u2060', ''),  // plain()'s invisible word joiners
    svg: [...app.querySelectorAll('.js-plotly-plot svg text')].map(e => e.textContent).join('\\n'),
    bold: [...app.querySelectorAll('.js-plotly-plot svg tspan')].filter(
      e => /bold|line-through/.test(e.getAttribute('style') || '')).map(e => e.textContent),
  };
}"""


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory, tokenizer, corpus):
    root = tmp_path_factory.mktemp("hostile")
    tok = hostile_tokenizer(tokenizer)
    model = hostile_model(tok)
    path = save_checkpoint(model, tok, root / FILE_NAME)
    archive = zip_folder(dictionary_set(model, tok, root / "set", corpus).parent)
    proc, url = start_server({}, root / "streamlit.log", ("--model", str(path)))  # the default model: the first given
    try:
        yield url, archive, tok
    finally:
        stop(proc)


def trapped(requests: list[str]) -> list[str]:
    """The requests a hostile string made: to the trap's port, or for a file one of them names (the page's own
    address holds the text in its query: only the path counts)."""
    files = {t for t in TRAPS if t.endswith(".png")}
    return [r for r in requests if r.startswith("javascript:") or urlparse(r).port == 9
            or urlparse(r).path.rsplit("/", 1)[-1] in files]


def check_dom(page, where: str) -> dict:
    """Asserts that no hostile string became markup on ``page``; returns what the page shows."""
    dom = page.evaluate(DOM)
    assert not [s for s in dom["imgs"] if any(t in s for t in TRAPS)], (where, dom["imgs"])
    assert not [h for h in dom["links"] if any(t in h for t in TRAPS) or h.lower().startswith("javascript")], \
        (where, dom["links"])
    assert not [s for s in dom["strong"] if s in ("bold", "model", "b", "set")], (where, dom["strong"])
    assert not {"x^2", "y"} & set(dom["tex"]), (where, dom["tex"])  # the formulas of "$x^2$" and "$y$"
    assert dom["bold"] == [], (where, dom["bold"][:5])  # Plotly's <b> and <s> of a token
    return dom


def test_every_page_shows_a_hostile_model_as_text(hostile_server, browser):
    url, _, _ = hostile_server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    for slug in SLUGS:  # the pages of one session, as the sidebar's links open them
        in_place = visit(page, f"{url}/{slug}?text={quote(TEXT)}")
        expect(page.locator("[data-testid=stMain] h1").first).to_be_visible(timeout=60_000)
        settled_after(page, in_place)
        if slug == "attention":  # the head's heatmap (a live chart, drawn a frame after the run) with its tick labels
            expect(page.locator(".js-plotly-plot svg text").filter(has_text="<s>").first).to_be_attached(timeout=60_000)
        dom = check_dom(page, slug)
        if slug == "tokens":  # the chips: each hostile token as typed (spaces drawn as ·)
            assert all(t.replace(" ", "·") in dom["text"] for t in HOSTILE), dom["text"][:3000]
        if slug == "attention":  # Plotly's tick labels (every other token's): the tags of tokens as text
            shown = [t for t in HOSTILE if "<" in t and t.replace(" ", "·") in dom["svg"]]
            assert len(shown) >= 2, dom["svg"][:3000]
        if slug == "":
            assert FILE_NAME in dom["text"]  # the model's name in its expander's label, as written
    page.wait_for_timeout(1500)  # any late request of the last page
    page.close()
    assert trapped(requests) == [], trapped(requests)
    hosts = {urlparse(r).hostname for r in requests} - {"127.0.0.1", None}
    assert hosts <= {""}, hosts


def test_an_uploaded_hostile_dictionary_set_on_the_features_and_steering_pages(hostile_server, browser):
    url, archive, _ = hostile_server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    visit(page, f"{url}/features?text={quote(TEXT)}")  # then the pages of this one session, as its links open them
    expect(page.locator("[data-testid=stMain] h1").first).to_be_visible(timeout=60_000)
    settled(page)
    page.get_by_text("Dictionaries for this model: train or upload").click()
    page.get_by_role("tab", name="Upload dictionaries (.zip)").click()
    page.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(
        files=[{"name": SET_NAME, "mimeType": "application/zip", "buffer": archive}])
    done = page.get_by_text("is in the dictionary list")
    expect(done).to_be_visible(timeout=60_000)
    settled(page)
    assert SET_NAME in done.inner_text().replace("\u2060", "")  # the set's name, from the file's, as written
    check_dom(page, "features, after the upload")
    visit(page, f"{url}/features?text={quote(TEXT)}")  # the page again, in this session, with the set
    expect(page.locator(".fctx").first).to_be_visible(timeout=60_000)  # the card's top contexts
    dom = check_dom(page, "features")
    contexts = " ".join(page.locator(".fline").all_inner_texts())
    assert sum(t.replace(" ", "·") in contexts for t in HOSTILE) >= 3, contexts[:2000]
    visit(page, f"{url}/steering?text={quote(TEXT)}")
    expect(page.get_by_role("heading", name=re.compile("Steering"))).to_be_visible(timeout=60_000)
    settled(page)
    expect(page.get_by_text(re.compile("Top next token after"))).to_be_visible(timeout=60_000)
    dom = check_dom(page, "steering")
    assert f"Top next token after “{HOSTILE[0]}”" in dom["text"]  # the case, shown as typed
    page.wait_for_timeout(1500)
    page.close()
    assert trapped(requests) == [], trapped(requests)
