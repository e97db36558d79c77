"""Head summaries: which heads behave like known kinds of attention heads."""

import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.views.figures import layer_head_heatmap
from viz_ui.app.gated import repeated_scores_gated
from viz_ui.analysis.heads import HEAD_THRESHOLD, SCORE_NAMES, cell_text_fits, heads_passing
from viz_ui.app.layout import set_layer_head, show_figure
from viz_ui.app.page import PageContext, open_page
from viz_ui.app.state import get_text_scores

def threshold_note() -> None:
    st.markdown(f"A head is called a head of a kind only when its score reaches **{HEAD_THRESHOLD:g}** (on average at "
                f"least {HEAD_THRESHOLD:.0%} of its attention goes where that kind of head looks); below that the page "
                "says so and names the best head anyway. Small models often have none of some kinds.")


def explanations(ctx: PageContext) -> tuple[dict[str, str], dict[str, str]]:
    """What each score measures, and on which text (the decoder's own output for an encoder-decoder)."""
    own_text = "the decoder's own output" if ctx.trace.is_encoder_decoder else "your text"
    cfg = ctx.cfg
    explain = {
        "previous-token": f"Weight each token puts on the token just before it (measured on {own_text}). Previous-token "
                          "heads copy the preceding word into the current position.",
        "first-token": f"Weight each token puts on the very first token (measured on {own_text}, position 0 excluded). "
                       "**Attention sink:** softmax must give all of its weight to *some* tokens; a head with nothing useful "
                       "to read often parks its attention on the first token, which every position can see (Xiao et al., "
                       "2023, *Efficient Streaming Language Models with Attention Sinks*). A high score here often means "
                       "'this head is idle here', not 'the first word matters'; the step-by-step view shows how much "
                       "the head then adds to the residual stream.",
        "duplicate-token": "On a random token sequence repeated twice: weight from each token of the second copy to the "
                           "same token in the first copy. Such heads notice that a token has been seen before.",
        "induction": "On the same repeated sequence: weight from a token of the second copy to the token that came "
                     "*after* it in the first copy (A B … A → look at B). "
                     + ("Induction heads let a model continue a pattern it has seen earlier in the context."
                        if cfg.causal else "In a decoder (GPT-style) such heads continue a pattern seen "
                        "before; this encoder sees the whole text, so a high score means it matches repeated stretches."),
    }
    where = {"previous-token": f"on {own_text}", "first-token": f"on {own_text}",
             "duplicate-token": "on the repeated random sequence", "induction": "on the repeated random sequence"}
    return explain, where


def open_head(layer: int, head: int) -> None:
    """A head's button: open it step by step."""
    set_layer_head(layer, head)
    st.switch_page("pages/head_steps.py")


def score_map(ctx: PageContext, name: str, scores: dict, text_fits: bool) -> None:
    """One kind of head: its score for every layer × head, what it measures, and its best heads to open."""
    explain, where = explanations(ctx)
    st.subheader(name.capitalize())
    if name not in scores and name == "duplicate-token":  # this one and the next: a run of the model on a repeated
        scores.update(repeated_scores_gated(ctx.path, ctx.trace.text) or {})  # random sequence (a button when slow)
    if name not in scores:
        st.markdown(explain[name])
        st.caption("This score comes from the run on the repeated random sequence (the button above).")
        return
    # normal mode: the map and its explanation side by side (3:2); lecture mode: stacked, the map at full width
    left, right = (st.container(), st.container()) if ctx.lecture else st.columns([3, 2])
    with right:
        st.markdown(explain[name])
        passing, best = heads_passing(scores[name])
        if best is None:
            st.caption("No score: the text has a single token.")
            shown = []
        elif passing:
            st.success(f"{len(passing)} {name} head{'s' if len(passing) > 1 else ''} {where[name]} (score ≥ "
                       f"{HEAD_THRESHOLD:g}): " + ", ".join(f"L{l}H{h} ({v:.2f})" for l, h, v in passing) + ".",
                       icon=":material/check:")
            shown = passing
        else:
            st.info(f"No {name} head {where[name]}: no score reaches {HEAD_THRESHOLD:g} "
                    f"(best: L{best[0]}H{best[1]}, {best[2]:.2f}).", icon=":material/block:")
            shown = [best]
        for layer, head, value in shown:
            if st.button(f"Layer {layer}, head {head}: {value:.2f} — step by step", key=f"open_{name}_{layer}_{head}",
                         icon=":material/calculate:"):
                open_head(layer, head)
    with left:
        fig = layer_head_heatmap(scores[name], f"{name} score")
        if not text_fits:  # too many heads for readable numbers in the cells: the colours and the hover say it
            fig.update_traces(texttemplate="")
        show_figure(fig, ctx.app, f"head_scores_{name}")


ctx = open_page("Head summaries",
                "Some heads do recognisable jobs. Each map scores every layer × head for one job, from 0 "
                "(never) to 1 (always); open a head to see its arithmetic step by step.")
threshold_note()
scores = dict(get_text_scores(ctx.path, ctx.text))  # a copy: the cached dict is shared by every session
text_fits = cell_text_fits(ctx.cfg.n_heads, ctx.display.scale)
for name in SCORE_NAMES:
    score_map(ctx, name, scores, text_fits)
if not text_fits:
    st.caption(f"With {ctx.cfg.n_heads} heads the cells are too narrow for numbers at this font size: hover a cell "
               "for its score.")
