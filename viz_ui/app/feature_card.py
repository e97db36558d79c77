"""One dictionary feature's card (the Features page's, also opened from a node of the Circuits page): where it fires
on the text, its top contexts on the shipped corpus and its activation histogram, the tokens it raises and lowers,
the heads that write to it, and the code that computes it."""

from __future__ import annotations

import numpy as np
import streamlit as st

from viz_model.features import head_contributions, promoted_tokens
from viz_model.features.dictionary import SparseDictionary
from viz_ui.analysis.text import plain
from viz_ui.app.features import get_index
from viz_ui.app.layout import show_code, show_figure, side_by_side
from viz_ui.app.page import PageContext
from viz_ui.app.state import export_load_args
from viz_ui.views.code_features import features_code
from viz_ui.views.features import contexts_html, feature_name, head_writes_figure, histogram_figure
from viz_ui.views.figures import value_bar


def show_feature_card(ctx: PageContext, d: SparseDictionary, folder: str, feature: int, mine: np.ndarray,
                      ids: list[int] | None = None) -> None:
    """Draw feature ``feature`` of the dictionary ``d`` (from ``folder``), whose activations on the text are ``mine``
    ``[pos]``. ``ids``: the token ids ``mine`` belongs to (default: the page's trace)."""
    trace, cfg, model, vocab = ctx.trace, ctx.cfg, ctx.model, ctx.vocab
    ids = list(trace.ids) if ids is None else list(ids)
    labels = [vocab[int(t)] for t in ids]
    n = len(ids)
    name = feature_name(d.hook_name, feature)
    index = get_index(folder, cfg.d_vocab)
    fires = int((mine > 0).sum())
    st.markdown(f"On your text it is active at **{fires}** of {n} tokens"
                + (f", most at position {int(mine.argmax())} ({plain(labels[int(mine.argmax())])}, "
                   f"{float(mine.max()):.3f})." if fires else ".")
                + (f" On the shipped corpus it is active at {index.frequency(feature):.2%} of tokens." if index else ""))
    left, right = side_by_side(ctx.app, 2)
    with left:
        if index is not None:
            contexts = index.contexts(feature)
            st.markdown("**Top-activating contexts** on the corpus (the peak token outlined, its activation at the end):")
            if contexts:
                st.html(contexts_html([([vocab[t] for t in c.tokens], c.acts, c.peak, c.value) for c in contexts]))
            else:
                st.caption("This feature never fires on the corpus (a dead feature).")
            counts, edges = index.histogram(feature)
            show_figure(histogram_figure(counts.numpy(), edges.numpy(), mine, f"{name}: activations when active"), ctx.app,
                        f"feature_hist_{name}")
        else:
            st.caption("This dictionary has no index of top contexts (top_contexts.safetensors).")
    with right:
        if model.has_lm_head and d.d_out == cfg.d_model:
            (up_ids, up), (down_ids, down) = promoted_tokens(model, d, feature, n=8)
            what = "next token" if cfg.causal else "token"
            for ids_, vals, verb in ((up_ids, up, "raises"), (down_ids, down, "lowers")):
                bars = value_bar([vocab[int(i)] for i in ids_], vals.numpy(), f"{name} {verb} the logit of",
                                 f"logit change per unit of activation ({what})")
                show_figure(bars, ctx.app, f"feature_{verb}_{name}")
            st.caption("The decoder direction W_dec[f] read through the final norm's weight and the unembedding W_U: its "
                       "direct effect on the logits, through no later layer.")
    pos = int(mine.argmax()) if fires else n - 1
    try:
        writes = head_contributions(model, np.array(ids), d, feature, pos).numpy()
        show_figure(head_writes_figure(writes, f"Heads whose output at position {pos} adds to {name}"), ctx.app,
                    f"feature_heads_{name}")
        st.caption(f"Each head's output at position {pos} ({plain(labels[pos])}), z W_O, projected on the feature's "
                   "encoder column W_enc[:, f]: what it adds to the feature's pre-activation (heads after the "
                   "dictionary's hook add nothing).")
    except ValueError as exc:
        st.caption(f"Heads writing to this feature: not shown ({plain(str(exc))}).")
    show_code(ctx.app, "features", lambda: features_code(ctx.path, ctx.text, folder, feature, n, pos,
                                                         export_load_args(model)),
              "checkpoint, text and dictionary")
