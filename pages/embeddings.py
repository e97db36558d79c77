"""Embeddings & positions: E, P and x = E + P for the typed tokens, and where the tokens lie."""

import dataclasses

import numpy as np
import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.analysis.explain import input_name, positional_sentence
from viz_ui.views.figures import (angle_heatmap, attention_heatmap, matrix_heatmap, pca_scatter, position_curves,
                            relative_score_curve, similarity_heatmap)
from viz_ui.app.layout import needs_window, pick_layer_head, pick_position, position_window, show_figure, show_table
from viz_ui.app.page import PageContext, open_page
from viz_ui.analysis.rotary import angle_table, longrope_words, relative_scores
from viz_ui.analysis.numeric import cosine_similarity
from viz_ui.analysis.text import plotly_text
from viz_ui.app.gated import embedding_pca_gated
from viz_ui.app.state import get_positional_table
from viz_ui.views.tables import similarity_table
from viz_ui.analysis.text_trace import Trace

MAX_PCA_LABELS = 24  # labels on the PCA scatter (half in lecture mode): more overlap


def label_pca(fig, ids, labels: list[str], coords, max_labels: int) -> int:
    """Thin the typed tokens' labels on :func:`pca_scatter`'s figure (its second trace): a token repeated in the
    text sits on one point in E, so only its first position is labelled; at most ``max_labels`` tokens, spread over
    the text; labels alternate above and below their points from left to right. Every point keeps its full label
    on hover. Returns how many tokens are labelled."""
    full = [f"{i} {plotly_text(lab)}" for i, lab in enumerate(labels)]
    firsts = sorted({int(t): i for i, t in reversed(list(enumerate(ids)))}.values())
    keep = [firsts[round(j * len(firsts) / max_labels)] for j in range(max_labels)] if len(firsts) > max_labels else firsts
    keep = sorted(set(keep))
    side = {pos: ("top center" if rank % 2 == 0 else "bottom center")
            for rank, pos in enumerate(sorted(keep, key=lambda p: float(coords[p, 0])))}
    fig.data[1].update(text=[full[i] if i in side else "" for i in range(len(full))],
                       textposition=[side.get(i, "top center") for i in range(len(full))],
                       hovertext=full, hovertemplate="%{hovertext}<extra></extra>")
    return len(keep)


POSITIONAL_TEXT = {
    "sinusoidal": "This model uses the fixed sinusoidal encoding of *Attention Is All You Need*: "
                  "P[pos, 2i] = sin(pos / 10000^(2i/d_model)), P[pos, 2i+1] = cos(pos / 10000^(2i/d_model)). "
                  "Low dimensions oscillate fast, high dimensions slowly, so every position gets a unique pattern.",
    "learned": "This model learned its positional encodings: P is a trained table with one row per position.",
}

def pick_stack(ctx: PageContext) -> tuple[str, Trace]:
    """An encoder-decoder's stack (the hook prefix, "encoder." or "", and the trace with that stack's ids and
    labels); the trace as it is for other models."""
    trace = ctx.trace
    if not trace.is_encoder_decoder:
        return "", trace
    stack = st.radio("Stack", ["encoder (source)", "decoder (target)"], horizontal=True, key="emb_stack",
                     help="Encoder and decoder share the token embedding W_E; each has its own positions.")
    prefix = "encoder." if stack.startswith("encoder") else ""
    labels = trace.src_labels if prefix else trace.labels
    return prefix, dataclasses.replace(trace, ids=trace.src_ids if prefix else trace.ids, labels=labels)


def positional_note(ctx: PageContext) -> None:
    """How this model encodes positions, in one paragraph."""
    cfg = ctx.cfg
    st.markdown(positional_sentence(cfg) if cfg.position_pad_id is not None  # RoBERTa: padding has a row of its own
                else POSITIONAL_TEXT.get(cfg.positional, positional_sentence(cfg)))


