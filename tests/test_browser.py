"""A real browser (Debian's Chromium through Playwright) against a real ``streamlit run``."""

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
import weakref
from urllib.parse import parse_qs, urlparse

import numpy as np
import pandas as pd
import pytest
import torch
from playwright.sync_api import Error as PlaywrightError, TimeoutError as PlaywrightTimeoutError, expect, sync_playwright

from conftest import ROOT
from ui_audit import contrast, open_select, option_texts

from viz_model import load_model
from viz_ui.app.layout import EXAMPLES, PAGES
from viz_ui.analysis.text_trace import token_label

# A shared CI machine's 2 cores run the server, Chromium and the model: an assertion that waits at all waits long enough
# for a rerun under load (it returns as soon as the page is right).
expect.set_options(timeout=20_000)

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(env_extra: dict, log=None, app_args: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """``streamlit run serve.py`` (the app as the README starts it) on a free port (output to ``log``, a file: a full
    pipe would block the server); ``app_args`` go to the app (``-- --model PATH``)."""
    import os
    port = free_port()
    with open(log or os.devnull, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "serve.py"), "--server.port",
                                 str(port), *(("--", *app_args) if app_args else ())], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, **env_extra})
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=1).status == 200:
                return proc, url
        except OSError:
            time.sleep(0.5)
    stop(proc)
    raise RuntimeError("streamlit did not start" + (": " + log.read_text(errors="replace")[-2000:] if log else ""))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc, url = start_server({}, tmp_path_factory.mktemp("server") / "streamlit.log")
    try:
        yield url
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


TEXT = "A tall giraffe ate green leaves."


def new_tick_label() -> str:
    """A tick label ("pos token") of TEXT's attention heatmap that the default text's heatmap lacks."""
    _, tok = load_model()
    labels = lambda text: {f"{i} {token_label(tok, t)}" for i, t in enumerate(tok.encode(text).ids)}
    return sorted(labels(TEXT) - labels(EXAMPLES[0]), key=len)[-1]


def test_typing_a_sentence_updates_the_attention_view(server, browser):
    tick = new_tick_label()
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server + "/attention")
    expect(page.get_by_role("heading", name="Attention", exact=True)).to_be_visible(timeout=60_000)
    expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=60_000)
    ticks = page.locator(".js-plotly-plot svg text").filter(has_text=tick)
    expect(page.locator(".js-plotly-plot svg text").filter(has_text="0 Once").first).to_be_attached(timeout=60_000)
    assert ticks.count() == 0
    box = page.get_by_label("Text", exact=True)
    box.fill(TEXT)
    box.press("Control+Enter")
    # The selected head's heatmap is redrawn with the new tokens as tick labels.
    expect(ticks.first).to_be_attached(timeout=60_000)
    expect(page).to_have_url(re.compile("giraffe"), timeout=30_000)

    # The text follows the user to another page, and a fresh browser opening the link sees it too.
    page.get_by_role("link", name="1 · Tokens").click()
    token = tick.split(" ", 1)[1]
    expect(page.locator(".toks")).to_contain_text(token, timeout=60_000)
    expect(page).to_have_url(re.compile("/tokens.*giraffe"), timeout=30_000)
    fresh = browser.new_context().new_page()
    fresh.goto(page.url)
    expect(fresh.locator(".toks")).to_contain_text(token, timeout=60_000)
    # The box is filled by the same run that drew the tokens, but the browser may paint it a frame later.
    expect(fresh.get_by_label("Text", exact=True)).to_have_value(TEXT, timeout=30_000)


# Every Plotly.react of a live chart: its key, the revision drawn, and whether the server had sent the chart anything
# since the keydown (window.__heads, taken then). Installed before the page's scripts (Plotly is set on window later).
DRAWN = """(() => {
  let plotly;
  window.__draws = [];
  window.__heads = {};
  Object.defineProperty(window, "Plotly", {configurable: true, get: () => plotly, set: value => {
    plotly = value;
    const react = value.react;
    value.react = (div, ...rest) => {
      const shown = div.__vizShown || {};
      window.__draws.push([shown.chart, shown.revision, div.__vizHead !== window.__heads[shown.chart]]);
      return react(div, ...rest);
    };
  }});
})()"""


def test_a_new_text_s_head_heatmap_is_drawn_ahead_of_the_rerun(server, browser):
    """Ctrl+Enter on a new text: the browser asks ``POST /viz/ahead`` for the head heatmap (viz_ui/app/ahead.py) and
    draws the answer before the page's rerun has sent the chart anything; the rerun then sends the same figure (its
    revision), which stays."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.add_init_script(DRAWN)
    answers = []
    page.on("response", lambda r: answers.append((r.status, r.headers.get("x-viz-revision")))
            if urlparse(r.url).path == "/viz/ahead" else None)
    page.goto(server + "/attention")
    expect(page.locator(".js-plotly-plot svg text").filter(has_text="0 Once").first).to_be_attached(timeout=60_000)
    settled(page)
    text = "The old dog slept by the warm fire all night."
    _, tok = load_model()
    tick = f"{len(tok.encode(text).ids) - 1} {token_label(tok, tok.encode(text).ids[-1])}"
    box = page.get_by_label("Text", exact=True)
    box.fill(text)
    page.evaluate("""() => { window.__draws = []; for (const div of document.querySelectorAll('.viz-live-chart'))
                               window.__heads[div.__vizShown.chart] = div.__vizHead; }""")
    box.press("Control+Enter")
    expect(page.locator(".js-plotly-plot svg text").filter(has_text=tick).first).to_be_attached(timeout=60_000)
    settled(page)
    assert len(answers) == 1 and answers[0][0] == 200, answers
    revision = answers[0][1]
    head_draws = [d for d in page.evaluate("window.__draws") if d[0] == "attn_head"]
    assert head_draws and head_draws[0] == ["attn_head", revision, False], head_draws  # drawn ahead of the rerun
    shown = page.evaluate("""() => [...document.querySelectorAll('.viz-live-chart')]
                               .filter(d => d.__vizShown.chart === 'attn_head').map(d => d.__vizShown.revision)""")
    assert shown == [revision]  # the rerun sent the same figure
    page.close()


def test_a_new_text_reaches_the_server_when_the_chart_cannot_be_drawn_ahead(server, browser):
    """The held Ctrl+Enter is given to Streamlit whatever the answer: a failed request at once, one that never
    answers after live_chart.js's AHEAD_WAIT_MS (1.5 s), and at once when another key is typed meanwhile (the text
    submitted is the one at the Ctrl+Enter, not what was typed after it). The text is run and the page shows it."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(server + "/attention")
    expect(page.locator(".js-plotly-plot svg text").filter(has_text="0 Once").first).to_be_attached(timeout=60_000)
    settled(page)
    _, tok = load_model()
    box = page.get_by_label("Text", exact=True)
    asked = []

    def linked() -> str:
        return parse_qs(urlparse(page.url).query).get("text", [""])[0]

    for text, answer, typed, held_s in [("A red fox ran past the old barn.", lambda route: route.abort(), "", 0),
                                        ("Two small frogs sat on a wet log.", lambda route: None, "", 1.4),  # no answer
                                        ("Three grey geese flew over the hill.", lambda route: None, " And", 0)]:
        page.unroute("**/viz/ahead")
        page.route("**/viz/ahead", (lambda reply: lambda route: asked.append(route.request.url) or reply(route))(answer))
        ids = tok.encode(text).ids
        box.fill(text)
        start = time.monotonic()
        box.press("Control+Enter")
        if typed:
            box.press_sequentially(typed)  # typed while the Ctrl+Enter is held: that one goes first
        expect(page.locator(".js-plotly-plot svg text").filter(has_text=f"{len(ids) - 1} {token_label(tok, ids[-1])}")
               .first).to_be_attached(timeout=60_000)
        page.wait_for_function("t => new URLSearchParams(location.search).get('text') === t", arg=text, timeout=30_000)
        waited = time.monotonic() - start
        assert waited > held_s  # the unanswered one: held until live_chart.js's AHEAD_WAIT_MS, then handed over
        settled(page)
        assert linked() == text  # the text at the Ctrl+Enter, not with what was typed after it
    assert len(asked) == 3  # each Ctrl+Enter asked for the heatmap (and was held)
    page.close()


