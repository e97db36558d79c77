"""Figures named by what they are built from (viz_ui/views/figure_spec.py) and written once per server for every
session that shows them (viz_ui/app/live_chart.py: figure_json)."""

import base64
import json
import threading

import numpy as np
import plotly.io as pio
import pytest

import viz_ui.app.live_chart as live_chart
from viz_ui.views.figure_spec import FigureSpec, digest
from viz_ui.views.figures import (attention_grid, attention_grid_figure, attention_heatmap, grid_pooled, plain_figure,
                                  style_plain)
from viz_ui.views.qk import TermGrid, qk_heatmap

LABELS = ["The", " cat", " sat", "."]


def _matrix(seed=0):
    return np.tril(np.random.default_rng(seed).random((4, 4), dtype=np.float32))


def test_equal_content_gives_equal_keys_and_any_change_another():
    m = _matrix()
    key = FigureSpec(attention_heatmap, m, LABELS, "t", "weights", offset=2).key
    assert key == FigureSpec(attention_heatmap, m.copy(), list(LABELS), "t", "weights", offset=2).key
    # a strided view (a window of a larger matrix) is digested by its content
    big = np.zeros((6, 6), dtype=np.float32)
    big[1:5, 1:5] = m
    assert key == FigureSpec(attention_heatmap, big[1:5, 1:5], LABELS, "t", "weights", offset=2).key
    changed = m.copy()
    changed[3, 0] += 1e-6
    others = [FigureSpec(attention_heatmap, changed, LABELS, "t", "weights", offset=2),
              FigureSpec(attention_heatmap, m.astype(np.float64), LABELS, "t", "weights", offset=2),
              FigureSpec(attention_heatmap, m, ["The", " cat", " sat", "!"], "t", "weights", offset=2),
              FigureSpec(attention_heatmap, m, ["The", " ca", "t sat", "."], "t", "weights", offset=2),
              FigureSpec(attention_heatmap, m, LABELS, "t", "scores", offset=2),
              FigureSpec(attention_heatmap, m, LABELS, "t", "weights", offset=3),
              FigureSpec(attention_heatmap, m, LABELS, "t", "weights", offset=2.0),
              FigureSpec(attention_heatmap, m, LABELS, "t", "weights", offset=2, display=(1.0, "dark")),
              FigureSpec(attention_grid_figure, m, LABELS, "t", "weights", offset=2)]
    keys = [s.key for s in others]
    assert None not in keys and key not in keys and len(set(keys)) == len(keys)


def test_what_cannot_be_digested_has_no_key_and_is_built_each_time(monkeypatch):
    assert digest(attention_heatmap, (np.array(["a", None], dtype=object),), {}) is None
    assert digest(attention_heatmap, (object(),), {}) is None
    built = []

    def build(m, unused):
        built.append(1)
        return attention_heatmap(m, LABELS, "t")

    spec = FigureSpec(build, _matrix(), unused=object())  # an argument with no digest
    assert spec.key is None
    first = live_chart.figure_json(spec)
    second = live_chart.figure_json(spec)
    assert len(built) == 2 and first == second


def test_a_dataclass_of_arrays_is_digested_by_its_fields():
    grid = TermGrid(["embed", "other"], ["L0H1", "other"], np.array([[0.5, -0.25], [1.0, 0.0]]), None)
    same = TermGrid(["embed", "other"], ["L0H1", "other"], np.array([[0.5, -0.25], [1.0, 0.0]]), None)
    other = TermGrid(["embed", "other"], ["L0H1", "other"], np.array([[0.5, -0.25], [1.0, 0.0]]), 0.1)
    assert FigureSpec(qk_heatmap, grid, "t").key == FigureSpec(qk_heatmap, same, "t").key
    assert FigureSpec(qk_heatmap, grid, "t").key != FigureSpec(qk_heatmap, other, "t").key


@pytest.fixture
def payloads(monkeypatch):
    cache = live_chart._Payloads()
    monkeypatch.setattr(live_chart, "PAYLOADS", cache)
    return cache


@pytest.mark.parametrize("style", [None, (1.0, "light"), (1.6, "dark")])
def test_a_spec_is_sent_as_the_figure_built_from_it(payloads, style):
    """The text a live chart gets for a spec, from the cache or not, is the figure's own JSON (the same numbers)."""
    m = _matrix(1)
    spec = FigureSpec(attention_heatmap, m, LABELS, "Layer 0, head 1", "weights")
    plain = plain_figure(attention_heatmap(m, LABELS, "Layer 0, head 1", "weights"))
    expected = json.loads(pio.json.to_json_plotly(plain if style is None else style_plain(plain, *style)))
    first, revision = live_chart.figure_json(spec, style)
    again, same_revision = live_chart.figure_json(FigureSpec(attention_heatmap, m.copy(), LABELS, "Layer 0, head 1",
                                                             "weights"), style)
    assert json.loads(first) == expected and again is first and revision == same_revision
    assert np.allclose(np.frombuffer(base64.b64decode(json.loads(first)["data"][0]["z"]["bdata"]),
                                     dtype="<f4").reshape(4, 4), m)
    other, other_revision = live_chart.figure_json(FigureSpec(attention_heatmap, _matrix(2), LABELS,
                                                              "Layer 0, head 1", "weights"), style)
    assert json.loads(other) != expected and other_revision != revision


