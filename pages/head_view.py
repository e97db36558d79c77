"""Head view: lines from each token to the tokens it attends to, one colour per head."""

import streamlit as st
import streamlit.components.v1 as components

from viz_ui.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.headview import head_view_svg, legend_html, svg_height
from viz_ui.layout import pick_index, require_trace, setup_page, show_link

MAX_WINDOW = 64

state = setup_page("Head view",
                   "For one layer: each token on the left sends lines to the tokens on the right it attends to. "
                   "Line opacity is the attention weight, colour is the head. Hover a token to see only its lines.")
trace = require_trace(state)
cfg = state.model.cfg
c1, c2 = st.columns([1, 3])
layer = pick_index(c1, "Layer", "layer", cfg.n_layers)
heads = c2.pills("Heads", list(range(cfg.n_heads)), selection_mode="multi", default=list(range(cfg.n_heads)),
                 format_func=lambda h: f"H{h}", key="hv_heads")
n = trace.n_tokens
first = 0
if n > MAX_WINDOW:
    first = st.slider("Window start", 0, n - MAX_WINDOW, n - MAX_WINDOW, key="hv_first",
                      help=f"{n} tokens are too many lines to read at once: the view shows {MAX_WINDOW} of them.")
    st.caption(f"Showing positions {first} to {first + MAX_WINDOW - 1} of {n}; lines to tokens outside the "
               "window are not drawn.")
window = slice(first, first + min(n, MAX_WINDOW))
patterns = trace.arrays[f"blocks.{layer}.attn.hook_pattern"][:, window, window]
if not heads:
    st.info("Choose at least one head.")
    st.stop()
show_link(state)
svg = head_view_svg(patterns, trace.labels[window], sorted(heads), first)
st.html(legend_html(sorted(heads)))
# st.html sanitises inline SVG away; a components iframe shows our own SVG as it is (labels are escaped).
components.html(svg, height=min(1400, svg_height(len(trace.labels[window]))) + 20, scrolling=True)
st.download_button("Download as SVG", svg, file_name=f"{state.model_name}_head_view_L{layer}.svg",
                   mime="image/svg+xml", icon=":material/download:")
