"""Encoder-decoder: the source through the encoder, the output through the decoder, and cross-attention
joining them (Vaswani et al., 2017, figure 1), with the running model's own numbers."""

import numpy as np
import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.views.figures import attention_grid, attention_heatmap, cross_heatmap, topk_bar
from viz_ui.analysis.generation import next_token_view
from viz_ui.app.layout import pick_index, require_trace, shared_number, show_figure, show_link, side_by_side
from viz_ui.app.page import PageContext, open_page
from viz_ui.analysis.encoder_decoder import cross_patterns, output_text
from viz_ui.app.gated import sampled_output_gated
from viz_ui.app.state import available_models, encoder_decoder_names
from viz_ui.views.tables import token_chips_html, topk_table
from viz_ui.analysis.text import plain

def no_encoder(ctx: PageContext) -> None:
    """Why the page has nothing to show for a model without an encoder, and which models have one."""
    cfg = ctx.cfg
    names = encoder_decoder_names(available_models())
    st.info("The chosen model has no encoder: it is " + ("an encoder only (BERT-like)." if not cfg.causal else
            "a decoder only (GPT-like).") + (" Choose " + ", ".join(f"**{plain(n)}**" for n in names) +
            " in the sidebar to see cross-attention." if names else " Load an encoder-decoder (e.g. BART) to see "
            "cross-attention."), icon=":material/swap_horiz:")


def source_and_output(ctx: PageContext, answer: str) -> None:
    """The source's and the decoder's tokens, and the model's greedy ``answer``."""
    trace = ctx.trace
    src, tgt = trace.src_labels, trace.labels
    st.subheader("Source and output")
    st.markdown(f"**Encoder input (source)**, {len(src)} tokens")
    st.html(token_chips_html(src, trace.src_ids))
    st.markdown(f"**Decoder input**: the start token, then each token it generated, {len(tgt)} tokens")
    st.html(token_chips_html(tgt, trace.ids))
    st.metric("The model's output (greedy)", plain(answer, None) if answer else "(empty)")


def self_attention(ctx: PageContext) -> tuple[int, int]:
    """One encoder and one decoder self-attention head side by side; returns the decoder layer and the head."""
    trace, cfg = ctx.trace, ctx.cfg
    src, tgt = trace.src_labels, trace.labels
    st.subheader("Self-attention in each stack")
    st.markdown("Left, the **encoder**: every source token attends to every other one, before and after it. Right, the "
                "**decoder**: the causal mask (−∞, blank cells) stops an output token from looking at later output "
                "tokens, because at generation time they do not exist yet.")
    a1, a2, a3 = st.columns(3)
    enc_layer = pick_index(a1, "Encoder layer", "enc_layer", cfg.n_encoder_layers)
    layer = pick_index(a2, "Decoder layer", "layer", cfg.n_layers)
    head = pick_index(a3, "Head", "head", cfg.n_heads)
    left, right = side_by_side(ctx.app, 2)
    with left:
        show_figure(attention_heatmap(trace.arrays[f"encoder.blocks.{enc_layer}.attn.hook_pattern"][head], src,
                                      f"Encoder L{enc_layer} H{head}: unmasked weights"), ctx.app,
                    f"encoder_self_L{enc_layer}_H{head}")
    with right:
        show_figure(attention_heatmap(trace.arrays[f"blocks.{layer}.attn.hook_attn_scores"][head], tgt,
                                      f"Decoder L{layer} H{head}: masked scores", kind="scores"), ctx.app,
                    f"decoder_self_scores_L{layer}_H{head}")
        with st.expander("The decoder's weights after softmax"):
            show_figure(attention_heatmap(trace.arrays[f"blocks.{layer}.attn.hook_pattern"][head], tgt,
                                          f"Decoder L{layer} H{head}: weights"), ctx.app, f"decoder_self_L{layer}_H{head}")
    return layer, head