def pick_centre(ctx: PageContext, trace: Trace) -> int:
    """One position chooser for every windowed view of the page (drawn only when a view needs it), saying which
    views: the centre of their windows."""
    cfg = ctx.cfg
    windowed = (["the E, P and x heatmaps"] if needs_window(trace, cfg.d_model) else []) + (
        ["the cosine-similarity matrix"] if needs_window(trace) else [])
    if not windowed:
        return trace.n_tokens - 1
    centre = pick_position(st, trace, "Window around position (for " + " and ".join(windowed) + ")")
    st.caption(f":material/crop: {trace.n_tokens} tokens are too many for some views: this position chooses the window "
               f"of {' and of '.join(windowed)}. The PCA and the positional curves show every typed token.")
    return centre


def rotary_positions(ctx: PageContext, trace: Trace) -> None:
    """Rotary embeddings: the angles of the typed positions, and one head's score as a function of distance."""
    cfg = ctx.cfg
    d_rot = cfg.d_rotary
    st.markdown("Rotary embeddings (RoFormer, Su et al. 2021) add nothing to x. In every layer, the query and "
                f"key of the token at position m are split into {d_rot}/2 pairs of numbers, and pair i is rotated "
                f"by the angle m·θ_i with θ_i = {cfg.rotary_base:g}^(−2i/{d_rot}): fast turns in the first pairs, "
                "slow ones in the last. Below: the angles of the typed positions (wrapped to 0…2π).")
    if d_rot < cfg.d_head:
        st.info(f"Partial rotary: only the first {d_rot} of the {cfg.d_head} dimensions of each query and key are "
                f"rotated; the other {cfg.d_head - d_rot} are left as they are, so that part of q·k ignores "
                "position entirely.", icon=":material/rotate_right:")
    if cfg.rotary_scaling == "longrope":
        st.caption(longrope_words(cfg, trace.n_tokens) + " The angles below are the ones this text uses.")
    elif cfg.rotary_scaling != "none":
        st.caption(f"This model rescales the frequencies for a longer context ({cfg.rotary_scaling} scaling, factor "
                   f"{cfg.rotary_factor:g}); the angles below are the rescaled ones it really uses.")
    if cfg.rotary_base_local is not None:
        st.caption(f"Its sliding-window layers use their own base, {cfg.rotary_base_local:g}, without scaling; the "
                   "angles below are those of the full-attention layers.")
    show_figure(angle_heatmap(angle_table(trace.n_tokens, d_rot, cfg.rotary_base, cfg), trace.labels,
                              f"Rotation angle m·θ_i  [{trace.n_tokens} positions × {d_rot // 2} pairs]"),
                ctx.app, "rotary_angles")
    st.markdown("Because rotating q by m·θ and k by n·θ leaves a rotation by (m − n)·θ between them, the score "
                "q·k depends on the two tokens and on their **distance**, not on where they stand. The curve "
                "takes one head's (unrotated) query of the last token and key of a chosen token, and places them "
                "Δ positions apart; the red dot is the score this head really computed in your text.")
    c1, c2, c3 = st.columns(3)
    layer, head = pick_layer_head(ctx.app, c1, c2)
    key_pos = c3.selectbox("Key token", range(trace.n_tokens), index=0, key="rope_key",
                           format_func=lambda i: f"{i} {trace.labels[i]}")
    normed = "q_norm.hook_normalized" if cfg.qk_norm != "none" else "hook_q"  # what is rotated (after q/k norm)
    q = trace.arrays[f"blocks.{layer}.attn.{normed}"][-1, head]
    k = trace.arrays[f"blocks.{layer}.attn.{normed.replace('q', 'k', 1)}"][key_pos, cfg.kv_head(head)]
    if cfg.clip_qkv is not None:  # OLMoE clamps q and k after their norm, before the rotation
        q, k = np.clip(q, -cfg.clip_qkv, cfg.clip_qkv), np.clip(k, -cfg.clip_qkv, cfg.clip_qkv)
    span = min(cfg.n_ctx, max(256, trace.n_tokens))
    delta = trace.n_tokens - 1 - key_pos
    recorded = float(trace.arrays[f"blocks.{layer}.attn.hook_attn_scores"][head, -1, key_pos])
    if not np.isfinite(recorded):
        st.caption(f"This pair is {delta} positions apart, outside the sliding window of {cfg.attn_window}: its "
                   "recorded score is −∞ (masked), so no dot is drawn.")
    layer_cfg = ctx.model.blocks[layer].attn.cfg
    show_figure(relative_score_curve(relative_scores(q, k, layer_cfg.rotary_base, span, layer_cfg, trace.n_tokens),
                                     f"Layer {layer}, head {head}: score of “{plotly_text(trace.labels[-1])}” → "
                                     f"“{plotly_text(trace.labels[key_pos])}” at every distance",
                                     [(delta, recorded, f"recorded: Δ = {delta}")] if np.isfinite(recorded) else []),
                ctx.app, f"rotary_relative_L{layer}_H{head}")