def test_step_by_step_and_head_view_pages(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server + "/head_steps?layer=1&head=1")
    expect(page.get_by_role("heading", name="3 · Scores, mask and softmax")).to_be_attached(timeout=60_000)
    expect(page.get_by_text("the weights sum to 1.0000")).to_be_attached(timeout=30_000)

    page.goto(server + "/head_view")
    frame = page.frame_locator("iframe").first
    svg = frame.locator("svg#hv")
    expect(svg).to_be_visible(timeout=60_000)
    total = svg.locator("line").count()
    visible = "els => els.filter(e => getComputedStyle(e).display !== 'none').length"
    assert total > 0 and svg.locator("line").evaluate_all(visible) == total
    svg.locator("text.tq3").hover()
    shown = svg.locator("line").evaluate_all(visible)
    assert 0 < shown < total and shown == svg.locator("line.q3").count()


def test_plotly_code_is_fetched_on_a_page_without_charts(server, browser):
    """The preload: the Tokens page draws no Plotly chart, yet the browser fetches the live charts' Plotly code
    (started before the server imported torch), from this server, successfully; on a page of charts it is fetched
    once, whoever asks first (the preload or a chart), and Streamlit's own Plotly chunk (for st.plotly_chart, not
    drawn where live charts are) is not fetched at all."""
    from viz_ui.app.preload import live_chart_source
    name = live_chart_source().rsplit("/", 1)[1]
    context = browser.new_context()
    page = context.new_page()
    with page.expect_response(lambda r: r.url.endswith("/app/static/" + name), timeout=60_000) as response:
        page.goto(server + "/tokens")
    assert response.value.status == 200
    expect(page.get_by_role("heading", name="Tokens", exact=True)).to_be_visible(timeout=60_000)
    assert page.locator(".js-plotly-plot").count() == 0
    context.close()

    context = browser.new_context()  # an empty cache
    page = context.new_page()
    requested = []
    page.on("request", lambda r: requested.append(r.url.rsplit("/", 1)[1]))
    page.goto(server + "/attention")
    expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=60_000)
    settled(page)
    assert requested.count(name) == 1, requested
    assert not [r for r in requested if r.startswith("PlotlyChart.")], requested
    context.close()


def test_a_copied_link_reopens_the_same_view_and_samples(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server + "/output?text=Tom+had+a+red+ball.&temperature=0.7&seed=5&n_new=6&layer=2&head=3")
    generate = page.get_by_role("button", name="Generate")
    expect(generate).to_be_visible(timeout=60_000)
    generate.click()
    continuation = page.get_by_text("Tom had a red ball.⟨")
    expect(continuation).to_be_visible(timeout=60_000)
    first = continuation.inner_text()
    link = page.locator("[data-testid=stSidebar] code").last.inner_text()
    assert "/output?" in link and "temperature=0.7" in link and "seed=5" in link and "layer=2" in link

    fresh = browser.new_context().new_page()
    fresh.set_viewport_size({"width": 1400, "height": 1000})
    fresh.goto(link)
    expect(fresh.get_by_role("button", name="Generate")).to_be_visible(timeout=60_000)
    assert fresh.get_by_label("Text", exact=True).input_value() == "Tom had a red ball."
    temperature = fresh.locator("[data-testid=stSlider]").filter(has_text="Temperature")
    expect(temperature.locator("[data-testid=stSliderThumbValue]")).to_have_text("0.70")
    fresh.get_by_role("button", name="Generate").click()
    again = fresh.get_by_text("Tom had a red ball.⟨")
    expect(again).to_be_visible(timeout=60_000)
    assert again.inner_text() == first
    # the layer and head chosen there reach the pages that use them
    fresh.get_by_role("link", name="3a · One head, step by step").click()
    expect(fresh).to_have_url(re.compile("layer=2.*head=3"), timeout=30_000)
    for label, value in (("Layer", "2"), ("Head", "3")):
        expect(fresh.get_by_role("combobox", name=label, exact=True)).to_have_value(value, timeout=30_000)


