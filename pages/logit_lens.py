"""Logit lens: what the model would predict if it stopped after each layer."""

import numpy as np
import streamlit as st

from viz_ui.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.export import lens_table
from viz_ui.figures import stage_heatmap
from viz_ui.layout import require_trace, setup_page, show_figure
from viz_ui.state import get_logit_lens, get_vocab_labels

state = setup_page("Logit lens",
                   "Decode the residual stream after every layer with the model's own final LayerNorm and "
                   "unembedding: each cell shows the token it would predict next, and the colour its probability.")
trace = require_trace(state)
if not state.model.has_lm_head:
    st.info("This checkpoint has no language-model head, so its residual stream cannot be decoded into tokens.",
            icon=":material/block:")
    st.stop()
vocab = get_vocab_labels(state.model_path)
ids, probs, rows = get_logit_lens(state.model_path, trace.text)
text = np.vectorize(lambda i: vocab[i])(ids)
show_figure(stage_heatmap(probs, rows, trace.labels, "Top prediction after each layer", "probability",
                          cell_text=text, zmax=1.0), state, "logit_lens",
            data=lambda: lens_table(ids, probs, rows, trace.labels, vocab))
if trace.n_tokens > 40:
    st.caption("With more than 40 tokens the predicted tokens are shown on hover only.")
st.markdown("Read a column from top to bottom to see where a prediction forms: early layers often predict a "
            "frequent token, later layers the one that fits the context. The last row is the model's real output "
            "(the Output page).")
