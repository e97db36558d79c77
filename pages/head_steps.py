"""One attention head, step by step, with the model's own numbers."""

from typing import NamedTuple

import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.analysis.explain import mask_sentence
from viz_ui.views.figures import matrix_heatmap, topk_bar
from viz_ui.app.layout import pick_layer_head, pick_position, position_window, show_figure, show_table
from viz_ui.app.page import PageContext, open_page
from viz_ui.app.qk_panel import pick_key, qk_section
from viz_ui.analysis.rotary import longrope_words
from viz_ui.analysis.head_steps import HeadSteps, head_steps, largest_weights, value_contributions
from viz_ui.views.tables import score_table, vector_table
from viz_ui.analysis.text import plain, plotly_text

SHOW_DIMS = 8
FMT = "{:.4f}"


class Chosen(NamedTuple):
    """The head shown (``layer``, ``head``), its ``query`` position and its steps
    (:func:`viz_ui.analysis.head_steps.head_steps`)."""

    layer: int
    head: int
    query: int
    steps: HeadSteps


def pick_head(ctx: PageContext) -> Chosen:
    """The shared layer, head and query selectors, and that head's steps."""
    c1, c2, c3 = st.columns(3)
    layer, head = pick_layer_head(ctx.app, c1, c2)
    query = pick_position(c3, ctx.trace, "Query token (the one that asks)")
    return Chosen(layer, head, query, head_steps(ctx.model, ctx.trace, layer, head, query))


def input_x(ctx: PageContext, h: Chosen) -> None:
    """The attention sub-layer's input x, as this model's norm placement gives it."""
    trace, cfg, n = ctx.trace, ctx.cfg, ctx.trace.n_tokens
    layer, head, query, s = h
    st.header("1 · The input x")
    norm_name = "RMSNorm" if cfg.norm == "rmsnorm" else "LayerNorm"
    reads = {"pre": f" after {norm_name} ln1 (this model is pre-LN)",
             "sandwich": f" after {norm_name} ln1 (this model norms each sub-layer's input and, with ln1_post, its output)",
             "output": f" directly (this model norms the sub-layer's output instead, with ln1_post)",
             "post": " directly (post-LN)"}
    st.markdown(f"The attention sub-layer reads the residual stream{reads[cfg.norm_placement]}: "
                f"one row of d_model = {cfg.d_model} numbers per token.")
    xa, xb = position_window(st, trace, cfg.d_model, query)
    show_figure(matrix_heatmap(s.x[xa:xb], trace.labels[xa:xb], f"x  [{n} × {cfg.d_model}]", offset=xa), ctx.app,
                f"steps_x_L{layer}")


def queries_keys_values(ctx: PageContext, h: Chosen) -> None:
    """q, k and v of every token (after q/k norm and rotation where the model has them)."""
    trace, cfg, n = ctx.trace, ctx.cfg, ctx.trace.n_tokens
    layer, head, query, s = h
    st.header("2 · Queries, keys and values")
    st.latex(r"q = x\,W_Q + b_Q,\quad k = x\,W_K + b_K,\quad v = x\,W_V + b_V")
    st.markdown(f"Each head has its own W_Q, W_K, W_V of shape [{cfg.d_model} × {cfg.d_head}], so every token gets a "
                f"query, a key and a value of d_head = d_k = {cfg.d_head} numbers.")
    if cfg.n_kv_heads < cfg.n_heads:
        group = [h for h in range(cfg.n_heads) if cfg.kv_head(h) == s.kv_head]
        st.info(f"Grouped-query attention: this model has {cfg.n_heads} query heads but only {cfg.n_kv_heads} key/value "
                f"head{'s' if cfg.n_kv_heads > 1 else ''}. Head {head} reads key/value head {s.kv_head}, shared with heads "
                f"{', '.join(map(str, group))}: their k and v below are the same numbers, only q differs.",
                icon=":material/call_split:")
    if cfg.qk_norm != "none":
        st.info("q/k norm: right after the projection, q and k are divided by their root mean square "
                + ("over each head's d_head numbers" if cfg.qk_norm == "head" else "over all heads of the token at once")
                + " and scaled by a learned weight (hooks attn.q_norm / attn.k_norm), before any rotation.",
                icon=":material/straighten:")
    if s.rotated:
        layer_cfg = ctx.model.blocks[layer].attn.cfg
        partial = (f" Only the first {cfg.d_rotary} of the {cfg.d_head} dimensions of each head are rotated (partial "
                   f"rotary); dimensions {cfg.d_rotary} to {cfg.d_head - 1} keep their values, so they carry no position."
                   if cfg.d_rotary < cfg.d_head else "")
        scaled = {"linear": f" This model divides every θ_i by {layer_cfg.rotary_factor:g} (linear scaling, for a longer "
                            "context).",
                  "llama3": f" This model slows the low-frequency pairs by {layer_cfg.rotary_factor:g} (Llama 3.1 "
                            "scaling, for a longer context) and keeps the fast ones.",
                  "longrope": " " + longrope_words(layer_cfg, n)}.get(layer_cfg.rotary_scaling, "")
        st.info(f"Rotary positions: after the projection, q and k of the token at position m are rotated by angles "
                f"m·θ_i (θ_i = base^(−2i/d), base {layer_cfg.rotary_base:g} in this layer, one angle per pair of "
                f"dimensions).{scaled}{partial} The q and k below are the rotated ones (hooks hook_rot_q / hook_rot_k), "
                "the ones the dot product uses; v is not rotated.", icon=":material/rotate_right:")
    tabs = st.tabs([f"q  [{n} × {cfg.d_head}]", f"k  [{n} × {cfg.d_head}]", f"v  [{n} × {cfg.d_head}]"])
    for tab, name, mat in zip(tabs, "qkv", (s.q, s.k, s.v)):
        with tab:
            qa, qb = position_window(st, trace, cfg.d_head, query)
            show_figure(matrix_heatmap(mat[qa:qb], trace.labels[qa:qb], f"{name} for every token, layer {layer} head {head}",
                                       x_title="d_head dimension", offset=qa), ctx.app, f"steps_{name}_L{layer}_H{head}",
                        live=f"steps_{name}")
    st.markdown(f"The query of token {query}, **{plain(trace.labels[query])}** (first {SHOW_DIMS} of {cfg.d_head} numbers):")
    show_table(vector_table({f"q[{query}]": s.q[query]}, SHOW_DIMS), ctx.app, fmt=FMT)


