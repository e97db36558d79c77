"""Head summaries: which heads behave like known kinds of attention heads."""

import streamlit as st

from viz_ui.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

from viz_ui.figures import layer_head_heatmap
from viz_ui.heads import SCORE_NAMES, top_heads
from viz_ui.layout import require_trace, set_shared, setup_page, show_figure
from viz_ui.state import get_head_scores

state = setup_page("Head summaries",
                   "Some heads do recognisable jobs. Each map scores every layer × head for one job, from 0 "
                   "(never) to 1 (always); open a head to see its arithmetic step by step.")
trace = require_trace(state)
scores = get_head_scores(state.model_path, trace.text)

EXPLAIN = {
    "previous-token": "Weight each token puts on the token just before it (measured on your text). Previous-token "
                      "heads copy the preceding word into the current position.",
    "first-token": "Weight each token puts on the very first token (measured on your text, position 0 excluded). "
                   "**Attention sink:** softmax must give all of its weight to *some* tokens; a head with nothing useful "
                   "to read often parks its attention on the first token, which every position can see (Xiao et al., "
                   "2023, *Efficient Streaming Language Models with Attention Sinks*). A high score here often means "
                   "'this head is idle here', not 'the first word matters'; the step-by-step view shows how much "
                   "the head then adds to the residual stream.",
    "duplicate-token": "On a random token sequence repeated twice: weight from each token of the second copy to the "
                       "same token in the first copy. Such heads notice that a token has been seen before.",
    "induction": "On the same repeated sequence: weight from a token of the second copy to the token that came "
                 "*after* it in the first copy (A B … A → look at B). Induction heads let a model continue a "
                 "pattern it has seen earlier in the context.",
}
for name in SCORE_NAMES:
    st.subheader(name.capitalize())
    left, right = st.columns([3, 2])
    with left:
        show_figure(layer_head_heatmap(scores[name], f"{name} score"), state, f"head_scores_{name}")
    with right:
        st.markdown(EXPLAIN[name].replace("your text", "the decoder's own output" if trace.is_encoder_decoder
                                                  else "your text"))
        for layer, head, value in top_heads(scores[name]):
            if st.button(f"Layer {layer}, head {head}: {value:.2f} — step by step", key=f"open_{name}_{layer}_{head}",
                         icon=":material/calculate:"):
                set_shared("layer", layer)
                set_shared("head", head)
                st.switch_page("pages/head_steps.py")