def test_output_controls_rerun_their_fragment_and_append_reruns_the_page(server, browser):
    """The output page's controls live in a fragment: the chart, the link in the sidebar (drawn into a container
    made outside the fragment) follow the temperature; appending the continuation changes the sidebar's text."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server + "/output?text=Tom+had+a+red+ball.&seed=3&n_new=4")
    slider = page.get_by_role("slider", name="Temperature T (0 = greedy)")
    expect(slider).to_be_visible(timeout=60_000)
    chart = page.locator(".js-plotly-plot").filter(has=page.locator(".gtitle", has_text=", T = 1"))
    expect(chart).to_have_count(1, timeout=60_000)
    drawn = chart.locator(".main-svg").first.element_handle()
    slider.focus()
    slider.press("ArrowRight")
    expect(page.locator(".js-plotly-plot .gtitle").filter(has_text="T = 1.05")).to_have_count(1, timeout=30_000)
    # the chart follows the slider in the browser at once (its frames); the export's file name comes with the
    # server's rerun, a moment later (asserted at once, this failed when the rerun came after the check)
    page.wait_for_function("""() => [...document.querySelectorAll('.js-plotly-plot')].some(
        div => ((div._context || {}).toImageButtonOptions || {}).filename?.endsWith('_T1.05'))""", timeout=30_000)
    # updated in place (Plotly.react), not drawn anew: the same SVG, with the new temperature in the export's file
    # name (a chart key or an export option that named the temperature made a new chart at every move)
    assert drawn.evaluate("svg => svg.isConnected")
    assert page.locator(".js-plotly-plot").filter(has=page.locator(".gtitle", has_text="T = 1.05")).evaluate(
        "div => div._context.toImageButtonOptions.filename").endswith("_T1.05")
    expect(page.locator("[data-testid=stSidebar] code").last).to_contain_text("temperature=1.05", timeout=30_000)
    assert page.locator("[data-testid=stSidebar] code").count() == 1  # redrawn in place, not added

    page.get_by_role("button", name="Generate").click()
    continuation = page.get_by_text("Tom had a red ball.⟨")
    expect(continuation).to_be_visible(timeout=60_000)
    shown = page.locator("[data-testid=stMain] code").filter(has_text="⟨").first.text_content()
    added = shown.split("⟨", 1)[1].rsplit("⟩", 1)[0]
    assert added.strip()
    page.get_by_role("button", name="Append to my text").click()
    box = page.get_by_label("Text", exact=True)
    expect(box).not_to_have_value("Tom had a red ball.", timeout=30_000)
    # the code block shows line breaks as spaces: compare the words
    assert box.input_value().split() == ("Tom had a red ball." + added).split()
    # the page ran on the longer text: the continuation belonged to the old one and is gone
    expect(page.locator("[data-testid=stMain] code").filter(has_text="⟨")).to_have_count(0, timeout=30_000)


def test_the_next_token_chart_follows_the_temperature_in_the_browser(server, browser):
    """The next-token chart holds a frame per temperature of the slider and draws the slider's value at once: with
    every message from the page to the server dropped (no rerun can happen), the chart still shows each new
    temperature, greedy T = 0 as one bar; the server's own rerun then agrees."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    cut = {"on": False}

    def relay(ws):  # the page's websocket to Streamlit, through a relay that drops the page's messages when cut
        to_server = ws.connect_to_server()
        ws.on_message(lambda message: None if cut["on"] else to_server.send(message))

    page.route_web_socket("**/_stcore/stream", relay)
    page.goto(server + "/output?text=Tom+had+a+red+ball.")
    slider = page.get_by_role("slider", name="Temperature T (0 = greedy)")
    expect(slider).to_be_visible(timeout=60_000)
    title = page.locator(".js-plotly-plot .gtitle").first
    expect(title).to_contain_text(", T = 1", timeout=60_000)
    chart = page.locator(".js-plotly-plot").first
    n_bars = chart.locator(".bars .point").count()
    assert n_bars > 1
    cut["on"] = True
    slider.focus()
    for k in (1, 2):
        slider.press("ArrowRight")
        expect(title).to_contain_text(f", T = {1 + 0.05 * k:g}", timeout=10_000)
    slider.press("Home")
    expect(title).to_contain_text(", T = 0", timeout=10_000)
    expect(chart.locator(".bars .point")).to_have_count(1)
    expect(page.get_by_text("T = 0 is greedy")).to_have_count(0)  # the server never heard of it
    cut["on"] = False
    slider.press("ArrowRight")  # reaches the server: its rerun draws the same chart at T = 0.05
    expect(page.locator("[data-testid=stSidebar] code").last).to_contain_text("temperature=0.05", timeout=30_000)
    expect(title).to_contain_text(", T = 0.05", timeout=10_000)
    page.close()


def test_the_output_page_loads_again_and_again_without_a_frontend_error(server, browser):
    """The output page's fragment redraws the sidebar's link. Drawn as a new container from inside the fragment,
    about one load in five crashed Streamlit's frontend ("Cannot set a node at a delta path": a blank page);
    one element replaced in place does not (0 in 65 loads)."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    for _ in range(8):  # 16 loads: a regression to one crash in five loads fails this with probability 97 %
        for path in ("heads", "output"):
            page.goto(f"{server}/{path}?lecture=true&scale=2.0&theme=dark")
            expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=60_000)
    assert errors == []
    page.close()


def test_a_page_the_frontend_can_no_longer_draw_loads_itself_again(server, browser):
    """Streamlit's frontend throws "Bad delta path index" when a run's element arrives for a place the page has just
    cleared (a following student's screen under load, by a path viz_ui/app/streamlit_patches/fragment_from_page_left.py
    now closes), and the tab stays blank; viz_ui/app/streamlit_patches/recover.js, the safety net for any other path,
    loads the address again (the view comes back), at most once in 10 s, and never for another error."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{server}/tokens?head=2")
    heading = page.get_by_role("heading", name="Tokens", level=1)
    expect(heading).to_be_visible(timeout=60_000)
    throw = "(m) => { window.__before = 1; setTimeout(() => { throw new Error(m); }); }"
    page.evaluate(throw, "Something else went wrong")
    page.wait_for_timeout(1500)
    assert page.evaluate("window.__before") == 1  # not loaded again
    with page.expect_navigation(timeout=10_000):
        page.evaluate(throw, "Bad delta path index 3 (should be between [0, 2])")
    expect(heading).to_be_visible(timeout=60_000)
    assert page.evaluate("window.__before") is None and "head=2" in page.url  # a new document, the same view
    page.evaluate(throw, "Bad delta path index 2 (should be between [0, 0])")  # again within 10 s: no loop
    page.wait_for_timeout(1500)
    assert page.evaluate("window.__before") == 1
    page.close()


