"""QK attribution on the pages (issue 24, item 1): the grid of the largest terms, the attention and step-by-step pages
on the shipped model (through Streamlit's AppTest), the exported script, and the refusal on a post-LN model."""

from __future__ import annotations

import math

import numpy as np
import torch

from conftest import plotly_array
from helpers import figure_titled, open_page
from viz_model import attribution, load_model
from viz_ui.views.qk import dominant_sentence, grid_frame, term_grid

TEXT = "Once upon a time, there was a little girl named Lily. She loved to play in the park with her dog."


def test_term_grid_keeps_the_largest_sources_and_sums_the_rest_as_other():
    terms = {(a, b): 0.0 for a in "pqrs" for b in "xyz"}
    terms.update({("p", "x"): 5.0, ("q", "y"): -4.0, ("r", "z"): 0.5, ("s", "x"): 0.25, ("s", "z"): -1.0})
    grid = term_grid({**terms, ("rel_pos", "rel_pos"): 2.0}, top=2)
    assert grid.rows == ["p", "q", "other"] and grid.cols == ["x", "y", "other"]
    np.testing.assert_allclose(grid.values, [[5.0, 0.0, 0.0], [0.0, -4.0, 0.0], [0.25, 0.0, -0.5]])
    assert grid.rel_pos == 2.0 and grid.total == 5.0 - 4.0 + 0.5 + 0.25 - 1.0 + 2.0
    assert term_grid(terms, top=8).rows == list("pqrs")  # nothing left over: no "other"
    frame = grid_frame(grid)  # the figure's CSV
    assert list(frame.columns) == ["query source", "x", "y", "other"] and frame["query source"].tolist()[-1] == "rel_pos"
    assert frame.iloc[2, 1:].tolist() == [0.25, 0.0, -0.5] and frame.iloc[3, 1] == 2.0
    assert dominant_sentence({("L0H3", "embed"): 2.0, ("bias", "L1.mlp"): -1.0}, 1.0) == (
        "The largest term, +2.000 of the score 1.000, is L0H3's output at the query × the token embedding at the key.")


def model_cache():
    model, tok = load_model()
    _, cache = model.run_with_cache(torch.tensor([tok.encode(TEXT).ids]))
    return model, cache


def test_attention_page_splits_the_linked_cell_and_exports_the_script():
    at = open_page("pages/attention.py", text=TEXT, query={"layer": "3", "head": "5", "query": "12", "key": "2"})
    model, cache = model_cache()
    score = cache["blocks.3.attn.hook_attn_scores"][0, 5, 12, 2].item()
    metrics = {m.label: m.value for m in at.metric}
    assert abs(float(metrics["Sum of the terms"]) - score) <= 1e-3
    assert abs(float(metrics["The model's score (hook_attn_scores)"]) - score) <= 1e-3
    fig = figure_titled(at, "Score 12")
    heat = fig["data"][0]
    z = plotly_array(heat["z"])
    assert heat["y"][-1] == "other" and z.shape[0] <= 9 and abs(z.sum() - score) <= 1e-3
    terms = attribution.qk_attribution(model, cache, 3, 5, 12, 2)  # a named cell is that pair's term
    i, j = heat["y"].index("L0.mlp"), heat["x"].index("L0.mlp")
    assert abs(z[i, j] - terms[("L0.mlp", "L0.mlp")]) <= 1e-4
    assert any(md.value.startswith("The largest term") for md in at.markdown)
    source = next(c.value for c in at.code if c.language == "python")
    ns: dict = {}
    exec(compile(source, "<exported>", "exec"), ns)  # the script the user downloads, as it is
    assert (ns["layer"], ns["head"], ns["query"], ns["key"]) == (3, 5, 12, 2)
    assert abs(ns["score"] - score) <= 1e-5 and abs(sum(ns["terms"].values()) - score) <= 1e-3
    at.selectbox(key="key").set_value(5).run()  # the key picker moves the cell, kept in the link
    assert at.query_params["key"] == ["5"] or at.query_params["key"] == "5"
    assert any(s.value.startswith("Why this score? Layer 3, head 5: 12") and "→ 5" in s.value for s in at.subheader)


