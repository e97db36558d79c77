"""The "Why this score?" section of the attention and step-by-step pages: one cell's QK attribution (a query source
× key source heatmap of the largest terms, their total beside the model's score, a sentence naming the largest) and
which sources drive the head's pattern for the query (:mod:`viz_ui.views.qk` computes, this draws)."""

from __future__ import annotations

import math

import streamlit as st

from viz_model import attribution
from viz_model.tokenizer import IdTokenizer

from viz_ui.views.figure_spec import FigureSpec
from viz_ui.analysis.interventions import prompt_of
from viz_ui.app.layout import AppState, pick_index, selected_points, set_shared, show_code, show_figure
from viz_ui.app.gate import NotComputed, costly, running_flag
from viz_ui.views.qk import QKPanel, grid_frame, qk_code, qk_copies, qk_heatmap, qk_views, source_words
from viz_ui.app.state import estimate_seconds, export_load_args
from viz_ui.analysis.text import plain, plotly_text
from viz_ui.analysis.text_trace import Trace


def pick_key(container, trace: Trace, layer: int, head: int, query: int) -> int:
    """The key position of the QK attribution, kept in the link as ``key`` (default: the key this head's query
    attends to most). A key that is that default follows it when the head, layer, query or text changes (the panel
    stays on the pair the head attends to most, and the link keeps no stale ``key``: a class's teacher published two
    views for one change of head, bench/class_live.py); a key picked, clicked or opened from a link stays."""
    n = trace.n_tokens
    strongest = int(trace.arrays[f"blocks.{layer}.attn.hook_pattern"][head][query].argmax())
    state = st.session_state
    if "_key" in state and state["_key"] == state.get("_key_default"):
        state["_key"] = strongest
    state["_key_default"] = strongest
    return pick_index(container, "Key token (the one looked at)", "key", n, strongest,
                      lambda i: f"{i} {trace.labels[i]}")


def cell_click(select_key: str):
    """An ``on_select`` callback for an attention heatmap: the clicked cell's query and key become the shared
    ``query`` and ``key``. A live chart reports a click on the heatmap itself; ``st.plotly_chart`` selects only the
    points of a figure drawn with ``clickable=True`` (the heatmap's cells cannot be selected there). Either way the
    point's ``x`` is the key position and ``y`` the query position."""
    def pick() -> None:
        points = selected_points(select_key)
        if points and points[0].get("x") is not None and points[0].get("y") is not None:
            set_shared("query", int(points[0]["y"]))
            set_shared("key", int(points[0]["x"]))
    return pick


@st.cache_resource(max_entries=256, show_spinner=False)
def _panels(cell: tuple, _panel: QKPanel | None = None) -> QKPanel:
    if _panel is None:
        raise NotComputed(cell)  # not cached: Streamlit keeps no value for a call that raises (as the gate's _kept)
    return _panel


def shared_panel(cell: tuple, panel: QKPanel | None = None) -> QKPanel | None:
    """The section's values for ``cell`` = ``(model key, text, layer, head, query, key)``, shared by every session of
    this server (the same object, read-only: no copy per read, as ``st.cache_data`` makes): with ``panel``, kept and
    returned; without, the kept one or None. The split itself stays in the gate's cache (:func:`costly`); a class
    whose 100 students open the same cell derives the grids, the sentence and the largest pairs once, not 100 times
    (2–3 ms a run each, ``bench/class_live.py``)."""
    try:
        return _panels(cell, panel)
    except NotComputed:
        return None


