"""The grids' head and layer labels drawn by Plotly in a real browser (Debian's Chromium through Playwright), without
a server: the start page's model map and the attention page's all-heads grid of a 16-layer × 32-head model
(Llama-3.2-1B's shape) and an 80 × 64 one, at the widths the app gives them, measured as Plotly drew them. On the
code before issue 51, the map's 33 column labels stood upright over its title at 1280 × 800."""

import plotly
import pytest

from helpers import plotly_page
from test_figures import GRID_SHAPES, grid_figures
from viz_ui.views.figures import merge_layout, plain_figure, style_plain

# (figure width in px, font scale): the figure's width in the app at 1280 × 800, measured in Chromium: the start page's
# left column and the attention page's main column, and both in lecture mode at the largest font scale (the sidebar
# folded, as lecture mode opens)
SIZES = {"model map": [(470, 1.0), (1160, 2.5)], "all heads": [(860, 1.0), (1160, 2.5)]}

# Boxes of what Plotly drew: the title, the x and y tick labels, the figure; which labels overlap the title, each
# other, or stick out of the figure.
BOXES = """() => {
  const gd = document.querySelector('.js-plotly-plot'), box = e => e.getBoundingClientRect();
  const over = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5
                         && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  const title = box(gd.querySelector('.gtitle')), fig = box(gd);
  const labels = sel => [...gd.querySelectorAll(sel)].map(t => ({text: t.textContent, ...box(t).toJSON()}));
  const xs = labels('.xtick text'), ys = labels('.ytick text');
  const pairs = ls => ls.flatMap((a, i) => ls.slice(i + 1).filter(b => over(a, b)).map(b => [a.text, b.text]));
  const all = [...xs, ...ys];
  return {x: xs.map(l => l.text), y: ys.map(l => l.text), overTitle: all.filter(l => over(l, title)).map(l => l.text),
          xPairs: pairs(xs), yPairs: pairs(ys),
          cut: all.filter(l => l.left < fig.left - 1 || l.right > fig.right + 1 || l.top < fig.top - 1)
                  .map(l => l.text),
          plotWidth: gd._fullLayout.xaxis._length};
}"""


@pytest.fixture(scope="module")
def page():
    with plotly_page("<div id='fig'></div>") as page:
        yield page


@pytest.mark.parametrize("shape", GRID_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_grid_labels_drawn_by_plotly_stay_clear_of_the_title_and_of_each_other(page, shape, monkeypatch):
    # the app's template: an import of Streamlit after viz_ui.views.figures (here, in a test run) sets Streamlit's
    monkeypatch.setattr(plotly.io.templates, "default", "viz_light")
    for name, fig in grid_figures(*shape).items():
        for width, scale in SIZES[name]:
            styled = style_plain(plain_figure(fig), scale)  # as a live chart draws it (viz_ui.app.live_chart)
            styled["layout"] = merge_layout(styled["layout"], {"width": width})
            page.evaluate("""async (json) => { const f = JSON.parse(json); const div = document.getElementById('fig');
                Plotly.purge(div); await Plotly.newPlot(div, f.data, f.layout, {displaylogo: false});
                await new Promise(done => setTimeout(done, 300)); }""",  # automargin redraws after the first draw
                          plotly.io.json.to_json_plotly(styled))
            drawn = page.evaluate(BOXES)
            where = (name, width, scale, drawn["plotWidth"])
            assert drawn["x"][0] == "H0" and len(drawn["x"]) >= 6, (where, drawn["x"])
            assert drawn["overTitle"] == [], (where, drawn["overTitle"])
            assert drawn["xPairs"] == [] and drawn["yPairs"] == [], (where, drawn["xPairs"][:3], drawn["yPairs"][:3])
            assert drawn["cut"] == [], (where, drawn["cut"])
