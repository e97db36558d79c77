"""Exports: the table behind each kind of figure, and the whole trace as .npz."""

import io

import numpy as np
import pandas as pd

from conftest import small_model
from viz_ui.views import figures as F
from viz_ui.views.export import figure_csv, figure_frame, lens_table, pattern_table, trace_npz
from viz_ui.views.figures import attention_heatmap, pca_scatter, topk_bar
from viz_ui.analysis.text_trace import run_trace


def test_heatmap_table_keeps_labels_and_masked_cells():
    scores = np.array([[0.5, -np.inf], [0.2, 0.1]])
    frame = figure_frame(attention_heatmap(scores, ["a", "a"], "t", kind="scores"))
    assert list(frame.index) == ["0 a", "1 a"] and list(frame.columns) == ["0 a", "1 a"]
    assert frame.iloc[1, 0] == 0.2 and np.isnan(frame.iloc[0, 1])
    back = pd.read_csv(io.StringIO(figure_csv(attention_heatmap(scores, ["a", "a"], "t", kind="scores"))), index_col=0)
    np.testing.assert_allclose(back.to_numpy(), [[0.5, np.nan], [0.2, 0.1]])


def test_bar_and_scatter_tables():
    bars = figure_frame(topk_bar(["x", "y"], np.array([0.7, 0.3]), "t"))
    assert bars.to_dict("list") == {"label": ["x", "y"], "value": [0.7, 0.3]}
    coords = np.arange(6.0).reshape(3, 2)
    frame = figure_frame(pca_scatter(coords, coords[:2], ["a", "b"], np.array([0.5, 0.2]), "t"))
    assert list(frame["trace"].unique()) == ["vocabulary", "your tokens"]
    assert frame[frame["trace"] == "your tokens"]["text"].tolist() == ["0 a", "1 b"]


def test_trace_npz_round_trip(tokenizer):
    model = small_model()
    trace = run_trace(model, tokenizer, "Max saw a ball.")
    data = np.load(io.BytesIO(trace_npz(trace)))
    assert data["ids"].tolist() == trace.ids.tolist() and str(data["text"]) == "Max saw a ball."
    np.testing.assert_array_equal(data["blocks.1.attn.hook_pattern"], trace.arrays["blocks.1.attn.hook_pattern"])
    assert set(trace.arrays.names()) <= set(data.files)


def test_every_figure_function_exports_a_table():
    rng = np.random.default_rng(0)
    labels = ["a", "b", "c"]
    pattern = np.tril(rng.random((3, 3)))
    built = {
        "matrix_heatmap": F.matrix_heatmap(rng.normal(size=(3, 4)), labels, "t"),
        "attention_heatmap": F.attention_heatmap(pattern, labels, "t"),
        "attention_grid": F.attention_grid(pattern[None, None].repeat(2, 0))[0],
        "attention_grid_figure": F.attention_grid_figure(pattern[None, None].repeat(2, 0)),
        "similarity_heatmap": F.similarity_heatmap(np.eye(3), labels, "t"),
        "pca_scatter": F.pca_scatter(rng.normal(size=(5, 2)), rng.normal(size=(3, 2)), labels, np.array([0.5, 0.2]), "t"),
        "topk_bar": F.topk_bar(labels, np.array([0.5, 0.3, 0.2]), "t"),
        "position_curves": F.position_curves(rng.normal(size=(6, 4)), [0, 1], 3, "t"),
        "stage_heatmap": F.stage_heatmap(rng.random((2, 3)), ["s0", "s1"], labels, "t", "p"),
        "value_bar": F.value_bar(labels, np.array([1.0, -0.5, 0.2]), "t", "x"),
        "layer_head_heatmap": F.layer_head_heatmap(rng.random((2, 3)), "t"),
        "generation_heatmap": F.generation_heatmap(rng.random((2, 3)), ["r0", "r1"], labels, "t"),
        "layer_table_heatmap": F.layer_table_heatmap(rng.random((2, 3)), ["W_Q", "W_K", "W_V"], "t", "std"),
        "angle_heatmap": F.angle_heatmap(rng.random((3, 2)), labels, "t"),
        "cross_heatmap": F.cross_heatmap(rng.random((2, 3)), ["t0", "t1"], labels, "t"),
        "cost_curve": F.cost_curve(np.array([64, 128]), np.array([1.0, 4.0]), np.array([1.0, 4.0]),
                                   np.array([0.5, 2.0]), "t"),
        "relative_score_curve": F.relative_score_curve(rng.normal(size=5), "t", [(2, 0.1, "m")]),
    }
    public = {name for name in dir(F) if not name.startswith("_") and callable(getattr(F, name))
              and getattr(getattr(F, name), "__module__", "") == F.__name__}
    assert public - {"position_ticks", "style_for_display", "grid_block", "pool_blocks", "display_layout",
                     "merge_layout", "one_pass_figure", "GridTiles", "grid_tiles", "grid_tile_texts",
                     "typed_array", "plain_figure", "style_plain", "display_height",
                     "topk_bar_frame", "grid_pooled", "grid_ticks", "plot_height_em",
                     } == set(built)  # a new figure function needs a case here
    for name, fig in built.items():
        frame = figure_frame(fig)
        assert len(frame) > 0, name
    np.testing.assert_allclose(figure_frame(built["value_bar"])["value"], [1.0, -0.5, 0.2])
    assert list(figure_frame(built["stage_heatmap"]).index) == ["s0", "s1"]
    assert list(figure_frame(built["layer_table_heatmap"]).columns) == ["W_Q", "W_K", "W_V"]


def test_long_tables_for_the_grid_and_the_logit_lens():
    patterns = np.arange(2 * 1 * 3 * 3, dtype=float).reshape(2, 1, 3, 3)
    table = pattern_table(patterns, ["x", "y", "x"])
    assert len(table) == 2 * 6  # the visible (lower-triangle) cells of each head
    row = table[(table.layer == 1) & (table.query_pos == 2) & (table.key_pos == 1)].iloc[0]
    assert row.weight == patterns[1, 0, 2, 1] and (row.query_token, row.key_token) == ("x", "y")
    assert len(pattern_table(patterns, ["x", "y", "x"], causal=False)) == 18
    lens = lens_table(np.array([[0, 1], [1, 1]]), np.array([[0.5, 0.6], [0.7, 0.8]]), ["e", "L0"], ["a", "b"], ["A", "B"])
    assert lens.iloc[1].to_dict() == {"stage": "e", "position": 1, "token": "b", "predicted": "B", "probability": 0.6}
