"""viz_ui/app/live_chart.js in a real browser (Debian's Chromium through Playwright), without a server: the component's
own module, called as Streamlit calls it, with the data live_chart.py packs, in an otherwise empty page with the plotly
package's plotly.min.js."""

import base64

import numpy as np
import pytest

from viz_ui.app import live_chart
from viz_ui.app.live_chart import pack, plotly_json
from helpers import plotly_page
from viz_ui.views.figures import attention_heatmap, plain_figure, style_plain

JS = live_chart._JS  # the component's module as Streamlit gets it: plotly_loader.js, then live_chart.js
N = 12  # tokens: every figure has the same height, so a chart may hold its margins from one to the next

# The module, loaded once; every Plotly.react it makes is recorded: the margins it asked for, the margins Plotly drew
# with, and the plot area's box. ``show(base64)`` calls the component as Streamlit does, with the packed data.
SETUP = """async (source) => {
  const module = await import(URL.createObjectURL(new Blob([source], {type: "text/javascript"})));
  window.__draws = [];
  const react = Plotly.react;
  Plotly.react = (...args) => react(...args).then(gd => {
    const box = gd.querySelector(".nsewdrag").getBoundingClientRect();
    window.__draws.push({asked: args[2].margin, drawn: {...gd._fullLayout._size}, left: box.left, bottom: box.bottom});
    return gd;
  });
  const host = document.getElementById("host");
  window.show = encoded => module.default({parentElement: host, setTriggerValue: () => {},
                                           data: Uint8Array.from(atob(encoded), c => c.charCodeAt(0))});
}"""

# Every tick label inside the figure's box (none cut by too small a margin)
CUT = """() => { const fig = document.querySelector(".js-plotly-plot").getBoundingClientRect();
  return [...document.querySelectorAll(".js-plotly-plot .xtick text, .js-plotly-plot .ytick text")]
    .map(t => [t.textContent, t.getBoundingClientRect()])
    .filter(([, r]) => r.left < fig.left - 1 || r.right > fig.right + 1 || r.bottom > fig.bottom + 1)
    .map(([text]) => text); }"""


def payload(word: str, revision: str, chart: str = "head") -> str:
    """A live chart's packed data (base64) for a head heatmap of N tokens, each labelled ``word``, in the chart whose
    key is ``chart``."""
    rng = np.random.default_rng(len(word))
    weights = np.tril(rng.random((N, N)))
    weights /= weights.sum(1, keepdims=True)
    figure = style_plain(plain_figure(attention_heatmap(weights, [word] * N, "Layer 0, head 0: attention weights")))
    data = {"config": {"displaylogo": False}, "src": "unused", "clickable": False, "revision": revision,
            "chart": chart}
    return base64.b64encode(pack(data, figure=plotly_json(figure))).decode("ascii")


@pytest.fixture(scope="module")
def page():
    with plotly_page("<div id='host' style='width:800px'></div>") as page:
        page.evaluate(SETUP, JS)
        yield page


def draw(page, word: str, revision: str, count: int, idle_ms: int = 1500, chart: str = "head") -> list[dict]:
    """Show the heatmap labelled ``word`` in the chart ``chart``; the drawings it made, once ``count`` of them are done
    and the page has been idle ``idle_ms`` (a chart fits margins that are too wide when the page is idle)."""
    start = page.evaluate("window.__draws.length")
    page.evaluate("encoded => window.show(encoded)", payload(word, revision, chart))
    page.wait_for_function(f"window.__draws.length >= {start + count}", timeout=20_000)
    page.wait_for_timeout(idle_ms)
    return page.evaluate(f"window.__draws.slice({start})")


def test_a_chart_holds_its_margins_while_the_labels_fit_and_fits_them_when_idle(page):
    first = draw(page, "mmmmmmmm", "a", 1)
    assert len(first) == 1 and first[0]["asked"]["l"] == 10  # the figure's own margins: Plotly sizes them
    room = first[0]["drawn"]
    assert room["l"] > 40 and room["b"] > 120 and room["r"] > 60  # the y and x tick labels, the colour bar
    assert page.evaluate(CUT) == []

    # the same labels on new numbers: drawn with the room Plotly found last time (and a few pixels of slack on the
    # sides the texts pushed), which Plotly keeps (so it drew the chart once); the plot stays where it was
    same = draw(page, "mmmmmmmm", "b", 1)
    assert len(same) == 1
    for side in "lrb":
        assert room[side] < same[0]["asked"][side] <= room[side] + 4, side
    assert same[0]["asked"]["t"] == room["t"] == 60  # a side the texts did not push keeps the figure's own
    assert {k: same[0]["drawn"][k] for k in "lrtb"} == same[0]["asked"]
    assert same[0]["left"] == pytest.approx(first[0]["left"], abs=4)
    assert same[0]["bottom"] == pytest.approx(first[0]["bottom"], abs=4)
    assert page.evaluate(CUT) == []

    # far shorter labels: drawn at once in the held room, then with the figure's own margins when the page is idle
    short = draw(page, "a", "c", 2)
    assert len(short) == 2
    assert {k: short[0]["drawn"][k] for k in "lrtb"} == short[0]["asked"] == same[0]["asked"]
    assert short[1]["asked"]["l"] == 10
    assert short[1]["drawn"]["l"] < room["l"] - 24 and short[1]["drawn"]["b"] < room["b"] - 24
    assert page.evaluate(CUT) == []

    # longer labels than any before: Plotly grows the margins, nothing is cut; the grown sides get headroom
    long = draw(page, "mmmmmmmmmmmmmmmm", "d", 1)
    assert len(long) == 1
    grown = long[0]["drawn"]
    assert grown["l"] > room["l"] + 30 and grown["b"] > room["b"] + 30
    assert page.evaluate(CUT) == []
    again = draw(page, "mmmmmmmmmmmmmmmm", "e", 1)
    assert again[0]["asked"]["l"] == grown["l"] + 10 and again[0]["asked"]["b"] == grown["b"] + 10


REMOVE = """() => { const host = document.getElementById("host"); Plotly.purge(host.firstChild);
  host.firstChild.remove(); }"""  # the chart leaves the page (another page of the app is shown)


def test_fitted_margins_are_those_plotly_gives_the_figure_drawn_afresh(page):
    """After the idle fit, a chart's margins are those of the same figure drawn for the first time: held margins never
    leave a chart smaller than a fresh one for longer than it takes the page to be idle."""
    draw(page, "mmmmmmmmmmmm", "f", 1)
    fitted = draw(page, "ab", "g", 2)[-1]["drawn"]
    page.evaluate(REMOVE)
    fresh = draw(page, "ab", "h", 1, chart="another")[-1]
    assert fresh["asked"]["l"] == 10  # a chart key never drawn before: the figure's own margins
    assert fitted == fresh["drawn"]


def test_a_chart_shown_again_draws_with_the_margins_it_had(page):
    """A page opened again (its charts mounted anew under the same keys) draws each chart with the margins it was last
    drawn with, once."""
    page.evaluate(REMOVE)
    last = draw(page, "mmmmmmmm", "i", 1, chart="again")[-1]
    assert last["asked"]["l"] == 10
    page.evaluate(REMOVE)
    again = draw(page, "mmmmmmmm", "j", 1, chart="again")
    assert len(again) == 1
    assert again[0]["asked"]["l"] > 10 and {k: again[0]["drawn"][k] for k in "lrtb"} == again[0]["asked"]
    for side in "lrtb":
        assert last["drawn"][side] <= again[0]["asked"][side] <= last["drawn"][side] + 4, side