def test_step_by_step_page_has_the_section_and_a_masked_key_is_explained():
    at = open_page("pages/head_steps.py", text=TEXT, query={"layer": "1", "head": "0", "query": "4", "key": "9"})
    assert any(s.value.startswith("Why this score?") for s in at.subheader)
    assert any("causal mask" in i.value for i in at.info)  # key 9 comes after query 4
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["The model's score (hook_attn_scores)"].startswith("−∞")
    model, cache = model_cache()
    total = sum(attribution.qk_attribution(model, cache, 1, 0, 4, 9).values())
    assert math.isfinite(total) and abs(float(metrics["Sum of the terms"]) - total) <= 1e-3


def test_post_ln_model_gets_the_one_line_reason():
    at = open_page("pages/attention.py", query={"model": "dates-iso"})
    assert any("QK attribution is not shown for this model" in i.value and "post-LN" in i.value for i in at.info)


def test_the_section_waits_for_its_button_when_the_gate_says_so(monkeypatch):
    import streamlit as st
    monkeypatch.setenv("VIZ_GATE_SECONDS", "0")  # every estimate is above it, as on a 1 B model
    st.cache_data.clear()
    at = open_page("pages/attention.py", text=TEXT, query={"layer": "2", "head": "1", "query": "9", "key": "3"})
    assert not at.metric  # nothing split as the page opens
    button = at.button(key="gate_qk_attribution")
    assert button.label.startswith("Split this score by source — ")
    button.click().run()
    model, cache = model_cache()
    score = cache["blocks.2.attn.hook_attn_scores"][0, 1, 9, 3].item()
    assert abs(float({m.label: m.value for m in at.metric}["Sum of the terms"]) - score) <= 1e-3
    st.cache_data.clear()


def test_a_second_session_shows_the_same_cell_without_splitting_it_again(monkeypatch):
    """A class opens one cell in every student's session: the split and what the section derives from it (grids,
    sentence, largest pairs) are made once per server, and every session shows the same numbers."""
    import streamlit as st

    import viz_ui.app.qk_panel as panel
    import viz_ui.views.qk as qk
    st.cache_data.clear()
    panel._panels.clear()
    calls, grids = [], []
    split, grid = panel.qk_views, qk.term_grid
    monkeypatch.setattr(panel, "qk_views", lambda *args: calls.append(args[2:]) or split(*args))
    monkeypatch.setattr(qk, "term_grid", lambda terms, *args: grids.append(len(terms)) or grid(terms, *args))
    query = {"layer": "1", "head": "6", "query": "11", "key": "4"}
    first, second = (open_page("pages/attention.py", text=TEXT, query=query) for _ in range(2))
    assert calls == [(1, 6, 11, 4)] and len(grids) == 2  # split once and both grids made once, in the first session
    model, cache = model_cache()
    terms = attribution.qk_attribution(model, cache, 1, 6, 11, 4)
    for at in (first, second):
        assert abs(float({m.label: m.value for m in at.metric}["Sum of the terms"]) - sum(terms.values())) <= 1e-3
        assert any(c.value.startswith(f"{len(terms)} terms in all") for c in at.caption)
    assert figure_titled(first, "Score 11") == figure_titled(second, "Score 11")
    assert [md.value for md in first.markdown] == [md.value for md in second.markdown]


def test_a_default_key_follows_the_head_and_a_picked_key_stays():
    at = open_page("pages/attention.py", text=TEXT, query={"layer": "3", "head": "5", "query": "12"})
    model, cache = model_cache()

    def strongest(layer, head):
        return int(cache[f"blocks.{layer}.attn.hook_pattern"][0, head, 12].argmax())

    heads = [h for h in range(model.cfg.n_heads) if strongest(3, h) != strongest(3, 5)]
    assert heads, "every head of layer 3 attends most to the same key: pick another layer"
    assert at.selectbox(key="key").value == strongest(3, 5) and "key" not in at.query_params
    at.selectbox(key="head").set_value(heads[0]).run()  # the key was the default: it is the new head's strongest
    assert at.selectbox(key="key").value == strongest(3, heads[0]) and "key" not in at.query_params
    picked = next(k for k in range(13) if k not in (strongest(3, heads[0]), strongest(3, 5)))
    at.selectbox(key="key").set_value(picked).run()  # a key picked stays when the head changes
    at.selectbox(key="head").set_value(5).run()
    assert at.selectbox(key="key").value == picked
    assert at.query_params["key"] in (str(picked), [str(picked)])