def test_a_figures_data_downloads_from_the_link_inside_its_chart(server, browser):
    """Served as the README starts it, every figure's CSV is a link drawn by its live chart (viz_ui/app/downloads.py)
    instead of a download button: one per chart; the head heatmap's file holds the model's own attention weights."""
    page = browser.new_page(viewport={"width": 1280, "height": 800}, accept_downloads=True)
    in_place = visit(page, f"{server}/attention")
    expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=60_000)
    settled_after(page, in_place)
    charts, links = page.locator(".viz-live-chart"), page.locator("a.viz-csv:not([hidden])")
    assert charts.count() >= 4 and links.count() == charts.count()
    expect(links.first).to_have_text("Data (CSV)")
    assert page.locator("[data-testid=stDownloadButton]").filter(has_text="Data (CSV)").count() == 0
    names = links.evaluate_all("ls => ls.map(l => l.download)")  # named after the model and the view
    (name,) = [n for n in names if re.fullmatch(r".+_attention_L\d+_H\d+\.csv", n)]  # the chosen head's heatmap
    layer, head = map(int, re.search(r"_L(\d+)_H(\d+)\.csv$", name).groups())
    with page.expect_download() as info:
        page.locator(f"a.viz-csv[download='{name}']").click()
    assert info.value.suggested_filename == name
    frame = pd.read_csv(info.value.path(), index_col=0)
    model, tok = load_model()
    text = page.get_by_label("Text", exact=True).input_value()
    ids = tok.encode(text).ids
    _, cache = model.run_with_cache(torch.tensor([ids]))
    weights = cache[f"blocks.{layer}.attn.hook_pattern"][0, head].numpy()
    assert frame.shape == weights.shape == (len(ids), len(ids))
    np.testing.assert_allclose(frame.to_numpy(), weights, atol=1e-6)
    labels = [f"{i} {token_label(tok, t)}" for i, t in enumerate(ids)]  # rows are queries, columns keys
    assert list(frame.columns) == list(frame.index) == labels and frame.index.name == "query position"


SMALLEST_LECTURE_FONT_PX = 24  # at 2x: every figure label and page text is at least this large


@pytest.mark.parametrize("size, theme", [((1920, 1080), "light"), ((1280, 720), "dark")])
def test_lecture_mode_is_readable_from_the_back_row(server, browser, size, theme):
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    for path in ("attention", "logit_lens", "heads", "output"):
        in_place = visit(page, f"{server}/{path}?lecture=true&scale=2.0&theme={theme}")
        expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=60_000)
        settled_after(page, in_place)  # every chart drawn
        sizes = page.evaluate("""() => Array.from(document.querySelectorAll(
                '.js-plotly-plot text, [data-testid=stMain] p, [data-testid=stMain] label, [data-testid=stMain] h1'))
            .filter(e => e.getBoundingClientRect().width > 0 && (e.textContent || '').trim())
            .map(e => parseFloat(getComputedStyle(e).fontSize))""")
        assert len(sizes) > 20 and min(sizes) >= SMALLEST_LECTURE_FONT_PX, path
        assert page.locator(".modebar").count() == 0  # projected views hide the figure toolbar
        assert page.get_by_text("Data (CSV)").count() == 0
    page.screenshot(path=f"/tmp/lecture_{size[0]}x{size[1]}_{theme}.png")
    background = page.evaluate("getComputedStyle(document.querySelector('[data-testid=stApp]')).backgroundColor")
    assert (background == "rgb(14, 17, 23)") == (theme == "dark")
    box = page.locator("textarea").first  # the text stays readable on its own background in both themes
    colours = box.evaluate("""e => { let b = e;  // the first ancestor with an opaque background is what shows
        while (b && ['transparent', 'rgba(0, 0, 0, 0)'].includes(getComputedStyle(b).backgroundColor)) b = b.parentElement;
        return [getComputedStyle(e).color, b ? getComputedStyle(b).backgroundColor : 'rgb(255, 255, 255)']; }""")
    assert contrast(*colours) >= 4.5  # WCAG AA for body text


def test_an_upload_stays_in_its_session_and_bad_files_keep_the_previous_model(browser, tmp_path, tokenizer):
    import zipfile

    from hf_models import build, gpt2_config, save
    folder = save(build("GPT2LMHeadModel", gpt2_config(vocab_size=320, n_positions=64)), tmp_path / "tiny-gpt2")
    tokenizer.save(str(folder / "tokenizer.json"))
    tokenizer_json = tmp_path / "tokenizer.json"
    tokenizer.save(str(tokenizer_json))
    archive = tmp_path / "tiny-gpt2.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in folder.iterdir():
            z.write(f, f"tiny-gpt2/{f.name}")
    junk = tmp_path / "broken.pt"
    junk.write_bytes(b"PK\x03\x04 not really a checkpoint")
    server_tmp = tmp_path / "server-tmp"
    server_tmp.mkdir()
    proc, url = start_server({"TMPDIR": str(server_tmp)})
    try:
        a = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        a.goto(url + "/inspector")
        expect(a.get_by_text("Load your own model")).to_be_visible(timeout=60_000)
        a.locator("input[type=file]").first.set_input_files(str(junk))
        expect(a.get_by_text("broken.pt is not a readable PyTorch file")).to_be_visible(timeout=60_000)
        expect(a.get_by_label("Model", exact=True)).to_have_value("tinystories-6l", timeout=60_000)
        a.locator("input[type=file]").first.set_input_files(str(archive))
        expect(a.get_by_text("Loaded tiny-gpt2.zip")).to_be_visible(timeout=60_000)
        expect(a.get_by_label("Model", exact=True)).to_have_value("tiny-gpt2.zip (upload)")
        expect(a.get_by_role("heading", name="Architecture: tiny-gpt2.zip (upload)")).to_be_visible()
        assert list(server_tmp.iterdir()) == []  # the upload was unpacked in a private folder, then deleted

        # a checkpoint without tokenizer: token ids, then its tokenizer.json uploaded separately
        (folder / "tokenizer.json").unlink()
        bare = tmp_path / "bare-gpt2.zip"
        with zipfile.ZipFile(bare, "w") as z:
            for f in folder.iterdir():
                z.write(f, f.name)
        a.locator("input[type=file]").first.set_input_files(str(bare))
        expect(a.get_by_text("Loaded bare-gpt2.zip")).to_be_visible(timeout=60_000)
        expect(a.get_by_text("This checkpoint has no tokenizer")).to_be_visible()
        expect(a.get_by_text("The text cannot be run")).to_be_visible()  # the example text is words, not ids
        a.locator("input[type=file]").nth(1).set_input_files(str(tokenizer_json))
        expect(a.get_by_label("Model", exact=True)).to_have_value("bare-gpt2.zip (upload) + tokenizer.json",
                                                                  timeout=60_000)
        expect(a.get_by_text("This checkpoint has no tokenizer")).to_have_count(0)

        b = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        b.goto(url + "/inspector?model=tiny-gpt2.zip%20(upload)")  # even a link naming the upload
        expect(b.get_by_text("Load your own model")).to_be_visible(timeout=60_000)
        expect(b.get_by_label("Model", exact=True)).to_have_value("tinystories-6l", timeout=60_000)
        options = option_texts(b, "Model")
        assert not [o for o in options if "upload" in o]
        assert any("tinystories" in o for o in options)
    finally:
        stop(proc)