def scores_and_softmax(ctx: PageContext, h: Chosen) -> list[int]:
    """The query's scores to every key, the mask and the softmax, as a table to check by hand;
    returns the keys by weight, largest first."""
    trace, cfg = ctx.trace, ctx.cfg
    layer, head, query, s = h
    st.header("3 · Scores, mask and softmax" if cfg.causal else "3 · Scores and softmax (no mask)")
    divided = r"\frac{q \cdot k_j}{\sqrt{d_k}}" if cfg.attn_scale is None else \
        r"q \cdot k_j" if cfg.attn_scale == 1 else r"\frac{q \cdot k_j}{s}"
    if cfg.rel_pos_buckets:
        divided += r" + b_{h}(j - i)"
    if cfg.attn_softcap is not None:
        divided = rf"c\,\tanh\!\Big({divided}\Big/c\Big)"
    st.latex(r"\text{score}_j = " + divided
             + (r"\;(+\,{-\infty}\ \text{if}\ j > i)" if cfg.causal else "")
             + r",\qquad w_j = \frac{e^{\text{score}_j}}{\sum_{j'} e^{\text{score}_{j'}}}")
    scale_words = (f"√d_k = √{cfg.d_head} = {cfg.d_head ** 0.5:.4f}. Dividing by it keeps the scores in a range where "
                   "softmax is not saturated. " if cfg.attn_scale is None else
                   "This model (T5) does not divide q·k by √d_k: its initialisation keeps the scores in range instead. "
                   if cfg.attn_scale == 1 else
                   f"This model divides by s = {s.divisor:.4f} (set by its config, e.g. Gemma's √query_pre_attn_scalar) "
                   f"instead of √d_k = {cfg.d_head ** 0.5:.4f}. ")
    if cfg.attn_softcap is not None:
        scale_words += (f"Then the scores are soft-capped, c·tanh(score / c) with c = {cfg.attn_softcap:g}: small scores "
                        f"barely change, large ones are squashed to stay within ±{cfg.attn_softcap:g}. The table shows "
                        "them before and after the cap. ")
    if cfg.rel_pos_buckets:
        scale_words += ("Then the relative position bias b_h(j − i) is added: a learned number for this head and the "
                        "bucket of the distance between key j and query i, the same in every layer (page 2 shows it as a "
                        "matrix). ")
    scaled_name = "q·k / √d_k" if cfg.attn_scale is None else "q·k" + ("" if cfg.attn_scale == 1 else " / s")
    st.markdown(scale_words + mask_sentence(ctx.model.blocks[layer].attn.cfg) + " "
                + "Check the softmax by hand: each weight is its exp(score − max) divided by the sum of that column.")
    table = score_table(trace.labels, s.dots, s.scaled, s.scores, s.weights, s.capped, scaled_name,
                        f"c·tanh(· / c), c = {cfg.attn_softcap:g}" if cfg.attn_softcap is not None else "", s.rel_bias)
    show_table(table, ctx.app, fmt={c: FMT for c in table.columns if c not in ("key position", "token", "mask", "score")},
               hide_index=True)
    total = table["exp(score − max)"].sum()
    st.markdown(f"Sum of exp(score − max) = **{total:.4f}**; the weights sum to **{s.weights.sum():.4f}**.")
    order = largest_weights(s)
    show_figure(topk_bar([f"{j} {trace.labels[j]}" for j in order], s.weights[order],
                         f"Attention weights of {query} {plotly_text(trace.labels[query])} (largest first)", x_title="weight"),
                ctx.app, f"steps_weights_L{layer}_H{head}_q{query}")
    return order


