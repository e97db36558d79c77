"""Logit lens: what the model would predict if it stopped after each layer."""

import numpy as np
import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.views.export import lens_table
from viz_ui.views.figures import position_ticks, stage_heatmap
from viz_ui.app.layout import require_trace, setup_page, show_figure
from viz_ui.app.gated import logit_lens_gated
from viz_ui.app.state import get_vocab_labels

TEXT_COLUMNS = 40  # positions whose predicted tokens are written in the cells at font scale 1 (fewer in lecture mode)

state = setup_page("Logit lens",
                   "Decode the residual stream after every layer with the model's own output head, as if the model "
                   "stopped there: each cell shows the token it would predict, and the colour its probability.")
trace = require_trace(state)
cfg = state.model.cfg
if not state.model.has_lm_head:
    st.info("This checkpoint has no language-model head, so its residual stream cannot be decoded into tokens.",
            icon=":material/block:")
    st.stop()
if cfg.causal:
    st.markdown(f"Each cell decodes one position with {'the final norm and ' if cfg.final_norm else ''}the unembedding "
                "W_U: the token that position would predict **next** if the model stopped after that layer.")
else:
    st.markdown("This encoder's output head" + (" (BERT's masked-LM transform: dense, GELU, LayerNorm, then W_U)"
                if cfg.lm_head == "mlm" else "") + " decodes each position: the token it would fill in **at** that "
                "position if the model stopped after that layer.")
vocab = get_vocab_labels(state.model_path)
lens = logit_lens_gated(state.model_path, trace.text)
if lens is None:
    st.stop()
ids, probs, rows = lens
n = trace.n_tokens
width = max(10, int(TEXT_COLUMNS / state.display.scale))  # columns with readable text at this font size
a, b = 0, n
if n > width:
    a = st.slider("First position shown", 0, n - width, n - width, key="lens_first",
                  help=f"{n} positions are too many to write the predicted tokens in the cells: the figure shows "
                       f"{width} positions at a time with their text. Move the window along the text here.")
    b = a + width
    st.caption(f":material/crop: Positions {a}–{b - 1} of {n}, with the predicted token in each cell; the CSV below "
               "the figure has every position.")
text = np.vectorize(lambda i: vocab[i])(ids[:, a:b])
fig = stage_heatmap(probs[:, a:b], rows, trace.labels[a:b], "Top prediction after each layer", "probability",
                    cell_text=text, zmax=1.0, max_text_cols=width)
if a:  # absolute positions on the axis and in the hover of a window
    fig.update_traces(x=list(range(a, b)))
    fig.update_xaxes(**position_ticks(trace.labels[a:b], offset=a))
show_figure(fig, state, "logit_lens", data=lambda: lens_table(ids, probs, rows, trace.labels, vocab))
st.markdown("Read a column from top to bottom to see where a prediction forms: early layers often predict a "
            "frequent token, later layers the one that fits the context. The last row is the model's real output "
            "(the Output page).")