def test_cross_attention_view_on_the_date_model(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server + "/encoder_decoder?model=dates-iso&text=3rd%20of%20March%202021")
    expect(page.get_by_role("heading", name="Cross-attention: the decoder reads the source")).to_be_visible(timeout=60_000)
    expect(page.get_by_text("2021-03-03", exact=True).first).to_be_visible()
    expect(page.locator(".js-plotly-plot svg text").filter(has_text="Cross-attention, decoder L0 H0").first
           ).to_be_attached(timeout=60_000)
    # the source year's tokens label the columns of the cross-attention heatmap
    expect(page.locator(".js-plotly-plot svg text").filter(has_text="13 2").first).to_be_attached()


# ---- The classroom checks (issue 13): every page, projector sizes, both themes, lecture on and off ----------------

from ui_audit import layout, low_contrast  # noqa: E402

SLUGS = ["" if p == "app.py" else p.removeprefix("pages/").removesuffix(".py") for p, _, _ in PAGES]


SETTLED_JS = """(quiet) => {  // true once the script run is over and the number of figures has not changed for `quiet` ms
    const app = document.querySelector('[data-testid=stApp]'), now = performance.now();
    const state = app && app.getAttribute('data-test-script-state');
    const n = document.querySelectorAll('.js-plotly-plot').length, w = window.__settled;
    if (state === null || state === 'running' || !w || w.n !== n) { window.__settled = {n, since: now}; return false; }
    return now - w.since >= quiet; }"""


def settled(page, timeout: float = 60.0, quiet_ms: int = 1000) -> None:
    """Wait (at most ``timeout`` seconds, then go on) until the script run is over and the number of figures has not
    changed for ``quiet_ms``: checked in the page every 100 ms, with no round trip per check."""
    end = time.time() + timeout
    while True:
        try:
            page.evaluate("window.__settled = null")
            page.wait_for_function(SETTLED_JS, arg=quiet_ms, polling=100, timeout=max(1.0, end - time.time()) * 1000)
            return
        except PlaywrightTimeoutError:  # as before: the caller's own checks decide
            return
        except PlaywrightError:  # the page navigated meanwhile: wait again in the new document
            if time.time() > end or page.is_closed():
                return
            time.sleep(0.1)


def until_url(page, act, url, tries: int = 3, wait_s: float = 15.0) -> None:
    """Do ``act()`` (a click) until ``page``'s address matches ``url`` (a pattern), at most ``tries`` times, waiting
    ``wait_s`` seconds after each and letting the page settle before the next: a click that meets a redraw can be
    no click (Plotly's mousedown and mouseup split by a redraw; a button lost once in 8 rounds). Then asserts it."""
    for _ in range(tries):
        act()
        try:
            page.wait_for_url(url, timeout=wait_s * 1000)
            break
        except PlaywrightTimeoutError:
            settled(page)
    expect(page).to_have_url(url, timeout=30_000)


_RUNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # page -> [page runs finished], for watched pages


