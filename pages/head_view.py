"""Head view: lines from each token to the tokens it attends to, one colour per head."""

import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.analysis.heads import salience
from viz_ui.views.head_view import THRESHOLD, head_view_svg, legend_html, n_lines, readable_threshold, svg_height
from viz_ui.app.layout import pick_index, show_link
from viz_ui.app.page import PageContext, open_page

MAX_WINDOW = 64
CUTOFFS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2]


def pick_window(n: int) -> slice:
    """All positions, or a window of MAX_WINDOW of them chosen with a slider."""
    first = 0
    if n > MAX_WINDOW:
        first = st.slider("Window start", 0, n - MAX_WINDOW, n - MAX_WINDOW, key="hv_first",
                          help=f"{n} tokens are too many lines to read at once: the view shows {MAX_WINDOW} of them.")
        st.caption(f"Showing positions {first} to {first + MAX_WINDOW - 1} of {n}; lines to tokens outside the "
                   "window are not drawn.")
    return slice(first, first + min(n, MAX_WINDOW))


def head_view(ctx: PageContext, window: slice) -> None:
    """One layer's chosen heads as lines from each token to the tokens it attends to, inside ``window``."""
    trace, cfg, display = ctx.trace, ctx.cfg, ctx.display
    c1, c2, c3 = st.columns([1, 3, 1])
    layer = pick_index(c1, "Layer", "layer", cfg.n_layers)
    patterns = trace.arrays[f"blocks.{layer}.attn.hook_pattern"][:, window, window]
    # each layer starts with its single most salient head on (viz_ui.analysis.heads.salience): one readable set of lines
    start = int(salience(patterns).argmax())
    heads = sorted(c2.pills("Heads", list(range(cfg.n_heads)), selection_mode="multi", default=[start],
                            format_func=lambda h: f"H{h}", key=f"hv_heads_L{layer}") or [])
    cutoff = c3.select_slider("Hide lines below", CUTOFFS, value=THRESHOLD, key="hv_cutoff",
                              help="Weights under this are not drawn (they would be nearly invisible).")
    st.caption(f"Layer {layer} starts with head {start} on: the head whose tokens put the most weight on one particular token "
               "other than itself and the first (the attention sink). Click more heads to add their lines.")
    show_link(ctx.app)
    if not heads:
        st.info("Choose at least one head.")
        return
    drawn, full = readable_threshold(patterns, heads, cutoff), 1.0
    if drawn != cutoff:
        full = 2 * drawn  # the largest weight in the window: drawn fully opaque
        st.info(f"No weight of the chosen head{'s' if len(heads) > 1 else ''} in this window reaches {cutoff:g} (the largest "
                f"is {full:.4f}: the attention goes to tokens outside the window or is spread thin), so lines are drawn "
                f"from {drawn:.4f} and their opacity is relative to that largest weight. Lower the cutoff, choose other "
                "heads or move the window.", icon=":material/visibility_off:")
    svg = head_view_svg(patterns, trace.labels[window], heads, window.start, threshold=drawn, scale=display.scale,
                        theme=display.theme, full=full)
    st.html(legend_html(heads) + f" <small>({n_lines(patterns, heads, drawn)} lines)</small>")
    # st.html sanitises inline SVG away; an iframe shows our own SVG as it is (labels are escaped), its hover CSS
    # included. st.iframe is what Streamlit documents in place of its deprecated components-v1 html function.
    st.iframe(svg, height=min(round(1400 * display.scale), svg_height(len(trace.labels[window]), display.scale)) + 20,
              alt=f"Head view of layer {layer}: lines from each token to the tokens it attends to")
    if not display.lecture:
        st.download_button("Download as SVG", svg, file_name=f"{ctx.app.model_name}_head_view_L{layer}.svg",
                           mime="image/svg+xml", icon=":material/download:")


ctx = open_page("Head view",
                "For one layer: each token on the left sends lines to the tokens on the right it attends to. "
                "Line opacity is the attention weight, colour is the head. Hover a token to see only its lines.")
head_view(ctx, pick_window(ctx.trace.n_tokens))