def weighted_sum(ctx: PageContext, h: Chosen, order: list[int]) -> None:
    """z, the weighted sum of the values, with its largest contributions."""
    cfg = ctx.cfg
    s = h.steps
    st.header("4 · The weighted sum of values")
    st.latex(r"z = \sum_j w_j\, v_j")
    contrib = value_contributions(s)
    rows = {f"w{j}·v{j}": contrib[j] for j in order[:5]}
    rows["z = Σ"] = s.z
    st.markdown(f"Each value vector v_j is scaled by its weight; their sum is z (d_head = {cfg.d_head}). "
                f"The largest contributions and z, first {SHOW_DIMS} numbers:")
    show_table(vector_table(rows, SHOW_DIMS), ctx.app, fmt=FMT)


def all_heads(ctx: PageContext, h: Chosen) -> None:
    """The heads' outputs through W_O, added to the residual stream."""
    cfg = ctx.cfg
    head, s = h.head, h.steps
    norm_name = "RMSNorm" if cfg.norm == "rmsnorm" else "LayerNorm"
    st.header("5 · All heads together: concatenate, multiply by W_O, add to the residual stream")
    st.latex(r"\text{attn\_out} = \mathrm{Concat}(z_1, \dots, z_h)\,W_O + b_O,\qquad "
             r"\text{resid\_mid} = \text{resid\_pre} + \text{attn\_out}")
    st.markdown(f"The {cfg.n_heads} heads' z vectors are concatenated into {cfg.n_heads} × {cfg.d_head} = "
                f"{cfg.n_heads * cfg.d_head} numbers and multiplied by W_O [{cfg.n_heads * cfg.d_head} × {cfg.d_model}]. "
                f"This head's share is z·W_O[rows of head {head}]."
                + (" In this post-LN model, LayerNorm then normalises the sum." if cfg.norm_placement == "post" else "")
                + (f" In this model the sum Concat(z) W_O is itself normed ({norm_name} ln1_post) before it is added: "
                   "attn_out below is that normed vector, so the heads' parts no longer add up to it." if cfg.output_norm
                   else "")
                + (" This model has a parallel residual (GPT-NeoX): its feed-forward network reads resid_pre, not "
                   "resid_pre + attn_out, and both outputs are added to the stream together." if cfg.parallel_residual
                   else ""))
    show_table(vector_table({"this head's part z·W_O[h]": s.head_out, "attn_out (all heads + b_O)": s.attn_out,
                             "resid_pre": s.resid_pre, "resid_pre + attn_out": s.resid_mid}, SHOW_DIMS), ctx.app, fmt=FMT)
    st.caption("Norms: " + ", ".join(f"{name} {value:.3f}" for name, value in s.norms.items()) + ".")


def score_origin(ctx: PageContext, h: Chosen) -> None:
    """The chosen score split into one term per pair of sources (the query-key panel)."""
    trace = ctx.trace
    layer, head, query, s = h
    st.header("6 · Where the score comes from")
    st.markdown("Pick a key: the score of the query above to that key, split into one term per pair of sources.")
    key = pick_key(st, trace, layer, head, query)
    qk_section(ctx.app, trace, layer, head, query, key, "steps")


ctx = open_page("One head, step by step",
                "Follow one attention head from its input to what it adds to the residual stream, "
                "with the numbers this model computed for your text. Rounded to 4 decimals; shapes in brackets.")
chosen = pick_head(ctx)
input_x(ctx, chosen)
queries_keys_values(ctx, chosen)
weighted_sum(ctx, chosen, scores_and_softmax(ctx, chosen))
all_heads(ctx, chosen)
score_origin(ctx, chosen)
