"""Attention: every layer and head at a glance, and one head in detail."""

import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.analysis.explain import score_formula, score_sentence
from viz_ui.views.export import pattern_table, pooled_pattern_table
from viz_ui.views.figure_spec import FigureSpec
from viz_ui.views.figures import attention_grid_figure, attention_heatmap, grid_pooled
from viz_ui.app.layout import (MAX_CHARS, pick_layer_head, pick_position, position_window, selected_points,
                               set_layer_head, show_figure, side_by_side, window_around)
from viz_ui.app.live_chart import Ahead, live_chart_source
from viz_ui.app.page import PageContext, open_page
from viz_ui.app.qk_panel import cell_click, pick_key, qk_section
from viz_ui.app.state import UPLOAD_PREFIX, get_overview, get_trace, resolve, trace_early
from viz_ui.analysis.head_steps import future_share, unmasked_view
from viz_ui.analysis.text_trace import text_labels


def open_head(n_heads: int) -> None:
    """on_select of the all-heads grid: the clicked tile becomes the layer and head shown below."""
    points = selected_points("attn_grid")
    if points and points[0].get("curve_number") == 1:  # the clickable tile points, not the heatmap
        set_layer_head(*divmod(points[0]["point_index"], n_heads))


def all_heads(ctx: PageContext) -> None:
    """Every layer's and head's pattern at once, as clickable tiles."""
    trace, cfg, n = ctx.trace, ctx.cfg, ctx.trace.n_tokens
    patterns, block = get_overview(ctx.path, ctx.text)
    st.markdown("This model is a **decoder**: a token sees itself and the tokens before it (causal mask)."
                if cfg.causal else "This model is an **encoder**: every token sees every token of the text (no mask).")
    grid = FigureSpec(attention_grid_figure, patterns, pooled_by=block, labels=trace.labels)
    pooled = grid_pooled(patterns.shape, block)
    show_figure(grid, ctx.app, "attention_all_heads",
                data=lambda: (pattern_table(patterns, trace.labels, cfg.causal) if block == 1 else
                              pooled_pattern_table(patterns, block, n, n)), select_key="attn_grid",
                on_select=lambda: open_head(cfg.n_heads))
    st.caption("Click a head to show it below; hover a head for its strongest query → key pair.")
    if pooled:
        st.caption(f"{trace.n_tokens} tokens are too many to draw per cell in {cfg.n_layers * cfg.n_heads} small "
                   "maps: each cell of the overview is the largest weight in a block of cells. "
                   "The single-head view below shows every cell.")


def head_title(cfg, layer: int, head: int, weights: bool) -> str:
    """The single-head heatmap's title: the weights' or the scores' formula for this model."""
    if weights:
        return f"Layer {layer}, head {head}: attention weights softmax({score_formula(cfg)})"
    return f"Layer {layer}, head {head}: scores {score_formula(cfg)} (d_k = {cfg.d_head})"


def head_matrix(trace, layer: int, head: int, weights: bool):
    """One head's ``[query_pos, key_pos]`` weights (``hook_pattern``) or scores (``hook_attn_scores``)."""
    return trace.arrays[f"blocks.{layer}.attn.{'hook_pattern' if weights else 'hook_attn_scores'}"][head]


def head_spec(trace, cfg, layer: int, head: int, weights: bool, window: tuple[int, int]) -> FigureSpec:
    """The single-head heatmap of positions ``window = (start, stop)``, as page 3 draws it."""
    return head_figure(head_matrix(trace, layer, head, weights), trace.labels, cfg, layer, head, weights, window)


def head_figure(matrix, labels: list[str], cfg, layer: int, head: int, weights: bool,
                window: tuple[int, int]) -> FigureSpec:
    """:func:`head_spec` from the head's whole ``[query_pos, key_pos]`` ``matrix`` and the text's token ``labels``."""
    a, b = window
    return FigureSpec(attention_heatmap, matrix[a:b, a:b], labels[a:b], head_title(cfg, layer, head, weights),
                      "weights" if weights else "scores", offset=a, clickable=live_chart_source() is None)


def head_ahead(path: str, cfg, layer: int, head: int, weights: bool, query: int) -> Ahead | None:
    """The single-head heatmap that this page's rerun will draw for a new text, as a function of the text (drawn ahead
    of the rerun, :mod:`viz_ui.app.ahead`): the same layer, head and kind; the query position kept while the new text
    has it, else its last token (as the shared ``query`` selector does); the text cut as the sidebar cuts it. The
    figure goes to ``early`` as soon as the forward pass has the layer's q and k (:func:`trace_early`), before the
    later layers run. None for a session's upload (its model lives in the session)."""
    if path.startswith(UPLOAD_PREFIX):
        return None
    name = f"blocks.{layer}.attn.{'hook_pattern' if weights else 'hook_attn_scores'}"

    def figure(matrix, labels: list[str]) -> FigureSpec:
        n = len(labels)
        return head_figure(matrix, labels, cfg, layer, head, weights, window_around(n, query if 0 <= query < n else n - 1))

    def build(text: str, early=None) -> FigureSpec | None:
        text = text[:MAX_CHARS]
        if not text.strip():
            return None
        try:
            if early is None:
                trace = get_trace(path, text)
            else:
                trace = trace_early(path, text, name, lambda values: early(
                    figure(values[head], text_labels(resolve(path)[1], text, values.shape[-2]))))
        except ValueError:  # the rerun shows why
            return None
        return figure(head_matrix(trace, layer, head, weights), trace.labels)
    return build


