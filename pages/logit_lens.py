"""Logit lens: what the model would predict if it stopped after each layer."""

import numpy as np
import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.views.export import lens_table
from viz_ui.views.figures import position_ticks, stage_heatmap
from viz_ui.app.layout import show_figure
from viz_ui.app.page import PageContext, open_page
from viz_ui.app.gated import logit_lens_gated

TEXT_COLUMNS = 40  # positions whose predicted tokens are written in the cells at font scale 1 (fewer in lecture mode)

def what_a_cell_is(ctx: PageContext) -> None:
    cfg = ctx.cfg
    if cfg.causal:
        st.markdown(f"Each cell decodes one position with {'the final norm and ' if cfg.final_norm else ''}the unembedding "
                    "W_U: the token that position would predict **next** if the model stopped after that layer.")
    else:
        st.markdown("This encoder's output head" + (" (BERT's masked-LM transform: dense, GELU, LayerNorm, then W_U)"
                    if cfg.lm_head == "mlm" else "") + " decodes each position: the token it would fill in **at** that "
                    "position if the model stopped after that layer.")


def pick_window(ctx: PageContext, width: int) -> tuple[int, int]:
    """The positions ``(start, stop)`` drawn: all of them, or ``width`` of them chosen with a slider."""
    n = ctx.trace.n_tokens
    if n <= width:
        return 0, n
    a = st.slider("First position shown", 0, n - width, n - width, key="lens_first",
                  help=f"{n} positions are too many to write the predicted tokens in the cells: the figure shows "
                       f"{width} positions at a time with their text. Move the window along the text here.")
    st.caption(f":material/crop: Positions {a}–{a + width - 1} of {n}, with the predicted token in each cell; the CSV "
               "below the figure has every position.")
    return a, a + width


def lens_figure(ctx: PageContext) -> None:
    """The top prediction and its probability after every layer at every position (in a window)."""
    trace, vocab = ctx.trace, ctx.vocab
    lens = logit_lens_gated(ctx.path, trace.text)
    if lens is None:  # a slow model: waits for its button
        return
    ids, probs, rows = lens
    width = max(10, int(TEXT_COLUMNS / ctx.display.scale))  # columns with readable text at this font size
    a, b = pick_window(ctx, width)
    text = np.vectorize(lambda i: vocab[i])(ids[:, a:b])
    fig = stage_heatmap(probs[:, a:b], rows, trace.labels[a:b], "Top prediction after each layer", "probability",
                        cell_text=text, zmax=1.0, max_text_cols=width)
    if a:  # absolute positions on the axis and in the hover of a window
        fig.update_traces(x=list(range(a, b)))
        fig.update_xaxes(**position_ticks(trace.labels[a:b], offset=a))
    show_figure(fig, ctx.app, "logit_lens", data=lambda: lens_table(ids, probs, rows, trace.labels, vocab))
    st.markdown("Read a column from top to bottom to see where a prediction forms: early layers often predict a "
                "frequent token, later layers the one that fits the context. The last row is the model's real output "
                "(the Output page).")


ctx = open_page("Logit lens",
                "Decode the residual stream after every layer with the model's own output head, as if the model "
                "stopped there: each cell shows the token it would predict, and the colour its probability.",
                needs_lm_head="This checkpoint has no language-model head, so its residual stream cannot be decoded "
                              "into tokens.")
what_a_cell_is(ctx)
lens_figure(ctx)
