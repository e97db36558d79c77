"""Landing page: the whole model on one screen, live: the text's tokens, the input vectors, every layer's heads
and feed-forward network as thumbnails of what the model computed, and the output probabilities. Clicking a
part opens its page."""


import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.analysis.explain import positional_sentence, score_formula
from viz_ui.views.figure_spec import FigureSpec
from viz_ui.views.figures import topk_bar
from viz_ui.analysis.generation import mask_positions
from viz_ui.app.layout import selected_points, set_layer_head, set_shared, show_figure, side_by_side
from viz_ui.app.page import PageContext, open_page
from viz_ui.views.overview import map_targets, model_map, output_distribution, thumbnail_side
from viz_ui.app.state import get_mlp_thumbnails, get_overview, model_card
from viz_ui.views.tables import token_chips_html
from viz_ui.analysis.text import plain, plotly_text
from viz_ui.analysis.text_trace import tokenizer_kind

TARGET_PAGES = {"input": "pages/embeddings.py", "head": "pages/attention.py", "mlp": "pages/block.py"}

def open_clicked(n_layers: int, n_heads: int) -> None:
    """on_select of the model map: remember the clicked head (shared layer/head) and the page to open."""
    points = selected_points("model_map")
    if not points or points[0].get("curve_number") != 2 + n_layers:  # only the clickable overlay
        return
    kind, layer, head = map_targets(n_layers, n_heads)[points[0]["point_index"]]
    if kind == "head":
        set_layer_head(layer, head)
    elif kind != "input":
        set_shared("layer", layer)
    st.session_state["_open_page"] = TARGET_PAGES[kind]


def model_map_part(ctx: PageContext) -> None:
    """The whole model as thumbnails of what it computed for the text, clickable."""
    cfg, trace = ctx.cfg, ctx.trace
    encoder = trace.is_encoder_decoder
    patterns, _ = get_overview(ctx.path, ctx.text)
    mlp, units = get_mlp_thumbnails(ctx.path, ctx.text, thumbnail_side(patterns))
    fig = FigureSpec(model_map, trace.arrays["blocks.0.hook_resid_pre"], patterns, mlp, cfg.mlp, mlp_units=units,
                     title=f"{'The decoder: ' if encoder else ''}input, then {cfg.n_layers} layers × "
                           f"({cfg.n_heads} heads + MLP)")
    show_figure(fig, ctx.app, "model_map", select_key="model_map",
                on_select=lambda: open_clicked(cfg.n_layers, cfg.n_heads))
    st.caption("Top row: the vectors that enter the first layer, one row per token "
               f"({'x = E + P' if cfg.positional in ('learned', 'sinusoidal') else 'x = E'}). Each later row is a "
               "layer: its heads' attention maps (query × key, darker = more weight) and, last, its feed-forward "
               "activations (token × unit, red +, blue −). Thumbnails keep the strongest value of each block of "
               "cells. Click one to open it.")


def output_part(ctx: PageContext) -> None:
    """The output distribution at the position a user would look at first (or why there is none)."""
    cfg, model, trace = ctx.cfg, ctx.model, ctx.trace
    encoder = trace.is_encoder_decoder
    if model.has_lm_head:
        if cfg.causal:
            pos = 0 if encoder else trace.n_tokens - 1
            what = ("The first output token" if encoder else f"After “{plain(trace.labels[pos])}”: the next token")
        else:
            masks = mask_positions(ctx.tokenizer, trace.ids)
            pos = masks[0] if masks else trace.n_tokens - 1
            what = f"At position {pos} ({'[MASK]' if masks else plain(trace.labels[pos])}): the token that belongs there"
        ids, probs = output_distribution(trace.arrays["hook_logits"][pos])
        vocab = ctx.vocab
        # Plotly reads <b>, <a href> … in titles as markup: a token's text is escaped
        title = (f"Output after “{plotly_text(trace.labels[pos])}” (T = 1)" if cfg.causal and not encoder
                 else f"Output at position {pos} (T = 1)")
        show_figure(FigureSpec(topk_bar, [vocab[i] for i in ids], probs, title), ctx.app, "model_output")
        st.caption(f"{what}: softmax of the logits over all {cfg.d_vocab:,} tokens. Temperature, top-k and "
                   "generation are on the output page.")
    else:
        st.info("This checkpoint has no output head: it ends in hidden states (vectors per token), so there are "
                "no output probabilities.", icon=":material/block:")