def cross_attention(ctx: PageContext, layer: int, head: int) -> np.ndarray:
    """The chosen decoder head's cross-attention and every head's at once; returns every cross-attention pattern,
    ``[n_layers, n_heads, query_pos, src_pos]``."""
    trace, cfg, vocab = ctx.trace, ctx.cfg, ctx.vocab
    src, tgt, out_ids = trace.src_labels, trace.labels, trace.output_ids
    st.subheader("Cross-attention: the decoder reads the source")
    st.latex(r"\mathrm{CrossAttention} = \mathrm{softmax}\!\left("
             + (r"\frac{Q_{dec}\,K_{enc}^\top}{\sqrt{d_k}}" if cfg.attn_scale is None else r"Q_{dec}\,K_{enc}^\top"
                if cfg.attn_scale == 1 else rf"\frac{{Q_{{dec}}\,K_{{enc}}^\top}}{{{cfg.attn_scale:.4g}}}") + r"\right)V_{enc},"
             r"\quad Q = x_{dec}W_Q,\; K = h_{enc}W_K,\; V = h_{enc}W_V")
    st.markdown("Each row is a decoder position (the token it has just read, predicting the next one); each column a "
                "source token. No mask: the whole source is known."
                + (" Unlike this model's self-attention, its cross-attention adds **no relative position bias** (T5 gives "
                   "only self-attention one): a score here is q·k alone, so where a source token stands reaches the "
                   "decoder only through the encoder's output." if cfg.rel_pos_buckets else "")
                + (" In the date model, the rows that write the year digits look at the year in the source, the month "
                   "rows at the month name." if ctx.app.model_name == "dates-iso" else ""))
    patterns = cross_patterns(trace, cfg.n_layers)
    rows = [f"{t} → {vocab[o]}" for t, o in zip(tgt, out_ids)]
    show_figure(cross_heatmap(patterns[layer, head], rows, src, f"Cross-attention, decoder L{layer} H{head}"), ctx.app,
                f"cross_L{layer}_H{head}")
    grid, pooled = attention_grid(patterns)
    grid.update_layout(title="All decoder layers × heads: cross-attention (rows: output, columns: source)")
    show_figure(grid, ctx.app, "cross_all_heads")
    return patterns


def generation_steps(ctx: PageContext, patterns: np.ndarray, layer: int, answer: str) -> None:
    """One step of the generation: where each head of ``layer`` looked in the source, and the next-token
    distribution; a sample at T > 0 next to the greedy ``answer``."""
    trace, cfg, vocab = ctx.trace, ctx.cfg, ctx.vocab
    src, tgt, out_ids = trace.src_labels, trace.labels, trace.output_ids
    st.subheader("Generation, step by step")
    s1, s2 = st.columns(2)
    step = pick_index(s1, "Step", "step_dec", len(out_ids), 0, lambda t: f"{t}: after “{tgt[t]}” → “{vocab[out_ids[t]]}”")
    temperature = shared_number(s2.slider, "Temperature T (0 = greedy)", "temperature", 0.0, 3.0, 1.0, float, step=0.05)
    st.markdown(f"At step {step} the decoder has read **{plain(''.join(tgt[:step + 1]).replace('·', ' '))}** and the encoder's "
                "output; here is where each head of the chosen layer looked in the source, and the distribution the next "
                "token is drawn from.")
    g1, g2 = side_by_side(ctx.app, 2)
    with g1:
        show_figure(cross_heatmap(patterns[layer, :, step, :], [f"H{h}" for h in range(cfg.n_heads)], src,
                                  f"Step {step}: cross-attention of decoder L{layer}, every head", y_title="head"),
                    ctx.app, f"cross_step{step}_L{layer}", live="cross_step")
    with g2:
        view = next_token_view(trace.arrays["hook_logits"][step], temperature, 0, 1.0, out_ids[step])
        table = topk_table(view.probs, trace.arrays["hook_logits"][step], vocab, 8)
        show_figure(topk_bar(table["token"].tolist(), table["probability"].to_numpy(),
                             f"Next token at step {step}, T = {temperature:g}"), ctx.app, f"dec_next_step{step}", live="dec_next_step")
    if temperature > 0:
        seed = shared_number(st.number_input, "Seed", "seed", 0, 2**31 - 1, 0, int)
        try:
            sampled = sampled_output_gated(ctx.path, ctx.text, temperature, int(seed))
        except ValueError as exc:  # the tokenizer failed on the sampled output
            st.error(plain(str(exc)))
        else:
            if sampled is not None:  # None: a slow model's sample waits for its button
                st.markdown(f"Sampled at T = {temperature:g} (seed {seed}): **{plain(sampled)}** — greedy gives **{plain(answer)}**.")


ctx = open_page("Encoder-decoder & cross-attention",
                "The original transformer: an encoder reads the whole source at once (no mask), a decoder writes "
                "the output one token at a time (causal mask), and in every decoder block cross-attention lets "
                "the decoder's queries look at the encoder's keys and values.", needs_trace=False)
if not ctx.cfg.is_encoder_decoder:
    no_encoder(ctx)
    show_link(ctx.app)
    st.stop()
require_trace(ctx.app)
try:
    answer = output_text(ctx.tokenizer, ctx.trace.output_ids, ctx.cfg.decoder_end_id)
except ValueError as exc:  # an uploaded tokenizer that fails or panics on the output ids
    st.error(plain(str(exc)))
    st.stop()
source_and_output(ctx, answer)
layer, head = self_attention(ctx)
patterns = cross_attention(ctx, layer, head)
generation_steps(ctx, patterns, layer, answer)
show_link(ctx.app)
