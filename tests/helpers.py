"""The tests' helpers for driving the app and child interpreters (fixtures stay in ``conftest.py``; Hugging Face
models in ``hf_models.py``; a model whose tokens and name are hostile Markdown and HTML in ``hostile_ui.py``; in-browser
audits in ``ui_audit.py``).

- :func:`open_page`: the app in Streamlit's AppTest on one page, the one way every test opens a page
  (:func:`open_with_model`: with an uploaded model chosen);
- :data:`PAGES`: the pages the every-page tests open, read from the ``pages/`` folder (a new page is tested there
  unless :data:`OWN_TESTS` names the file that tests it);
- :func:`figures`, :func:`figure_titled`: the Plotly figures a page shows;
- :func:`child_env`: the environment of a child Python process that imports this checkout's packages;
- :func:`plotly_page`: a Chromium page with Plotly's code, for figures drawn without a server.
"""

from __future__ import annotations

import contextlib
import os

from streamlit.testing.v1 import AppTest

from conftest import ROOT, shown_figures

# Pages the every-page tests (tests/test_app.py and the families' tests) leave out, with the file that opens them:
# they need a model or files the shipped default lacks (experts, an encoder-decoder's partner, dictionaries), wait for
# a button, or start background work.
OWN_TESTS = {
    "pages/circuits.py": "tests/test_circuits_page.py, tests/test_circuits_browser.py",
    "pages/features.py": "tests/test_features_page.py",
    "pages/interventions.py": "tests/test_gated.py, tests/test_intervention_views.py",
    "pages/moe.py": "tests/test_moe.py",
    "pages/steering.py": "tests/test_steering_page.py",
    "pages/timeline.py": "tests/test_timeline.py",
    "pages/train.py": "tests/test_live.py",
}
PAGES = [path for path in (f"pages/{p.name}" for p in sorted((ROOT / "pages").glob("*.py"))) if path not in OWN_TESTS]


def open_page(page: str | None = None, text: str | None = None, query: dict | None = None, *,
              session: dict | None = None, start: bool = True, timeout: float = 120,
              errors: bool = True) -> AppTest:
    """The app (``app.py``) in AppTest, on ``page`` (a path such as ``"pages/attention.py"``; None: the start page).

    ``query``: the URL's query parameters; ``session``: session-state entries set before the first run (a session
    model, a shared selection); ``start``: run the start page first, as a visitor who opens the app and then clicks
    a link (False: open ``page`` directly, as a link to it does); ``text``: typed into the sidebar's text box after
    the start page's run; ``errors``: False also fails on an ``st.error`` shown. Fails on any exception the run
    raised. ``timeout``: seconds each run may take."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    for key, value in (session or {}).items():
        at.session_state[key] = value
    if start or text is not None:
        at.run()
    if text is not None:
        at.text_area(key="text").set_value(text).run()
    if page:
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    if not errors:
        assert not at.error, [e.value for e in at.error]
    return at


def open_with_model(models: dict, name: str, page: str | None = None, text: str = "The cat sat on the mat. The cat",
                    head: tuple[int, int] | None = None, errors: bool = True) -> AppTest:
    """:func:`open_page` for a visitor who uploaded ``models[name]`` (a ``(model, tokenizer)`` pair) and chose it,
    with ``text`` in the text box and, when given, ``head`` = (layer, head) selected (else the views open on the
    most salient head); the sidebar shows that model chosen."""
    from viz_ui.app.state import SessionModel

    model, tok = models[name]
    state = {"_session_models": {f"upload:{name}": SessionModel(name, model, tok, name)}, "_model": name,
             "_text": text}
    if head is not None:
        state["_layer"], state["_head"] = head
    at = open_page(page, session=state, errors=errors)
    assert at.selectbox(key="model").value == name
    return at


def figures(at: AppTest) -> list[dict]:
    """Every Plotly figure the page shows, as Plotly JSON (:func:`conftest.shown_figures`)."""
    return shown_figures(at)


def figure_titled(at: AppTest, start: str) -> dict | None:
    """The first figure whose title starts with ``start``; None when the page shows none."""
    return next((f for f in figures(at) if f["layout"]["title"]["text"].startswith(start)), None)


def child_env(inherit: bool = True, **extra: str) -> dict[str, str]:
    """The environment of a child Python that imports this checkout's packages (``viz_model``, ``viz_ui``) and the
    tests' modules (``conftest``): ``PYTHONPATH`` names the checkout and ``tests/`` first, so a child tests the same
    code as its parent even where another checkout of the project is installed. ``inherit``: start from this
    process's environment (False: from nothing but ``extra``)."""
    base = dict(os.environ) if inherit else {}
    paths = [str(ROOT), str(ROOT / "tests"), *filter(None, [base.get("PYTHONPATH")])]
    return {**base, "PYTHONPATH": os.pathsep.join(paths), **extra}


@contextlib.contextmanager
def plotly_page(body: str):
    """A page of Debian's Chromium (through Playwright, 1280 × 800) holding the HTML ``body`` and the plotly package's
    ``plotly.min.js`` (the app's: :data:`viz_ui.app.preload.PLOTLY_JS`): for figures and charts drawn without a
    server."""
    from playwright.sync_api import sync_playwright

    from viz_ui.app.preload import PLOTLY_JS

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                    args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_content(f"<html><body>{body}</body></html>")
            page.add_script_tag(content=PLOTLY_JS.read_text(encoding="utf-8"))
            yield page
        finally:
            browser.close()
