"""Embeddings & positions: E, P and x = E + P for the typed tokens, and where the tokens lie."""

import streamlit as st

from viz_ui.figures import matrix_heatmap, pca_scatter, position_curves, similarity_heatmap
from viz_ui.layout import require_trace, setup_page, show_figure
from viz_ui.numeric import cosine_similarity
from viz_ui.state import get_embedding_pca, get_positional_table
from viz_ui.tables import similarity_table

state = setup_page("Embeddings & positions",
                   "Each token id picks one row of the embedding matrix W_E: a vector of d_model numbers. "
                   "A positional encoding P is added so the model knows where each token stands: x = E + P "
                   "is what enters the first layer.")
trace = require_trace(state)
cfg = state.model.cfg
E, P = trace.arrays["hook_embed"], trace.arrays["hook_pos_embed"]
X = trace.arrays["blocks.0.hook_resid_pre"]  # what the first block receives: E + P as the model added it

POSITIONAL_TEXT = {
    "sinusoidal": "This model uses the fixed sinusoidal encoding of *Attention Is All You Need*: "
                  "P[pos, 2i] = sin(pos / 10000^(2i/d_model)), P[pos, 2i+1] = cos(pos / 10000^(2i/d_model)). "
                  "Low dimensions oscillate fast, high dimensions slowly, so every position gets a unique pattern.",
    "learned": "This model learned its positional encodings: P is a trained table with one row per position.",
    "none": "This model adds no positional encoding (P = 0): only the causal mask tells positions apart.",
}
st.markdown(POSITIONAL_TEXT.get(cfg.positional, ""))
tab_e, tab_p, tab_x = st.tabs(["E: token embeddings", "P: positional encodings", "x = E + P"])
with tab_e:
    show_figure(matrix_heatmap(E, trace.labels, f"Token embeddings E  [{trace.n_tokens} × {cfg.d_model}]"),
                state, "token_embeddings")
with tab_p:
    show_figure(matrix_heatmap(P, trace.labels, f"Positional encodings P  [{trace.n_tokens} × {cfg.d_model}]"),
                state, "positional_encodings")
    if cfg.positional != "none":
        dims = [d for d in (0, 1, 2 * (cfg.d_model // 8), 2 * (cfg.d_model // 4), cfg.d_model - 2) if d < cfg.d_model]
        show_figure(position_curves(get_positional_table(state.model_path), sorted(set(dims)), trace.n_tokens,
                                    f"P over the whole context ({cfg.n_ctx} positions), a few dimensions"),
                    state, "positional_curves")
with tab_x:
    show_figure(matrix_heatmap(X, trace.labels, f"Input to layer 0: x = E + P  [{trace.n_tokens} × {cfg.d_model}]"),
                state, "embedding_plus_position")

st.subheader("Where the tokens lie")
st.markdown("The embedding matrix has one row per vocabulary token. Principal component analysis finds the "
            "directions in which those rows vary most; grey dots are the whole vocabulary, red ones your tokens.")
dims = st.radio("Projection", ["2-D", "3-D"], horizontal=True, key="pca_dims")
pca, vocab_coords = get_embedding_pca(state.model_path)
k = 3 if dims == "3-D" else 2
show_figure(pca_scatter(vocab_coords[:, :k], pca.project(E)[:, :k], trace.labels, pca.explained,
                        f"Token embeddings in PCA coordinates ({dims})"), state, f"embedding_pca_{k}d")

st.subheader("How similar are the typed tokens?")
which = st.radio("Vectors", ["E (token only)", "x = E + P (token and position)"], horizontal=True, key="sim_vectors")
sim = cosine_similarity(E if which.startswith("E ") else X)
st.markdown("Cosine similarity x·y / (|x| |y|): 1 = same direction, 0 = unrelated, −1 = opposite. "
            "The same token at two positions has similarity 1 in E; adding P makes them differ.")
show_figure(similarity_heatmap(sim, trace.labels, "Cosine similarity between the typed tokens"), state,
            "cosine_similarity")
with st.expander("As a table"):
    st.dataframe(similarity_table(sim, trace.labels).round(3))
