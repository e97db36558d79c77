"""Exports: the table behind each kind of figure, and the whole trace as .npz."""

import io

import numpy as np
import pandas as pd

from conftest import small_model
from viz_ui.export import figure_csv, figure_frame, trace_npz
from viz_ui.figures import attention_heatmap, pca_scatter, topk_bar
from viz_ui.trace import run_trace


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
    assert set(trace.arrays) <= set(data.files)