def test_sessions_asking_at_once_build_a_figure_once(payloads):
    calls = []
    lock = threading.Lock()

    def build(m, labels):
        with lock:
            calls.append(1)
        return attention_heatmap(m, labels, "t")

    m = _matrix(3)
    results = []
    barrier = threading.Barrier(6)

    def session():
        barrier.wait()
        results.append(live_chart.figure_json(FigureSpec(build, m.copy(), list(LABELS)), (1.0, "light")))

    threads = [threading.Thread(target=session) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(results) == 6 and len({text for text, _ in results}) == 1
    live_chart.figure_json(FigureSpec(build, m, LABELS), (1.6, "dark"))  # another style: written once more
    assert len(calls) == 2


def test_the_cache_keeps_the_most_recently_used_within_its_bound(monkeypatch):
    cache = live_chart._Payloads(limit=1000)
    for i in range(5):
        cache.put(("k", i), "x" * 300)
    assert cache.size <= 1000 and [k[1] for k in cache.items] == [2, 3, 4]
    assert cache.get(("k", 2)) is not None  # used: kept longer than 3
    cache.put(("k", 5), "y" * 300)
    assert [k[1] for k in cache.items] == [4, 2, 5]
    cache.put(("k", 6), "z" * 2000)  # larger than the whole bound: not kept, nothing dropped
    assert cache.get(("k", 6)) is None and [k[1] for k in cache.items] == [4, 2, 5]


@pytest.mark.parametrize("n,pooled_by", [(4, 1), (64, 1), (300, 1), (40, 4)])
def test_grid_pooled_says_what_attention_grid_draws(n, pooled_by):
    patterns = np.random.default_rng(0).random((3, 4, n, n), dtype=np.float32)
    fig, pooled = attention_grid(patterns, pooled_by=pooled_by)
    assert grid_pooled(patterns.shape, pooled_by) == pooled
    assert attention_grid_figure(patterns, pooled_by=pooled_by).to_json() == fig.to_json()


def test_a_live_charts_json_is_plotlys_own_text_with_or_without_non_finite_numbers():
    """plotly_json writes what plotly.io.json.to_json_plotly writes, character for character: a figure whose typed
    array's base64 happens to hold "NaN" (Plotly then decodes and encodes its text again; we skip that pass), labels
    that could end an HTML script element, and NaN and ±inf in plain lists (written as null, by Plotly)."""
    rng = np.random.default_rng(3)
    for _ in range(500):  # a matrix whose base64 holds "NaN": Plotly's second pass, the one skipped
        m = rng.random((64, 64)).astype(np.float32)
        plain = plain_figure(attention_heatmap(m, [f"</script>{i}" for i in range(64)], "x < y > z", "weights"))
        if "NaN" in pio.json.to_json_plotly(plain, engine="json"):
            break
    else:
        raise AssertionError("no matrix with NaN in its base64")
    for figure in (plain, style_plain(plain, 1.6, "dark"),
                   {"data": [{"type": "scatter", "x": [1.0, float("nan"), 3.0], "y": [float("inf"), -float("inf"), 0.5]}],
                    "layout": {"title": {"text": "a/b"}}}):
        expected = pio.json.to_json_plotly(figure, engine="json")
        assert live_chart.plotly_json(figure) == expected
    assert '"x":[1.0,null,3.0]' in expected and "</" not in live_chart.plotly_json(plain)


def test_a_live_charts_data_is_packed_as_bytes_and_unpacked_whole():
    """The live chart's data travels as bytes (live_chart.pack: a JSON header line, then the figure's and frames' text,
    not escaped into Streamlit's JSON); unpack gives back every field and text, any Unicode included."""
    figure = json.dumps({"data": [{"type": "bar", "y": [1, 2]}], "layout": {"title": {"text": "é → 𝔸\nline"}}},
                        ensure_ascii=False)
    data = {"config": {"displaylogo": False}, "src": "app/static/p.js", "clickable": True, "revision": "r1"}
    packed = live_chart.pack(data, figure=figure, frames="[{}]")
    assert isinstance(packed, bytes) and figure.encode() in packed
    assert live_chart.unpack(packed) == {**data, "figure": figure, "frames": "[{}]"}
    assert live_chart.unpack(live_chart.pack({"a": 1})) == {"a": 1}
    for broken in (b"no header", packed[:-1], packed + b"x"):
        with pytest.raises(ValueError):
            live_chart.unpack(broken)
