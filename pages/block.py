"""The rest of the block: residual stream, add & norm, and the feed-forward network."""

import numpy as np
import pandas as pd
import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.analysis.block import layernorm_stats, residual_norms, sublayer_norms, top_neurons
from viz_ui.views.figures import matrix_heatmap, stage_heatmap, value_bar
from viz_ui.analysis.explain import (ACT_NAMES, ffn_formula, ffn_sentence, mlp_width, moe_note, norm_formula, norm_sentence,
                             unit_label)
from viz_ui.app.layout import pick_index, pick_position, position_window, show_figure, show_table
from viz_ui.analysis.text import plotly_text
from viz_ui.app.page import PageContext, open_page

def residual_stream(ctx: PageContext) -> None:
    """The residual stream's norm at every stage, and what each sub-layer adds to it."""
    trace, cfg = ctx.trace, ctx.cfg
    st.header("The residual stream")
    norms, stages = residual_norms(trace, cfg.n_layers)
    show_figure(stage_heatmap(norms, stages, trace.labels, "‖residual stream‖ at every stage and position", "L2 norm"),
                ctx.app, "residual_norms")
    adds, names = sublayer_norms(trace, cfg.n_layers)
    st.markdown("What each sub-layer adds: the norm of `attn_out` and `mlp_out` (a large value = a large change "
                "to that token's vector).")
    show_figure(stage_heatmap(adds, names, trace.labels, "‖what each sub-layer adds‖", "L2 norm"), ctx.app, "sublayer_norms")


def add_and_norm(ctx: PageContext) -> tuple[int, int]:
    """This model's norm placement, and one layer's norms at one token; returns the chosen layer and position."""
    trace, cfg = ctx.trace, ctx.cfg
    st.header("Add & norm")
    placement = cfg.norm_placement
    st.markdown(
        f"This model is **{ {'pre': 'pre-LN', 'post': 'post-LN', 'sandwich': 'sandwich-norm', 'output': 'output-norm'}[placement]}**. "
        + ("Pre-LN (GPT-2, Llama): each sub-layer reads Norm(x) and adds its output to the un-normalised stream, "
           "x + Sublayer(Norm(x))"
           + ("; a final norm comes before the output head." if ctx.model.has_lm_head and cfg.final_norm else
              "; a final norm ends the stack." if cfg.final_norm else ".")
           if placement == "pre" else
           "Sandwich norms (Gemma 2): each sub-layer reads Norm(x), and its output is normed again before it is added, "
           "x + Norm_post(Sublayer(Norm(x))); a final norm comes before the output head."
           if placement == "sandwich" else
           "Output norms (OLMo 2): each sub-layer reads the stream itself, and only its output is normed before it is "
           "added, x + Norm(Sublayer(x)); a final norm comes before the output head."
           if placement == "output" else
           "Post-LN (the original transformer, BERT): LayerNorm is applied after each addition, LN(x + Sublayer(x))."))
    if cfg.parallel_residual:
        st.info("Parallel residual (GPT-NeoX, Pythia): attention and the feed-forward network both read the block's "
                "input resid_pre (through ln1 and ln2) and their outputs are added together, resid_post = resid_pre + "
                "attn_out + mlp_out. The stage called resid_mid above is the partial sum resid_pre + attn_out: the "
                "feed-forward network does not read it.", icon=":material/call_split:")
    st.markdown(norm_sentence(cfg) + ".")
    st.latex(norm_formula(cfg))
    c1, c2, _ = st.columns(3)
    layer = pick_index(c1, "Layer", "layer", cfg.n_layers)
    pos = pick_position(c2, trace, "Token")
    stats = layernorm_stats(trace, layer, pos, placement, ctx.model)
    show_table(pd.DataFrame({f"{s.name} ({s.role}: {s.before_name} → {s.after_name})": s.summary for s in stats})
               .T, ctx.app, fmt="{:.4f}")
    st.caption("Before normalising, mean and variance vary from token to token; the (x − μ)/σ step makes them 0 and 1, "
               "and the learned scale w and shift b then change them to the values shown under 'after'."
               if cfg.norm == "layernorm" else
               "RMSNorm does not subtract the mean: it divides by the root mean square, so the mean of the output "
               "is not forced to 0; the learned scale w then changes each dimension.")
    ln1 = stats[0]
    both = np.stack([ln1.before, ln1.after])
    show_figure(matrix_heatmap(both, [f"{ln1.name} input: {ln1.before_name}", f"{ln1.name} output: {ln1.after_name}"],
                               f"{ln1.name} ({ln1.role}) of layer {layer}, token {pos} {plotly_text(trace.labels[pos])}"),
                ctx.app, f"layernorm_L{layer}_pos{pos}")
    return layer, pos


def feed_forward(ctx: PageContext, layer: int, pos: int) -> None:
    """The feed-forward network of ``layer``: its hidden activations, and its most active neurons at ``pos``."""
    trace, cfg, n = ctx.trace, ctx.cfg, ctx.trace.n_tokens
    st.header("The feed-forward network")
    layer_cfg = cfg.for_layer(layer)  # a dense layer among experts (Qwen2-MoE) has its own width
    st.latex(ffn_formula(layer_cfg))
    st.markdown(f"Two layers applied to each position separately: {ffn_sentence(layer_cfg)}. Here d_mlp = {layer_cfg.d_mlp / cfg.d_model:g} × d_model (the original transformer used 4×: "
                "512 → 2048). Each hidden unit (neuron) responds to some pattern in its input." + moe_note(cfg, layer))
    post = trace.arrays[f"blocks.{layer}.mlp.hook_post"]
    wa, wb = position_window(st, trace, mlp_width(layer_cfg), pos)
    show_figure(matrix_heatmap(post[wa:wb], trace.labels[wa:wb], f"Hidden activations of layer {layer}  [{n} × {mlp_width(layer_cfg)}]",
                               x_title="neuron", value_name="activation", offset=wa), ctx.app, f"mlp_post_L{layer}", live="mlp_post")
    idx, vals = top_neurons(post[pos])
    show_figure(value_bar([unit_label(layer_cfg, i) for i in idx], vals, f"Most active neurons of layer {layer} for "
                          f"{pos} {plotly_text(trace.labels[pos])}", f"activation (after {ACT_NAMES[cfg.mlp]}{' gate × linear' if cfg.mlp in ('swiglu', 'geglu') else ''})"), ctx.app, f"top_neurons_L{layer}_pos{pos}", live="top_neurons")


ctx = open_page("Residual stream, add & norm, feed-forward",
                "Each token's vector travels up the residual stream; every attention and feed-forward "
                "sub-layer reads it and adds its result back (add), and LayerNorm keeps it in range (norm).")
residual_stream(ctx)
feed_forward(ctx, *add_and_norm(ctx))