def one_head(ctx: PageContext) -> tuple[int, int, tuple[int, int]]:
    """One head's weights or scores, with its query-key panel; returns its layer, head and the drawn window
    ``(start, stop)`` of positions."""
    trace, cfg, n = ctx.trace, ctx.cfg, ctx.trace.n_tokens
    st.subheader("One head")
    c1, c2, c3 = st.columns([1, 1, 2])
    layer, head = pick_layer_head(ctx.app, c1, c2)
    kind = c3.radio("Show", ["weights (after softmax)", "scores (scaled, masked, before softmax)"],
                    horizontal=True, key="attn_kind")
    weights = kind.startswith("weights")
    matrix = head_matrix(trace, layer, head, weights)
    if weights:
        st.markdown("Each row is a probability distribution: how much of each "
                    + ("earlier token's" if cfg.causal else "token's") + " value vector the query token takes.")
    else:
        st.markdown(score_sentence(cfg)
                    + (" Blank cells above the diagonal are masked with −∞: a token may not look at tokens after it, and "
                       "softmax turns −∞ into 0." if cfg.causal else " This encoder masks nothing: every cell is a score."))
    c4, c5 = st.columns(2)
    query = pick_position(c4, trace, "Query token (the one that asks)")
    key = pick_key(c5, trace, layer, head, query)
    a, b = position_window(st, trace, centre=query)
    if (a, b) != (0, n) and weights:
        inside = float(matrix[a:b, a:b].sum() / max(1e-9, matrix[a:b].sum()))
        st.caption(f"In this window, {inside:.0%} of these rows' attention falls on keys inside it; the other "
                   f"{1 - inside:.0%} goes to keys outside positions {a}–{b - 1}" + (" (often position 0)" if a > 0 else "")
                   + ", so the map can look pale. Move the window, or see whole rows on page 3a.")
    show_figure(head_spec(trace, cfg, layer, head, weights, (a, b)), ctx.app, f"attention_L{layer}_H{head}",
                select_key="attn_head", on_select=cell_click("attn_head"),
                ahead=head_ahead(ctx.path, cfg, layer, head, weights, query))
    st.caption("Click a cell (or pick the query and key above) to see below why the head gives it this score.")
    qk_section(ctx.app, trace, layer, head, query, key, "attention")
    return layer, head, (a, b)


def masked_vs_unmasked(ctx: PageContext, layer: int, head: int, window: tuple[int, int]) -> None:
    """What a decoder's causal mask changes for this head: scores without and with it, weights without it."""
    trace, cfg, model = ctx.trace, ctx.cfg, ctx.model
    a, b = window
    labels = trace.labels[a:b]
    st.subheader("Masked vs unmasked")
    st.markdown(f"What the causal mask changes for this head. Left: the scores {score_formula(cfg)} for *every* "
                "pair, as if the mask were not there; middle: the same scores with −∞ above the diagonal (what the "
                "model uses); right: the weights softmax would give without the mask. Without it, a token would take "
                "information from tokens that come after it, which a decoder cannot know when it generates text."
                + (f" This layer also has a sliding window of {model.blocks[layer].attn.cfg.attn_window}: the "
                   "middle panel hides keys that far back too." if model.blocks[layer].attn.cfg.attn_window
                   else f" This model's other layers ({', '.join(map(str, cfg.window_layers))}) also have a sliding "
                   f"window of {cfg.attn_window}; this one does not." if cfg.window_layers else "")
                + (f" {score_sentence(cfg)} All three panels use these scores; only the mask differs."
                   if cfg.attn_scale is not None or cfg.attn_softcap is not None or cfg.rel_pos_buckets else ""))
    raw, free = unmasked_view(trace, cfg, layer, head)
    m1, m2, m3 = side_by_side(ctx.app, 3)
    with m1:
        show_figure(FigureSpec(attention_heatmap, raw[a:b, a:b], labels, "Scores without mask", "scores", offset=a), ctx.app,
                    f"scores_unmasked_L{layer}_H{head}", live="scores_unmasked")
    with m2:
        show_figure(FigureSpec(attention_heatmap, trace.arrays[f"blocks.{layer}.attn.hook_attn_scores"][head][a:b, a:b],
                               labels, "Scores with mask", "scores", offset=a), ctx.app,
                    f"scores_masked_L{layer}_H{head}", live="scores_masked")
    with m3:
        show_figure(FigureSpec(attention_heatmap, free[a:b, a:b], labels, "Weights without mask", "weights", offset=a), ctx.app,
                    f"weights_unmasked_L{layer}_H{head}", live="weights_unmasked")
    st.caption(f"Without the mask this head would put on average {future_share(free):.1%} "
               "of each token's attention on later tokens; with it, exactly 0%.")


ctx = open_page("Attention",
                "In every layer, each head lets every token gather information from the tokens it may see. "
                "Row = the token that asks (query), column = the token it looks at (key); each row sums to 1.")
all_heads(ctx)
shown = one_head(ctx)
if ctx.cfg.causal:
    masked_vs_unmasked(ctx, *shown)
