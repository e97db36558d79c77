"""The output page's temperature frames (viz_ui/views/output.py): each is the chart the server draws at that
temperature, and the browser draws it as soon as the slider moves (tests/test_browser.py)."""

import json

import numpy as np
import pytest

from viz_ui.analysis.generation import next_token_view
from viz_ui.views.figures import style_for_display, topk_bar
from viz_ui.views.output import (FRAME_VOCAB, TEMPERATURES, next_token_title, temperature_frames,
                                 temperature_index)
from viz_ui.views.tables import topk_table


def page_figure(logits, vocab, labels, pos, temperature, top_k, top_p, n_bars, actual, scale):
    """The next-token chart as pages/output.py builds it (table, highlight, title), styled for the display."""
    from viz_ui.analysis.generation import shown_bars
    probs = next_token_view(logits, temperature, top_k, top_p, actual).probs
    table = topk_table(probs, logits, vocab, len(shown_bars(probs, n_bars)))
    highlight = table["id"].tolist().index(actual) if actual in set(table["id"]) else None
    fig = topk_bar(table["token"].tolist(), table["probability"].to_numpy(),
                   next_token_title(labels, pos, temperature, False), highlight)
    return style_for_display(fig, scale)


@pytest.mark.parametrize("top_k, top_p, scale", [(0, 1.0, 1.0), (5, 1.0, 1.0), (0, 0.6, 1.5)])
def test_each_frame_is_the_chart_the_page_draws_at_that_temperature(top_k, top_p, scale):
    rng = np.random.default_rng(0)
    vocab = [f"tok{i}" for i in range(300)]
    logits = (rng.standard_normal(300) * 3).astype(np.float32)
    labels, pos, actual, n_bars = ["a", "b", "c"], 2, int(np.argsort(-logits)[3]), 8
    frames = json.loads(temperature_frames(logits, vocab, labels, pos, top_k, top_p, n_bars, actual, False, scale))
    assert len(frames) == len(TEMPERATURES) == 61
    keys = {json.dumps(sorted(f["data"][0])) + json.dumps(sorted(f["layout"])) for f in frames}
    assert len(keys) == 1  # every frame updates the same fields
    n_shown = set()
    for temperature in (0.0, 0.05, 0.5, 1.0, 2.0, 3.0):
        frame = frames[temperature_index(temperature)]
        fig = page_figure(logits, vocab, labels, pos, temperature, top_k, top_p, n_bars, actual, scale)
        bar, bars, layout = fig.data[0], frame["data"][0], fig.layout
        np.testing.assert_allclose(bars["x"], bar.x, rtol=1e-6)
        assert bars["y"] == list(bar.y) and bars["customdata"] == list(bar.customdata)
        assert bars["text"] == list(bar.text) and bars["marker"]["color"] == list(bar.marker.color)
        assert frame["layout"]["title"]["text"] == layout.title.text
        assert frame["layout"]["height"] == layout.height
        assert frame["layout"]["xaxis"]["range"] == list(layout.xaxis.range)
        assert frame["layout"]["yaxis"]["ticktext"] == list(layout.yaxis.ticktext)
        assert frame["layout"]["yaxis"]["tickvals"] == list(layout.yaxis.tickvals)
        n_shown.add(len(bars["x"]))
    # the frames differ where the chart does: T = 0 is one bar (greedy), higher T flattens the bars
    assert 1 in n_shown
    hot, cold = frames[temperature_index(3.0)]["data"][0]["x"], frames[temperature_index(0.5)]["data"][0]["x"]
    assert hot[0] < cold[0]


def test_temperature_index_is_the_slider_position():
    assert [temperature_index(t) for t in (0.0, 0.05, 1.0, 2.95, 3.0)] == [0, 1, 20, 59, 60]
    assert all(TEMPERATURES[temperature_index(t)] == t for t in TEMPERATURES)


def test_large_vocabularies_get_no_frames():
    logits = np.zeros(FRAME_VOCAB + 1, dtype=np.float32)
    assert temperature_frames(logits, ["x"] * len(logits), ["a"], 0, 0, 1.0, 10, None, False) is None