def relative_position_bias(ctx: PageContext, trace: Trace, prefix: str, window: tuple[int, int]) -> None:
    """T5's learned relative position bias of one head (``prefix``: "encoder." for the encoder's)."""
    cfg, (ra, rb) = ctx.cfg, window
    rows = trace.labels[ra:rb]
    st.markdown(f"T5 adds nothing to x. Each self-attention score q·k gets a learned number added that depends "
                f"only on the head and on the distance key − query, grouped into {cfg.rel_pos_buckets} buckets: "
                f"exact distances for the near ones, log-spaced ones up to {cfg.rel_pos_max_distance}, and one "
                "bucket for everything farther" + (" (the encoder's buckets look both ways, the decoder's only "
                "back)" if cfg.is_encoder_decoder else "") + ". Every layer of this stack adds the same matrix.")
    rel_head = st.selectbox("Head", range(cfg.n_heads), key="rel_pos_head", format_func=lambda h: f"head {h}")
    bias = trace.arrays[prefix + "rel_pos.hook_bias"][rel_head]  # [query_pos, key_pos]
    show_figure(attention_heatmap(bias[ra:rb, ra:rb], rows, f"Relative position bias of head {rel_head} "
                                  f"[{trace.n_tokens} × {trace.n_tokens}], added to every layer's scores",
                                  "scores", offset=ra), ctx.app, f"rel_pos_bias_H{rel_head}")


