"""Issue 13 (classroom experience): honest head summaries, greedy output without junk, lecture-mode layout,
family-specific wording, and the walkthrough's navigation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import proto_data
from helpers import figure_titled, figures, open_page
from viz_ui.analysis.generation import StepRecord, next_token_view, salient_head, shown_bars
from viz_ui.analysis.heads import HEAD_THRESHOLD, cell_text_fits, heads_passing, most_salient, salience

LECTURE = {"lecture": "true"}


def in_columns(node) -> list:
    """Every Plotly figure (a live chart, or ``st.plotly_chart``) drawn inside a column (st.columns) below ``node``."""
    found, stack = [], [(node, False)]
    while stack:
        n, inside = stack.pop()
        inside = inside or getattr(n, "type", "") == "column"
        kind = getattr(n, "type", "")
        if inside and (kind == "plotly_chart" or kind == "bidi_component" and "figure" in proto_data(n.proto)):
            found.append(n)
        children = getattr(n, "children", None) or {}
        stack.extend((c, inside) for c in (children.values() if isinstance(children, dict) else children))
    return found


# --- 1. honest head summaries -------------------------------------------------------------------------------------

def test_a_head_kind_is_named_only_above_the_threshold():
    scores = np.array([[0.04, 0.02], [0.9, HEAD_THRESHOLD]])
    passing, best = heads_passing(scores)
    assert passing == [(1, 0, 0.9), (1, 1, HEAD_THRESHOLD)] and best == (1, 0, 0.9)
    passing, best = heads_passing(np.array([[0.01, 0.04], [0.02, np.nan]]))
    assert passing == [] and best == (0, 1, 0.04)
    assert heads_passing(np.full((2, 2), np.nan)) == ([], None)


def test_cell_numbers_only_where_they_fit():
    assert cell_text_fits(12, 1.0) and cell_text_fits(12, 1.5) and cell_text_fits(16, 1.5)
    assert not cell_text_fits(32, 1.0) and not cell_text_fits(20, 1.5)


def test_head_summaries_name_no_head_below_the_threshold():
    from viz_model import load_model
    from viz_ui.analysis.heads import head_scores
    from viz_ui.analysis.text_trace import run_trace
    at = open_page("pages/heads.py")
    text = " ".join(m.value for m in at.markdown)
    assert f"reaches **{HEAD_THRESHOLD:g}**" in text
    model, tokenizer = load_model("assets/models/tinystories-6l.safetensors")
    scores = head_scores(model, run_trace(model, tokenizer, at.text_area(key="text").value))
    messages = [m.value for m in (*at.info, *at.success)]
    for name, s in scores.items():
        passing, (layer, head, best) = heads_passing(s)
        said = next(m for m in messages if f" {name} head" in m)
        if passing:
            assert said.startswith(f"{len(passing)} {name} head") and f"L{layer}H{head} ({best:.2f})" in said
        else:
            assert said.startswith(f"No {name} head") and f"best: L{layer}H{head}, {best:.2f}" in said
    assert not heads_passing(scores["induction"])[0]  # the shipped model has no induction head
    button = next(b for b in at.button if "induction" in b.key)  # the best one can still be opened
    assert button.label.startswith(f"Layer {heads_passing(scores['induction'])[1][0]}, ")


def test_head_summaries_draw_the_maps_full_width_in_lecture_mode():
    at = open_page("pages/heads.py")
    assert in_columns(at.main)  # side by side with the explanation normally
    at = open_page("pages/heads.py", query=LECTURE)
    assert len(figures(at)) == 4 and not in_columns(at.main)
    assert figure_titled(at, "induction score")["data"][0]["texttemplate"] == "%{z:.2f}"


# --- 1. greedy output ---------------------------------------------------------------------------------------------

def test_greedy_entropy_is_a_plain_zero_and_zero_bars_are_left_out():
    logits = np.array([1.0, 3.0, 2.0, -1.0])
    view = next_token_view(logits, 0.0, 0, 1.0)
    assert view.entropy == 0.0 and math.copysign(1.0, view.entropy) == 1.0 and f"{view.entropy:.2f}" == "0.00"
    assert shown_bars(view.probs, 10).tolist() == [1]
    topk = next_token_view(logits, 1.0, 2, 1.0).probs
    assert shown_bars(topk, 10).tolist() == [1, 2]
    assert shown_bars(next_token_view(logits, 1.0, 0, 1.0).probs, 3).tolist() == [1, 2, 0]


def test_output_at_temperature_zero_says_greedy_and_shows_no_zero_bars():
    at = open_page("pages/output.py")
    at.slider(key="temperature").set_value(0.0).run()
    bars = figures(at)[0]
    assert plotly_x(bars).tolist() == [1.0]  # the greedy pick only, no bars at 0 %
    assert "greedy: the highest-scoring token is taken" in " ".join(m.value for m in at.markdown)
    assert any(m.value == "0 bits (greedy)" for m in at.metric) and not any("-0.00" in m.value for m in at.metric)
    compare = figure_titled(at, "For comparison: the 5 highest logits")
    probs = plotly_x(compare)
    assert len(probs) == 5 and np.all(np.diff(probs) <= 0) and 0 < probs[0] < 1
    assert compare["layout"]["yaxis"]["ticktext"][0] == bars["layout"]["yaxis"]["ticktext"][0]


def plotly_x(fig: dict) -> np.ndarray:
    from conftest import plotly_array
    return plotly_array(fig["data"][0]["x"])


# --- 4. defaults --------------------------------------------------------------------------------------------------

def test_salience_prefers_a_head_that_looks_at_one_token_other_than_the_first():
    n = 5
    sink = np.zeros((n, n))
    sink[:, 0] = 1
    prev = np.eye(n, k=-1)
    prev[0, 0] = 1
    uniform = np.tril(np.ones((n, n)))
    uniform /= uniform.sum(-1, keepdims=True)
    pattern = np.stack([sink, uniform, prev])
    s = salience(pattern)
    assert s[0] == 0 and s[2] == pytest.approx(0.75) and s[1] < s[2]  # query 1 sees only key 0 and itself
    assert salience(np.eye(n)[None])[0] == 0  # attending to itself is not looking somewhere in particular
    arrays = {"blocks.0.attn.hook_pattern": np.stack([sink, uniform, uniform]),
              "blocks.1.attn.hook_pattern": pattern}
    assert most_salient(arrays, 2) == (1, 2) and most_salient(arrays, 2, layer=0) == (0, 1)


def test_generation_attention_starts_on_the_most_salient_head():
    rows = np.zeros((2, 3, 4))
    rows[:, :, 0] = 1  # every head parks on the first token ...
    rows[0, 1] = [0.0, 0.0, 0.0, 1.0]  # ... or on itself (the newest key) ...
    rows[1, 2] = [0.1, 0.0, 0.9, 0.0]  # ... except layer 1, head 2
    records = [StepRecord(0, 1.0, 1.0, rows, 4, 0), StepRecord(0, 1.0, 1.0, rows, 1, 4)]
    assert salient_head(records) == (1, 2)


# --- 2. long texts ------------------------------------------------------------------------------------------------

LONG = "The cat sat on the mat. " * 30  # 211 tokens of the shipped model (d_model 256: E, P and x fit whole)


def test_the_logit_lens_of_a_long_text_writes_a_window_of_cells():
    from conftest import plotly_array
    at = open_page("pages/logit_lens.py", text=LONG)
    fig = figure_titled(at, "Top prediction after each layer")
    z = plotly_array(fig["data"][0]["z"])
    assert z.shape[1] == 40 and fig["data"][0]["texttemplate"] == "%{text}"
    assert plotly_array(fig["data"][0]["x"]).tolist() == list(range(211 - 40, 211))
    assert fig["layout"]["xaxis"]["tickvals"][0] == 211 - 40
    at.slider(key="lens_first").set_value(0).run()
    fig = figure_titled(at, "Top prediction after each layer")
    assert fig["layout"]["xaxis"]["tickvals"][0] == 0 and fig["data"][0]["text"][0][0]
    at = open_page("pages/logit_lens.py", text=LONG, query=LECTURE)  # larger font: fewer, still readable columns
    assert plotly_array(figure_titled(at, "Top prediction")["data"][0]["z"]).shape[1] == int(40 / 1.5)


def test_the_embeddings_window_says_which_views_it_moves():
    at = open_page("pages/embeddings.py", text=LONG)
    label = at.selectbox(key="query").label
    assert "cosine-similarity" in label and "E, P and x" not in label  # d_model 256: 211 rows of E fit whole
    from conftest import plotly_array
    assert plotly_array(figure_titled(at, "Token embeddings E")["data"][0]["z"]).shape[0] == 211
    assert plotly_array(figure_titled(at, "Cosine similarity")["data"][0]["z"]).shape == (128, 128)


def test_pca_labels_name_each_token_once_and_not_too_many():
    at = open_page("pages/embeddings.py", text="the cat and the dog and the bird and the fish")
    points = figure_titled(at, "Token embeddings in PCA")["data"][1]
    named = [t for t in points["text"] if t]
    assert len(named) == len({t.split(" ", 1)[1] for t in named})  # a repeated token is labelled once
    assert named[0].startswith("0 ") and len(points["hovertext"]) == len(points["text"])
    assert set(points["textposition"]) == {"top center", "bottom center"}
    at = open_page("pages/embeddings.py", text=LONG)
    assert sum(bool(t) for t in figure_titled(at, "Token embeddings in PCA")["data"][1]["text"]) <= 24


# --- 5. walkthrough and inspector ---------------------------------------------------------------------------------

def test_weight_statistics_follow_the_computation_q_k_v_o():
    at = open_page("pages/inspector.py")
    ticks = figure_titled(at, "std of each weight matrix")["layout"]["xaxis"]["ticktext"]
    assert ticks[:4] == ["W_Q", "W_K", "W_V", "W_O"] and ticks[4:] == ["W_in", "W_out"]


def test_the_walkthrough_scrolls_to_the_top_for_each_step_and_ends_with_links_onward():
    at = open_page("pages/walkthrough.py")
    scripts = [h.proto.body for h in at.get("html") if "scrollTo(0, 0)" in h.proto.body]
    assert len(scripts) == 1 and "/* step 1 */" in scripts[0]
    next(b for b in at.button if b.label == "Next").click().run()
    assert "/* step 2 */" in next(h.proto.body for h in at.get("html") if "scrollTo(0, 0)" in h.proto.body)
    at = open_page("pages/walkthrough.py", query={"step": "11"})
    links = [p.proto.label for p in at.main.get("page_link")]  # the sidebar's navigation is not counted
    assert {"3 · Attention", "4 · Output probabilities", "3e · Logit lens"} <= set(links), links
    assert "Guided walkthrough" not in links and "5 · Encoder-decoder & cross-attention" not in links


def test_walkthrough_step_four_names_its_query_token_once():
    at = open_page("pages/walkthrough.py", text="The cat sat.", query={"step": "4"})
    text = next(m.value for m in at.markdown if m.value.startswith("Layer 0, head 0"))
    assert "(position 3, **\\.**)" in text and ".." not in text


# --- 6. tables and downloads in lecture mode ----------------------------------------------------------------------

OWN_PAGES = ["pages/walkthrough.py", "pages/tokens.py", "pages/embeddings.py", "pages/head_steps.py",
             "pages/head_view.py", "pages/heads.py", "pages/block.py", "pages/logit_lens.py", "pages/output.py"]


@pytest.mark.parametrize("page", OWN_PAGES)
def test_lecture_mode_draws_static_tables_and_no_downloads(page):
    at = open_page(page, query=LECTURE)
    assert not at.exception and not at.error
    assert not at.get("download_button"), page
    assert not at.dataframe, page  # show_table draws st.table in lecture mode: it scales with the font
    normal = open_page(page)
    assert normal.get("download_button")  # the same page offers downloads outside a lecture
    if normal.dataframe:
        assert len(at.table) >= len(normal.dataframe)