def overview(ctx: PageContext) -> None:
    """The text's tokens, the model map, the output and links to the pages."""
    cfg, trace = ctx.cfg, ctx.trace
    encoder = trace.is_encoder_decoder
    st.markdown(f"**Tokens** ({tokenizer_kind(ctx.tokenizer)}): "
                + (f"the source has {len(trace.src_ids)}; the decoder below reads its own output, {trace.n_tokens}."
                   if encoder else f"{trace.n_tokens}, each an id in a vocabulary of {cfg.d_vocab:,}."))
    st.html(token_chips_html(trace.labels, trace.ids))
    left, right = side_by_side(ctx.app, [3, 2])
    with left:
        model_map_part(ctx)
    with right:
        output_part(ctx)
    links = st.columns(5)
    for col, (page, label, icon) in zip(links, [
            ("pages/tokens.py", "Tokens", ":material/text_fields:"),
            ("pages/embeddings.py", "Embeddings", ":material/scatter_plot:"),
            ("pages/attention.py", "Attention", ":material/visibility:"),
            ("pages/block.py", "Feed-forward", ":material/stacks:"),
            ("pages/output.py", "Output", ":material/bar_chart:")]):
        col.page_link(page, label=label, icon=icon)


def what_each_part_computes(ctx: PageContext) -> None:
    cfg, model = ctx.cfg, ctx.model
    with st.expander("What each part computes", icon=":material/info:"):
        steps = [
            ("Text → tokens", f"A {tokenizer_kind(ctx.tokenizer)} tokenizer cuts the text into tokens, each with an "
                              "integer id."),
            ("Tokens → vectors", f"Each id selects a row of the embedding matrix W_E (d_model = {cfg.d_model}). "
                                 + positional_sentence(cfg)),
            ("Attention", f"In each of {cfg.n_layers} layers, {cfg.n_heads} heads compute "
                          + ("softmax(QKᵀ/√d_k)·V " if score_formula(cfg) == "q·k/√d_k" else
                             f"softmax(S)·V, a score S = {score_formula(cfg)} for each query q and key k ")
                          + f"(d_k = {cfg.d_head}); " + ("a causal mask stops a token from looking ahead." if cfg.causal else
                                                       "every token sees every other token (an encoder: no mask).")),
            ("Feed-forward", f"A two-layer network (d_mlp = {cfg.d_mlp}) transforms each position; add & norm "
                             f"({cfg.norm_placement}-LN) wraps every sub-layer."),
            ("Output", f"The last vector is multiplied by the unembedding and a softmax over {cfg.d_vocab:,} tokens gives "
                       "the next-token probabilities; temperature reshapes them." if cfg.causal and model.has_lm_head
             else f"A masked-LM head predicts, at each position, which of {cfg.d_vocab:,} tokens belongs there (write "
                  "[MASK])." if model.has_lm_head else "This model has no output head: it ends in hidden states."),
        ]
        for head, body in steps:
            st.markdown(f"**{head}.** {body}")


def about_the_model(ctx: PageContext) -> None:
    cfg, model = ctx.cfg, ctx.model
    with st.expander(f"The model: {plain(ctx.app.model_name)}", icon=":material/memory:"):
        st.markdown(f"{model.n_params():,} parameters · {cfg.n_layers} layers · {cfg.n_heads} heads · "
                    f"d_model {cfg.d_model} · d_head {cfg.d_head} · d_mlp {cfg.d_mlp} · vocabulary {cfg.d_vocab:,} · "
                    f"context {cfg.n_ctx:,} tokens · {cfg.positional} positions · {cfg.norm_placement}-LN · "
                    f"{cfg.n_kv_heads} key/value heads · more on the Model inspector page")
        card = model_card(ctx.path)
        if card:
            st.markdown(card)


ctx = open_page("Inside a Transformer",
                "Type in the sidebar: every picture below is what the model computes for your text, redrawn as "
                "you type. Click a part to open it.", needs_trace=False)
if page := st.session_state.pop("_open_page", None):
    st.switch_page(page)
if ctx.trace is not None:
    overview(ctx)
what_each_part_computes(ctx)
about_the_model(ctx)