def watch_runs(page) -> None:
    """Count the page runs that finish on ``page`` (Streamlit's ``script_finished`` messages with the status
    FINISHED_SUCCESSFULLY, read from the websocket: a fragment's run or a run cut short for a rerun is not one), from
    the next websocket it opens on."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    count = _RUNS.setdefault(page, [0])

    def frame(payload) -> None:
        if isinstance(payload, bytes) and len(payload) < 256:  # script_finished is a few bytes; deltas are larger
            msg = ForwardMsg.FromString(payload)
            if msg.WhichOneof("type") == "script_finished" and msg.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY:
                count[0] += 1

    page.on("websocket", lambda ws: ws.on("framereceived", frame))


def visit(page, url: str) -> bool:
    """Open ``url`` (a page of the app, with its query) as the browser's Back and Forward do: the address changes in
    place (history.pushState, then popstate) and Streamlit's frontend asks its server for that page and query, in the
    same session, without loading the document again (Streamlit's bundle, Plotly's code and a new session cost the
    browser about a second of CPU a load on this machine); then waits until the server has finished that run. The
    first visit of a page (Playwright's) loads ``url`` with ``goto``, watching the websocket from then on; so does a
    visit to another server. Returns True when the page moved in place (its run known to be over), False after a
    ``goto``."""
    here, there = urlparse(page.url), urlparse(url)
    runs = _RUNS.get(page)
    if runs is None or (here.scheme, here.netloc) != (there.scheme, there.netloc):
        if runs is None:
            watch_runs(page)
        page.goto(url)
        return False
    before = runs[0]
    page.evaluate("""(url) => { history.pushState({}, '', url); window.dispatchEvent(new PopStateEvent('popstate')); }""",
                  url)
    end = time.time() + 60
    while runs[0] == before:
        if time.time() > end:
            raise AssertionError(f"no run of {url} finished within 60 s (address now: {page.url})")
        page.wait_for_timeout(50)  # lets Playwright deliver the websocket's frames
    expect(page).to_have_url(re.compile(re.escape(there.path) + r"(\?|$)"))
    return True


def settled_after(page, in_place: bool) -> None:
    """``settled()`` after a ``visit()``: after a move in place the server's run is known to be over, and what is left
    is the frontend drawing it (live charts one per frame), so a shorter quiet spell (0.4 s) than after a load (1 s)."""
    settled(page, quiet_ms=400 if in_place else 1000)


def audit(page, url: str, lecture: bool) -> tuple[list, dict]:
    in_place = visit(page, url)
    expect(page.locator("[data-testid=stMain] h1").first).to_be_visible(timeout=60_000)
    settled_after(page, in_place)
    bad = low_contrast(page)
    if bad:  # taken again once: on a loaded machine a rerun or the theme's change may still have been under way
        page.wait_for_timeout(1500)
        settled(page)
        bad = low_contrast(page)
    return bad, layout(page)


def check_page(page, url: str, lecture: bool) -> None:
    bad, box = audit(page, url, lecture)
    assert bad == [], (url, bad[:5])  # every text at least 4.5:1 against what is behind it (WCAG 2.1 AA)
    assert box["scrollWidth"] <= box["width"], (url, box)  # no horizontal scrolling
    if lecture:
        assert box["sidebar"]["right"] <= 0, (url, box)  # folded away wholly, not a third of it on screen
        assert box["toggle"] and box["toggle"]["visible"], (url, box)  # and a visible control brings it back
        assert box["main"] >= 0.85 * box["width"], (url, box)
        if box["figures"]:
            assert max(box["figures"]) >= 0.70 * box["width"], (url, box)
        assert box["downloads"] == box["modebars"] == box["toolbars"] == 0, (url, box)


@pytest.mark.parametrize("size, theme, lecture", [((1280, 800), "dark", True), ((1920, 1080), "light", False)])
def test_every_page_passes_the_classroom_checks(server, browser, size, theme, lecture):
    """Every page, in two combinations of size, theme and lecture mode; and the offline guarantee on the way: fonts,
    scripts and telemetry all come from the serving machine."""
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    hosts: set[str] = set()
    page.on("request", lambda request: hosts.add(urlparse(request.url).hostname or request.url.split(":")[0]))
    for slug in SLUGS:
        check_page(page, f"{server}/{slug}?lecture={str(lecture).lower()}&theme={theme}&scale=1.5", lecture)
    page.wait_for_timeout(1500)  # any late request of the last page
    page.close()
    assert hosts - {"127.0.0.1"} <= {"data", "blob"}, f"requests left the machine: {sorted(hosts - {'127.0.0.1'})}"


@pytest.mark.parametrize("size, theme, lecture", [((1280, 800), "light", True), ((1920, 1080), "dark", True),
                                                  ((1280, 800), "dark", False), ((1920, 1080), "light", True)])
def test_main_pages_pass_the_classroom_checks_in_every_combination(server, browser, size, theme, lecture):
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    for slug in ("", "attention", "output"):  # every page is checked in two combinations above
        check_page(page, f"{server}/{slug}?lecture={str(lecture).lower()}&theme={theme}&scale=1.5", lecture)
    page.close()


def test_the_landing_page_shows_the_model_and_a_click_opens_a_head(server, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(server + "/")
    settled(page)
    fig = page.locator(".js-plotly-plot").first
    expect(fig).to_be_visible(timeout=60_000)
    assert fig.bounding_box()["y"] < 800  # the model map starts on the first screen
    # screen positions of the clickable points (one per thumbnail: input, then per layer the heads and the MLP)
    points = page.evaluate("""() => { const gd = document.querySelector('.js-plotly-plot');
        const tr = gd._fullData[gd._fullData.length - 1], xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const r = gd.getBoundingClientRect();
        return tr.x.map((x, i) => [r.left + xa._offset + xa.l2p(x), r.top + ya._offset + ya.l2p(tr.y[i])]); }""")
    n_heads = load_model()[0].cfg.n_heads
    assert len(points) == 1 + load_model()[0].cfg.n_layers * (n_heads + 1)
    x, y = points[1 + 2 * (n_heads + 1) + 3]  # layer 2, head 3
    page.mouse.click(x, y)
    expect(page).to_have_url(re.compile(r"/attention\?.*layer=2.*head=3"), timeout=60_000)
    expect(page.locator(".gtitle").filter(has_text="Layer 2, head 3")).to_be_attached(timeout=60_000)
    page.close()


OPEN_SECTIONS_JS = """() => [...document.querySelectorAll('.st-key-viz_nav details')].filter(d => d.open)
    .map(d => d.querySelector('summary [data-testid=stMarkdownContainer]').innerText.trim())"""


def open_sidebar(page) -> None:
    """Unfold the sidebar (lecture mode folds it) with its » button, as a lecturer would, until it is on screen."""
    sidebar = page.locator("[data-testid=stSidebar]")
    for _ in range(20):
        if sidebar.bounding_box()["x"] >= 0:
            return
        page.get_by_test_id("stExpandSidebarButton").click(force=True)
        page.wait_for_timeout(500)
    raise AssertionError("the sidebar did not open")


def test_the_text_box_is_on_the_first_screen_and_the_pages_are_in_sections(server, browser):
    """At 1280 × 800 the sidebar's text box is on the first screen in both themes and in lecture mode (at the default
    and the largest font scale, once the folded sidebar is opened); the pages are in sections (viz_ui.app.navigation),
    the section of the page shown open and the others folded, also after a click on a link of another section
    (docs/ui.md)."""
    from viz_ui.app.navigation import SHOWN
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    for query in ("theme=light", "theme=dark", "lecture=true&theme=dark&scale=1.5",
                  "lecture=true&theme=light&scale=2.5"):
        page.goto(f"{server}/?{query}")
        expect(page.locator("[data-testid=stMain] h1").first).to_be_visible(timeout=60_000)
        settled(page)
        if "lecture=true" in query:
            open_sidebar(page)
        box = page.get_by_label("Text", exact=True).bounding_box()
        assert box["y"] >= 0 and box["y"] + box["height"] <= 800, (query, box)
    page.goto(f"{server}/")
    expect(page.locator(".st-key-viz_nav summary")).to_have_count(len(SHOWN), timeout=60_000)
    assert page.evaluate(OPEN_SECTIONS_JS) == ["Learn the architecture"]
    page.locator(".st-key-viz_nav summary").filter(has_text="Cause and effect").click()
    page.get_by_role("link", name="4b · Steering & feature ablation").click()
    expect(page.get_by_role("heading", name="Steering & feature ablation", exact=True)).to_be_visible(timeout=60_000)
    expect(page).to_have_url(re.compile(r"/steering"))
    settled(page)
    assert page.evaluate(OPEN_SECTIONS_JS) == ["Cause and effect"]  # the start page's section folded on the way
    page.close()


def test_links_hold_only_what_differs_from_the_defaults(server, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(server + "/tokens")
    settled(page)
    link = page.locator("[data-testid=stSidebar] [data-testid=stCode]").first.inner_text()
    assert not re.search(r"lecture=|theme=|scale=|export=|text=", link), link
    page.goto(server + "/tokens?lecture=true")
    settled(page)
    expect(page).to_have_url(re.compile(r"lecture=true"))
    assert not re.search(r"theme=|scale=|export=", page.url), page.url
    page.close()


def test_timeline_steps_are_drawn_in_the_browser_from_frames(server, browser):
    """Page 6: a step change on the scrubber redraws the same Plotly charts from the frames they hold (the next
    snapshot's own attention, no new chart), the numbers under the slider follow, and the server hears of the step
    (the link and the greedy sample follow); Play moves on by itself and Pause stays; the mode bar has the export
    and fullscreen buttons but no upload to Plotly's cloud; a click on a tile of the all-heads grid shows that head."""
    data = json.loads((ROOT / "assets" / "timelines" / "induction-2l" / "timeline.json").read_text())
    steps = data["steps"]
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{server}/timeline?train_step={steps[20]}&tl_layer=1&tl_head=2")
    head = page.locator(".viz-live-chart").filter(has=page.locator(".gtitle", has_text="Layer 1, head 2 at step"))
    expect(head.locator(".gtitle")).to_have_text(f"Layer 1, head 2 at step {steps[20]:,}", timeout=60_000)
    expect(page.locator(".viz-live-chart")).to_have_count(4)
    page.evaluate("() => document.querySelectorAll('.viz-live-chart').forEach((d, i) => { d.__testMark = i; })")
    titles = {s: page.locator(".viz-live-chart .gtitle").filter(has_text=s) for s in ("Loss at step", "All heads at")}
    slider = page.get_by_role("slider", name="Training step (snapshots, log-spaced)")
    scrubber = page.get_by_test_id("vizScrubber")
    slider.press("ArrowRight")
    expect(head.locator(".gtitle")).to_have_text(f"Layer 1, head 2 at step {steps[21]:,}")
    expect(titles["Loss at step"]).to_have_text(f"Loss at step {steps[21]:,}")
    expect(titles["All heads at"]).to_have_text(f"All heads at step {steps[21]:,}")
    expect(scrubber.get_by_text(f"Step {steps[21]:,}", exact=True)).to_be_visible()
    expect(scrubber.get_by_text(f"{data['train_loss'][21]:.3f}", exact=True)).to_be_visible()
    assert page.evaluate("() => [...document.querySelectorAll('.viz-live-chart')].map(d => d.__testMark)") == [0, 1, 2, 3]
    # the head's drawn weights are the snapshot's own attention on the text (the frame merged into the figure)
    model, tok = load_model(ROOT / "assets" / "timelines" / "induction-2l" / data["snapshots"][21])
    text = page.get_by_label("Text", exact=True).input_value().strip()
    _, cache = model.run_with_cache(torch.tensor([tok.encode(f"{text}\n{text}").ids[:128]]))
    drawn = head.evaluate("d => d._fullData[0].z.map(r => Array.from(r))")
    np.testing.assert_allclose(np.array(drawn, dtype=float), cache["blocks.1.attn.hook_pattern"][0, 2].numpy(), atol=1e-6)
    # the server follows once the user stops: the link and the greedy sample of that step
    expect(page.get_by_role("heading", name=f"What the model writes at step {steps[21]:,}")).to_be_visible()
    expect(page).to_have_url(re.compile(f"train_step={steps[21]}"))
    slider.press("End")
    expect(head.locator(".gtitle")).to_have_text(f"Layer 1, head 2 at step {steps[-1]:,}")
    buttons = page.evaluate("() => [...document.querySelectorAll('.viz-live-chart .modebar-btn')]"
                            ".map(b => b.getAttribute('data-title'))")
    assert "Fullscreen" in buttons and any("Download plot" in b for b in buttons)
    assert not any("Share" in b or "Cloud" in b for b in buttons)
    # Play from the last step starts over from the first; Pause stays where it is, and the server hears of it
    scrubber.get_by_role("button", name="Play").click()
    expect(head.locator(".gtitle")).to_have_text(f"Layer 1, head 2 at step {steps[2]:,}", timeout=30_000)
    scrubber.get_by_role("button", name="Pause").click()
    paused = int(slider.input_value())
    assert 2 <= paused < len(steps) - 1
    page.wait_for_timeout(1500)
    assert int(slider.input_value()) == paused
    expect(page).to_have_url(re.compile(f"train_step={steps[paused]}(&|$)"))
    expect(head.locator(".gtitle")).to_have_text(f"Layer 1, head 2 at step {steps[paused]:,}")
    # a click on head 1 of layer 0 in the grid (its last trace has one point per head)
    page.locator(".viz-live-chart").filter(has=page.locator(".gtitle", has_text="All heads")).scroll_into_view_if_needed()
    x, y = page.evaluate("""() => { const gd = [...document.querySelectorAll('.viz-live-chart')]
            .find(d => d.layout.title.text.startsWith('All heads'));
        const tr = gd._fullData[gd._fullData.length - 1], xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const r = gd.getBoundingClientRect();
        return [r.left + xa._offset + xa.l2p(tr.x[1]), r.top + ya._offset + ya.l2p(tr.y[1])]; }""")
    page.mouse.click(x, y)
    expect(page.locator(".viz-live-chart .gtitle").filter(has_text=f"Layer 0, head 1 at step {steps[paused]:,}")
           ).to_have_count(1, timeout=60_000)
    page.close()


def test_clicking_a_cell_of_the_head_splits_its_score(server, browser):
    """QK attribution (issue 24): a click on a cell of the big head's heatmap makes it the query and key of the
    "Why this score?" section and of the link."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(server + "/attention?layer=2&head=1&query=9&key=3")
    settled(page)
    expect(page.get_by_role("heading", name=re.compile(r"Why this score\? Layer 2, head 1: 9 "))).to_be_visible(timeout=60_000)
    fig = page.locator(".js-plotly-plot").nth(1)  # the all-heads grid, then the head

    def click_cell() -> None:  # cell (query 5, key 2), at its screen position, once the chart takes clicks
        fig.scroll_into_view_if_needed()
        page.wait_for_function("(el) => el.__vizClick === true", arg=fig.element_handle(), timeout=60_000)
        x, y = page.evaluate("""(el) => { const xa = el._fullLayout.xaxis,
            ya = el._fullLayout.yaxis, r = el.getBoundingClientRect();
            return [r.left + xa._offset + xa.l2p(2), r.top + ya._offset + ya.l2p(5)]; }""", fig.element_handle())
        page.mouse.click(x, y)

    # in the full suite the first click is missed (cause not found; never in this file alone): tried again after 5 s
    # rather than 15 (a second click on the same cell asks for the same view)
    until_url(page, click_cell, re.compile(r"query=5.*key=2|key=2.*query=5"), wait_s=5.0)
    expect(page.get_by_role("heading", name=re.compile(r"Why this score\? Layer 2, head 1: 5 .* → 2 "))).to_be_visible(
        timeout=60_000)
    page.close()


def test_clicking_a_token_s_strongest_feature_opens_its_card(server, browser):
    """Features page (issue 24): a click on a cell of the layer × token map of strongest features opens that
    feature's card and puts it in the link."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(server + "/features")
    settled(page)
    # each token's strongest feature, every layer (found by its title: the page's charts are drawn one at a time)
    fig = page.locator(".js-plotly-plot").filter(
        has=page.locator(".gtitle", has_text="Strongest feature of each token")).first
    expect(fig).to_be_visible(timeout=60_000)

    def cell() -> tuple[float, float, str]:
        """Where the cell (row 4, position 3) is now, and the feature id written in it (the heatmap's text)."""
        fig.scroll_into_view_if_needed()
        return page.evaluate("""(el) => { const xa = el._fullLayout.xaxis, ya = el._fullLayout.yaxis,
            r = el.getBoundingClientRect();
            return [r.left + xa._offset + xa.l2p(3), r.top + ya._offset + ya.l2p(4), el._fullData[0].text[4][3]]; }""",
                             fig.element_handle())

    feature = cell()[2][1:]
    for _ in range(6):  # a live chart takes clicks once drawn (its handler is attached after the first draw), and
        x, y, _ = cell()  # the page above it may still move while the rest of the page is drawn
        page.mouse.click(x, y)
        try:
            expect(page).to_have_url(re.compile(rf"feature={feature}\b"), timeout=10_000)
            break
        except AssertionError:
            continue
    expect(page).to_have_url(re.compile(rf"feature={feature}\b"), timeout=60_000)
    expect(page.get_by_role("heading", name=f"Feature L4 F{feature}")).to_be_visible(timeout=60_000)
    page.close()


# ---- Dark theme and mode bar (issue 26, item 5) --------------------------------------------------------------------

from ui_audit import choose_option, figure_titles, surfaces  # noqa: E402

# Relative luminance of a dark surface: the dark theme's widget grey #262730 is 0.02 and its page #0e1117 0.006; the light
# theme's widget grey #f8f8f7 (what the multiselect's arrow box showed) is 0.94, white 1.
DARK_SURFACE = 0.05
SELECT_BOXES = "[data-testid=stSelectbox] .react-aria-ComboBox, [data-testid=stMultiSelect] .react-aria-ComboBox"


def light_surfaces(page, selector: str) -> list[dict]:
    """The boxes under ``selector`` that show a light colour (a chosen value's chip, in the primary colour, aside);
    fails when nothing matches, so that a renamed element cannot pass unseen."""
    found = surfaces(page, selector)
    assert found, f"nothing matches {selector}"
    return [s for s in found if s["luminance"] > DARK_SURFACE and not s["chip"]]


def assert_titles_clear(page, url: str) -> None:
    """Every figure has a mode bar (drawn on hover; its box is laid out all along) that covers none of its titles; no
    title sticks out of its figure or runs into another of its texts (tick labels on top, annotations, legend)."""
    figures = figure_titles(page)
    assert any(fig["titles"] for fig in figures), url
    for fig in figures:
        assert fig["modebar"] and fig["modebar"]["right"] > fig["modebar"]["left"], (url, fig)
        assert not fig["covered"] and not fig["cut"] and not fig["crowded"], (url, fig["titles"], fig["modebar"])


@pytest.mark.parametrize("size", [(1280, 800), (1920, 1080)])
def test_dark_theme_draws_tables_and_selects_dark_and_no_mode_bar_covers_a_title(server, browser, size):
    """In the dark theme (painted by CSS over Streamlit's light one): the inspector's tables are HTML tables in dark
    colours (not the canvas grid, drawn in the light theme's colours), every select and multiselect box is dark with
    its arrow box and the area beside its chips, and so are their open lists; every text at least 4.5:1. On pages of
    figures, in every width of column, no mode bar covers a figure's title, and no title is cut or crowded."""
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    for slug in ("", "attention", "inspector", "interventions"):
        url = f"{server}/{slug}?theme=dark"
        in_place = visit(page, url)
        expect(page.locator("[data-testid=stMain] h1").first).to_be_visible(timeout=60_000)
        expect(page.locator(".js-plotly-plot .gtitle").first).to_be_attached(timeout=60_000)  # a figure is drawn
        settled_after(page, in_place)
        assert_titles_clear(page, url)
        assert light_surfaces(page, SELECT_BOXES) == [], url
        assert low_contrast(page) == [], url
    # the inspector: the architecture table, and the weight statistics in their expander
    visit(page, f"{server}/inspector?theme=dark")
    settled(page)
    page.get_by_text("All statistics as a table").click()
    expect(page.locator("[data-testid=stTable]")).to_have_count(2)
    assert page.locator("[data-testid=stDataFrame]").count() == 0
    assert light_surfaces(page, "[data-testid=stTable]") == []
    assert low_contrast(page) == []
    # Cause and effect: a head switched off (a chip beside the multiselect's arrow), then each kind of open list
    visit(page, f"{server}/interventions?theme=dark")
    settled(page)
    choose_option(page, "Heads switched off", "L0H1")
    page.keyboard.press("Escape")
    expect(page.locator("[data-testid=stMultiSelect] [data-tag]")).to_have_count(1)
    settled(page)
    assert light_surfaces(page, SELECT_BOXES) == []
    for label, listbox in (("Heads switched off", "stMultiSelectDropdown"),
                           ("Prediction after position", "stSelectboxVirtualDropdown")):
        open_select(page, label)
        page.wait_for_function("""(s) => { let e = document.querySelector(s);  // the list is there and has faded in
            if (!e) return false;
            for (; e; e = e.parentElement) if (getComputedStyle(e).opacity !== '1') return false; return true; }""",
                               arg=f"[data-testid={listbox}]")
        assert light_surfaces(page, f"[data-testid={listbox}]") == [], label
        assert low_contrast(page) == [], label
        page.keyboard.press("Escape")
        expect(page.get_by_role("listbox")).to_have_count(0)
    page.close()