def embedding_tabs(ctx: PageContext, trace: Trace, prefix: str, centre: int) -> None:
    """E, P (or the rotary angles, or T5's bias) and x = E + P, in three tabs."""
    cfg = ctx.cfg
    E, P = trace.arrays[prefix + "hook_embed"], trace.arrays[prefix + "hook_pos_embed"]
    X = trace.arrays[prefix + "blocks.0.hook_resid_pre"]  # what the first block receives, as the model added it
    x_name = input_name(cfg)
    ra, rb = position_window(st, trace, cfg.d_model, centre)
    rows = trace.labels[ra:rb]
    tab_e, tab_p, tab_x = st.tabs(["E: token embeddings",
                                   "Rotary positions" if cfg.positional == "rotary" else
                                   "Relative position bias" if cfg.rel_pos_buckets else "P: positional encodings", x_name])
    with tab_e:
        show_figure(matrix_heatmap(E[ra:rb], rows, f"Token embeddings E  [{trace.n_tokens} × {cfg.d_model}]",
                                   offset=ra), ctx.app, "token_embeddings")
    with tab_p:
        if cfg.positional == "rotary":
            rotary_positions(ctx, trace)
        elif cfg.rel_pos_buckets:  # T5: no P; a learned bias per head and distance bucket on every self-attention score
            relative_position_bias(ctx, trace, prefix, (ra, rb))
        else:
            show_figure(matrix_heatmap(P[ra:rb], rows, f"Positional encodings P  [{trace.n_tokens} × {cfg.d_model}]",
                                       offset=ra), ctx.app, "positional_encodings")
        if cfg.positional in ("learned", "sinusoidal"):
            dims = [d for d in (0, 1, 2 * (cfg.d_model // 8), 2 * (cfg.d_model // 4), cfg.d_model - 2) if d < cfg.d_model]
            show_figure(position_curves(get_positional_table(ctx.path, encoder=prefix == "encoder."), sorted(set(dims)), trace.n_tokens,
                                        f"P over the whole context ({cfg.n_ctx} positions), a few dimensions"),
                        ctx.app, "positional_curves")
    with tab_x:
        if cfg.n_token_types:
            st.caption("T is the token-type (segment) embedding: BERT adds it to tell sentence A from sentence B; "
                       "a single text is all type 0." + (" LN is the embedding LayerNorm." if cfg.embed_norm else ""))
        show_figure(matrix_heatmap(X[ra:rb], rows, f"Input to layer 0: {x_name}  [{trace.n_tokens} × {cfg.d_model}]",
                                   offset=ra), ctx.app, "embedding_plus_position")


def where_tokens_lie(ctx: PageContext, trace: Trace, prefix: str) -> None:
    """The typed tokens among the whole vocabulary's embeddings, in PCA coordinates."""
    cfg, E = ctx.cfg, trace.arrays[prefix + "hook_embed"]
    st.subheader("Where the tokens lie")
    st.markdown("The embedding matrix has one row per vocabulary token. Principal component analysis finds the "
                "directions in which those rows vary most; grey dots are the whole vocabulary, red ones your tokens.")
    projected = embedding_pca_gated(ctx.path, trace.text)  # an SVD of the whole W_E: behind a button when slow
    if projected is not None:
        dims = st.radio("Projection", ["2-D", "3-D"], horizontal=True, key="pca_dims")
        pca, vocab_coords = projected
        k = 3 if dims == "3-D" else 2
        typed = pca.project(E / cfg.embed_scale)[:, :k]
        pca_fig = pca_scatter(vocab_coords[:, :k], typed, trace.labels, pca.explained,
                              f"Token embeddings in PCA coordinates ({dims})")
        n_named = label_pca(pca_fig, trace.ids, trace.labels, typed, MAX_PCA_LABELS // (2 if ctx.lecture else 1))
        show_figure(pca_fig, ctx.app, f"embedding_pca_{k}d")
        if n_named < len(set(trace.ids.tolist())):
            st.caption(f"{n_named} of the {len(set(trace.ids.tolist()))} different tokens are labelled, so the labels stay "
                       "readable; hover a red dot for any token.")


def similarities(ctx: PageContext, trace: Trace, prefix: str, centre: int) -> None:
    """Cosine similarity between the typed tokens' E or x."""
    E, X = trace.arrays[prefix + "hook_embed"], trace.arrays[prefix + "blocks.0.hook_resid_pre"]
    st.subheader("How similar are the typed tokens?")
    which = st.radio("Vectors", ["E (token only)", "x = E + P (token and position)"], horizontal=True, key="sim_vectors")
    sim = cosine_similarity(E if which.startswith("E ") else X)
    st.markdown("Cosine similarity x·y / (|x| |y|): 1 = same direction, 0 = unrelated, −1 = opposite. "
                "The same token at two positions has similarity 1 in E; adding P makes them differ.")
    sa, sb = position_window(st, trace, None, centre)
    show_figure(similarity_heatmap(sim[sa:sb, sa:sb], trace.labels[sa:sb], "Cosine similarity between the typed tokens",
                                   offset=sa), ctx.app, "cosine_similarity")
    with st.expander("As a table"):
        show_table(similarity_table(sim[sa:sb, sa:sb], trace.labels[sa:sb]).round(3), ctx.app)


ctx = open_page("Embeddings & positions",
                "Each token id picks one row of the embedding matrix W_E: a vector of d_model numbers. "
                "A positional encoding P is added so the model knows where each token stands: x = E + P "
                "is what enters the first layer.")
prefix, trace = pick_stack(ctx)
positional_note(ctx)
centre = pick_centre(ctx, trace)
embedding_tabs(ctx, trace, prefix, centre)
where_tokens_lie(ctx, trace, prefix)
similarities(ctx, trace, prefix, centre)
