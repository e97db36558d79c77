"""Tokens: the text cut into tokens, with positions and ids."""

import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.analysis.explain import tokenizer_sentence
from viz_ui.app.layout import show_link, show_table
from viz_ui.app.page import PageContext, open_page
from viz_ui.views.tables import token_chips_html, token_table
from viz_ui.analysis.text import plain
from viz_ui.analysis.text_trace import tokenizer_kind

def tokens(ctx: PageContext) -> None:
    """The text's tokens as chips (the source's and the decoder's for an encoder-decoder) and as a table."""
    trace = ctx.trace
    c1, c2, c3 = st.columns(3)
    c1.metric("Tokens", len(trace.src_ids) if trace.is_encoder_decoder else trace.n_tokens)
    c2.metric("Vocabulary size", f"{ctx.tokenizer.get_vocab_size():,}")
    c3.metric("Characters per token", f"{len(trace.text) / max(1, trace.n_tokens_total):.2f}")
    kind = tokenizer_kind(ctx.tokenizer)
    st.markdown(f"Tokenizer: **{plain(kind)}**. {tokenizer_sentence(kind)} Hover a chip for its position and id.")
    if trace.is_encoder_decoder:
        st.markdown(f"**Encoder (source)**: the text, {len(trace.src_ids)} tokens.")
        st.html(token_chips_html(trace.src_labels, trace.src_ids))
        st.markdown(f"**Decoder (target)**: the start token and the model's own output, {trace.n_tokens} tokens "
                    "(the decoder views on the other pages show these).")
        st.html(token_chips_html(trace.labels, trace.ids))
    else:
        st.html(token_chips_html(trace.labels, trace.ids))
        show_table(token_table(trace.ids, trace.labels, trace.offsets, trace.text), ctx.app, hide_index=True)


ctx = open_page("Tokens", "The model never sees letters: the tokenizer cuts the text into pieces (tokens) "
                          "and replaces each by its integer id in a fixed vocabulary.")
tokens(ctx)
show_link(ctx.app)  # publishes a class's view now (a page without figures: nothing else does)
