"""Landing page: what the tool is, the pipeline at a glance, and where to start."""

import streamlit as st

from viz_ui.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.explain import positional_sentence
from viz_ui.layout import PAGES, setup_page
from viz_ui.state import model_card
from viz_ui.trace import tokenizer_kind

state = setup_page("Inside a Transformer",
                   "Type a sentence in the sidebar and watch what a real trained transformer computes for it.")
cfg = state.model.cfg

st.markdown(
    "Every number in this app is computed by the model you choose in the sidebar, on the text you type: "
    "nothing is a drawing. The pages follow the path of the text through the model.")

st.subheader("The pipeline at a glance")
steps = [
    ("Text → tokens", f"A {tokenizer_kind(state.tokenizer)} tokenizer cuts the text into tokens, each with an integer id."),
    ("Tokens → vectors", f"Each id selects a row of the embedding matrix W_E (d_model = {cfg.d_model}). "
                         + positional_sentence(cfg)),
    ("Attention", f"In each of {cfg.n_layers} layers, {cfg.n_heads} heads compute softmax(QKᵀ/√d_k)·V "
                  f"(d_k = {cfg.d_head}); " + ("a causal mask stops a token from looking ahead." if cfg.causal else
                                               "every token sees every other token (an encoder, no mask).")),
    ("Feed-forward", f"A two-layer network (d_mlp = {cfg.d_mlp}) transforms each position; add & norm "
                     f"({cfg.norm_placement}-LN) wraps every sub-layer."),
    ("Output", f"The last vector is multiplied by the unembedding and a softmax over {cfg.d_vocab} tokens "
               "gives the next-token probabilities; temperature reshapes them." if cfg.causal and state.model.has_lm_head
     else f"A masked-LM head predicts, at each position, which of {cfg.d_vocab} tokens belongs there (write [MASK])."
     if state.model.has_lm_head else "This model has no output head: it ends in hidden states (embeddings)."),
]
cols = st.columns(len(steps))
for col, (head, body) in zip(cols, steps):
    with col.container(border=True):
        st.markdown(f"**{head}**")
        st.caption(body)

st.subheader("Where to start")
for path, label, icon in PAGES[1:]:
    st.page_link(path, label=label, icon=icon)

st.subheader(f"The model: {state.model_name}")
st.markdown(f"{state.model.n_params():,} parameters · {cfg.n_layers} layers · {cfg.n_heads} heads · "
            f"d_model {cfg.d_model} · d_head {cfg.d_head} · d_mlp {cfg.d_mlp} · vocabulary {cfg.d_vocab} · "
            f"context {cfg.n_ctx} tokens · {cfg.positional} positions · {cfg.norm_placement}-LN · "
            f"{cfg.n_kv_heads} key/value heads · more on the Model inspector page")
card = model_card(state.model_path)
if card:
    with st.expander("Model card"):
        st.markdown(card)