def qk_section(state: AppState, trace: Trace, layer: int, head: int, query: int, key: int, page: str) -> None:
    """Draw the section for the cell (``query``, ``key``) of head ``head`` in layer ``layer``; ``page`` names the
    figures' files. An unsupported model gets its one-line reason."""
    model, cfg = state.model, state.model.cfg
    q_label, k_label = plain(trace.labels[query]), plain(trace.labels[key])
    st.subheader(f"Why this score? Layer {layer}, head {head}: {query} {q_label} → {key} {k_label}")
    try:
        attribution.check_qk_supported(model, layer, head)
    except ValueError as exc:
        st.info(f"QK attribution is not shown for this model: {exc}.", icon=":material/info:")  # our own words
        return
    st.markdown(
        "The score is q·k, and both q and k are sums: the residual stream at each token is the sum of what every "
        "earlier part wrote into it (the token and position embeddings, each head's output, each MLP's output), and "
        "the layer's norm (its scale frozen at this run's value), W_Q / W_K"
        + (" and the rotation of each position" if cfg.positional == "rotary" else "")
        + " are linear. So the score splits exactly into one term per pair: (a source at the query) × (a source at "
        "the key). Each cell below is one such term, in score units.")
    score = float(trace.arrays[f"blocks.{layer}.attn.hook_attn_scores"][head][query, key])
    if not math.isfinite(score):
        st.info(f"Key {key} is hidden from query {query} by the "
                + ("causal mask (it comes later)" if key > query and cfg.causal else "sliding window")
                + ": its weight is 0. The terms below split the score the mask replaced with −∞.",
                icon=":material/visibility_off:")
    cell = (state.model_path, state.text, layer, head, query, key)
    panel = shared_panel(cell)
    if panel is not None:
        st.session_state.pop(running_flag("qk_attribution"), None)
    else:
        bounded = getattr(trace.arrays, "layers", None) is not None
        estimate = estimate_seconds(state.model_path, state.text, qk_copies(model, trace.n_tokens, layer, bounded))
        found = costly("qk_attribution", cell, estimate, lambda progress: qk_views(model, trace, layer, head, query, key),
                       "Split this score by source")
        if found is None:
            return
        panel = shared_panel(cell, QKPanel.of(*found))
    total, grid = panel.total, panel.grid
    cap = cfg.attn_softcap
    c1, c2, c3 = st.columns(3)
    c1.metric("Sum of the terms", f"{total:.4f}")
    c2.metric("The model's score (hook_attn_scores)", f"{score:.4f}" if math.isfinite(score) else "−∞ (masked)")
    if cap is not None:
        c3.metric(f"c·tanh(sum / c), c = {cap:g}", f"{cap * math.tanh(total / cap):.4f}")
        st.caption(attribution.qk_note(model).capitalize() + ".")
    elif grid.rel_pos is not None:
        c3.metric("of which the relative position bias", f"{grid.rel_pos:.4f}")
    st.markdown(panel.sentence)
    title = f"Score {query} {plotly_text(trace.labels[query])} → {key} {plotly_text(trace.labels[key])} by source"
    show_figure(FigureSpec(qk_heatmap, grid, title), state, f"qk_{page}_L{layer}_H{head}_q{query}_k{key}",
                data=lambda: grid_frame(grid), live=f"qk_{page}")
    st.caption(f"{panel.n_terms} terms in all; “other” sums the sources not named; the grid's cells sum to "
               f"{float(grid.values.sum()):.4f}"
               + (f", plus the relative position bias {grid.rel_pos:.4f}" if grid.rel_pos is not None else "")
               + ". Sources: embed = token embedding, pos_embed = position embedding, LlHh = a head's output, "
               "Ll.mlp = an MLP's output, Ll.attn_bias = b_O, bias = the norm's offset and b_Q (query) or b_K (key).")

    st.markdown(f"**The head as a whole, for query {query} ({q_label}):** each term weighted by the attention the "
                "query gives each key, summed over the keys it sees: which sources drive this head's pattern.")
    st.markdown("Largest: " + "; ".join(f"{source_words(a, 'query')} at the query × {source_words(b, 'key')} at the "
                                        f"key ({v:+.3f})"
                                        for a, b, v in panel.pairs) + ".")
    summary_grid = panel.summary_grid
    show_figure(FigureSpec(qk_heatmap, summary_grid, f"L{layer}H{head}, query {query} {plotly_text(trace.labels[query])}: "
                           "weighted by its pattern"), state, f"qk_head_{page}_L{layer}_H{head}_q{query}",
                data=lambda: grid_frame(summary_grid), live=f"qk_head_{page}")
    show_code(state, f"qk_attribution_{page}",
              lambda: qk_code(state.model_path, state.text, prompt_of(trace), not isinstance(state.tokenizer, IdTokenizer),
                              trace.truncated, layer, head, query, key, export_load_args(state.model)))

