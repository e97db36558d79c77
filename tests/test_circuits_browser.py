"""The Circuits page in a real browser (Debian's Chromium through Playwright) against a real ``streamlit run``:
thresholds and pins redraw in the browser before the server hears of them, hover cards show a node's card, pins
reach the link, and the link reopens them."""

from __future__ import annotations

import json
import time
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import expect

from test_browser import browser, start_server, stop  # noqa: F401  (fixtures)

GRAPH = ".viz-cg .js-plotly-plot"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc, url = start_server({"VIZ_GATE_SECONDS": "inf"}, tmp_path_factory.mktemp("server") / "streamlit.log")
    try:
        yield url
    finally:
        stop(proc)


def drawn_nodes(page) -> int:
    """Markers of the node traces drawn now (feature, error, token, logit)."""
    return page.evaluate("""() => {
        const gd = document.querySelector('.viz-cg .cg-plot');
        return gd.data.filter(t => ['feature','error','token','logit'].includes(t.name))
                      .reduce((n, t) => n + t.x.length, 0);
    }""")


def open_graph(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector(GRAPH + " .scatterlayer .trace", timeout=300_000)
    page.wait_for_function("() => document.querySelector('[data-testid=stApp]')"
                           ".getAttribute('data-test-script-state') !== 'running'", timeout=120_000)


def test_thresholds_and_pins_redraw_in_the_browser_and_reach_the_link(server, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    open_graph(page, server + "/circuits")
    before = drawn_nodes(page)
    assert before > 20
    # lower the node threshold: fewer nodes, drawn at once (the server hears of it only after the user stops)
    page.evaluate("""() => { const s = document.querySelector('.viz-cg .node-t input');
                             s.value = '0.3'; s.dispatchEvent(new Event('input', {bubbles: true})); }""")
    t0 = time.perf_counter()
    page.wait_for_function(f"() => {{ const gd = document.querySelector('.viz-cg .cg-plot');"
                           f" return gd.data.filter(t => ['feature','error','token','logit'].includes(t.name))"
                           f".reduce((n, t) => n + t.x.length, 0) < {before}; }}", timeout=5_000)
    assert time.perf_counter() - t0 < 0.35  # before the report's debounce (350 ms): no round trip
    # hover a feature node: its card in the side panel
    page.evaluate("""() => { const gd = document.querySelector('.viz-cg .cg-plot');
        const c = gd.data.findIndex(t => t.name === 'feature');
        gd.emit('plotly_hover', {points: [{curveNumber: c, pointNumber: 0, customdata: gd.data[c].customdata[0]}]}); }""")
    expect(page.locator(".viz-cg .cg-side .cg-what")).to_contain_text("transcoder")
    # shift-click it: pinned (its outline), and the link holds it once the server has heard
    node = page.evaluate("""() => { const gd = document.querySelector('.viz-cg .cg-plot');
        const c = gd.data.findIndex(t => t.name === 'feature');
        const id = gd.data[c].customdata[0];
        gd.emit('plotly_click', {points: [{curveNumber: c, pointNumber: 0, customdata: id}], event: {shiftKey: true}});
        return id; }""")
    expect(page.locator(".viz-cg .cg-side .cg-pin")).to_have_text("Unpin")
    page.wait_for_function("() => location.search.includes('cg=')", timeout=30_000)
    view = json.loads(parse_qs(urlparse(page.url).query)["cg"][0])
    assert view["pinned"] == [node] and view["node_t"] == pytest.approx(0.3)
    # the link reopens the pin and the threshold
    other = browser.new_page(viewport={"width": 1280, "height": 900})
    open_graph(other, page.url)
    assert other.evaluate("() => document.querySelector('.viz-cg .node-t input').value") == "0.3"
    assert other.evaluate("""(id) => { const gd = document.querySelector('.viz-cg .cg-plot');
        const c = gd.data.findIndex(t => t.name === 'feature');
        const i = gd.data[c].customdata.indexOf(id);
        return i >= 0 && gd.data[c].marker.line.color[i] !== gd.data[c].marker.line.color[(i + 1) % gd.data[c].x.length]
               || gd.data[c].x.length === 1; }""", node)
    # nothing from the model is drawn as markup: tick labels are text
    assert other.locator(GRAPH + " .xtick text a, " + GRAPH + " .xtick text b").count() == 0
    page.close()
    other.close()


def test_the_downloaded_graph_uploads_again(server, browser):
    """The download (written when clicked) is Neuronpedia's JSON of this graph; uploaded again, the page draws it
    from the file (read once per upload). Files that are not graphs: tests/test_circuits_io.py."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    open_graph(page, server + "/circuits")
    with page.expect_download(timeout=60_000) as got:
        page.get_by_role("button", name="Download the graph (Neuronpedia JSON)").click()
    data = json.loads(open(got.value.path(), "rb").read())
    assert data["metadata"]["slug"] == "circuit" and len(data["nodes"]) > 20 and data["links"]
    page.get_by_text("Open a graph file (Neuronpedia JSON)").click()
    upload = page.locator("[data-testid=stFileUploaderDropzoneInput]")
    upload.set_input_files(files=[{"name": "g.json", "mimeType": "application/json",
                                   "buffer": json.dumps(data).encode()}])
    expect(page.get_by_text("Showing the uploaded graph circuit")).to_be_visible(timeout=60_000)
    expect(page.get_by_text(f"({len(data['nodes']):,} nodes")).to_be_visible()
    page.wait_for_selector(GRAPH + " .scatterlayer .trace", timeout=60_000)
    page.close()
