"""Features: a sparse dictionary (SAE or transcoder) rewrites a layer's activation as a few readable features."""

from typing import NamedTuple

import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

import numpy as np
import pandas as pd

from viz_model import CheckpointError
from viz_model.features import head_contributions, promoted_tokens
from viz_ui.app.dictionary_jobs import adopt_finished, manage_dictionaries
from viz_ui.views.code_features import features_code
from viz_ui.app.features import TextFeatures, dictionary, dictionary_sets, get_index, get_text_features
from viz_ui.app.state import export_load_args
from viz_ui.views.features import (contexts_html, feature_name, head_writes_figure, histogram_figure, strongest_map,
                                  text_features_heatmap, top_text_features)
from viz_ui.views.figures import value_bar
from viz_ui.app.layout import (pick_index, selected_points, set_position, set_shared, shared_number, show_code, show_figure, show_table,
                           side_by_side)
from viz_ui.app.page import PageContext, open_page
from viz_ui.analysis.text import plain

class Loaded(NamedTuple):
    """The chosen set of dictionaries (one per hook) and what they read from the text."""

    folders: tuple[str, ...]
    dicts: list
    feats: TextFeatures  # hooks, acts (per hook [pos, d_sae]), fvu, l0


def load_dictionaries(ctx: PageContext) -> Loaded | None:
    """The chosen set of dictionaries and their features on the text; None (with its message) when there is
    none for this model or they do not fit it."""
    adopt_finished()  # a dictionary training of this session that has ended joins the sets first
    sets = dictionary_sets(ctx.path)
    if not sets:
        st.info(f"No sparse dictionary for {plain(ctx.app.model_name)} yet. The shipped model tinystories-6l has one per "
                "layer; for this model, train some (or upload SAELens folders) below.", icon=":material/dictionary:")
        return None
    label = st.selectbox("Dictionaries", list(sets), key="feature_set") if len(sets) > 1 else next(iter(sets))
    folders = sets[label]
    try:
        dicts = [dictionary(f) for f in folders]
        feats = get_text_features(ctx.path, tuple(int(i) for i in ctx.trace.ids), folders)
    except (CheckpointError, KeyError, ValueError) as exc:
        st.error(f"These dictionaries cannot be used with this model: {plain(str(exc))}.")
        st.stop()
    return Loaded(folders, dicts, feats)


def quality(ctx: PageContext, loaded: Loaded) -> None:
    """What the dictionaries are, and how well they rebuild the text's activations."""
    cfg, dicts, feats = ctx.cfg, loaded.dicts, loaded.feats
    hooks = feats.hooks
    kind = {"topk": "TopK", "jumprelu": "JumpReLU", "standard": "ReLU"}
    first = dicts[0]
    st.markdown(f"**{len(dicts)} dictionar{'y' if len(dicts) == 1 else 'ies'}** "
                f"({'transcoders' if first.kind == 'transcoder' else 'sparse autoencoders'}, {kind.get(first.architecture, '')}"
                f"{f', k = {first.k}' if first.architecture == 'topk' else ''}), each with {first.d_sae:,} features for a "
                f"d_model of {cfg.d_model}: f = {'TopK' if first.architecture == 'topk' else 'ReLU'}((x − b_dec) W_enc + b_enc), "
                "x ≈ f W_dec + b_dec. On your text:")
    table = pd.DataFrame({"hook": hooks, "features": [d.d_sae for d in dicts],
                            "variance unexplained (FVU)": np.round(feats.fvu, 3),
                            "active features per token (L0)": np.round(feats.l0, 1)})
    show_table(table.set_index("hook"), ctx.app)
    st.caption("FVU: the share of the activation's variance over this text that the dictionary's reconstruction misses "
               "(0 = perfect). The folder's card gives it on held-out stories.")


def open_cell(ids: np.ndarray, n: int) -> None:
    """on_select of the strongest-feature map: the clicked cell's dictionary, feature and position."""
    points = selected_points("feature_map")
    if points and points[0].get("curve_number") == 1:
        row, pos = divmod(points[0]["point_index"], n)
        set_shared("flayer", row)
        set_shared("feature", int(ids[row, pos]))
        set_position(pos)


def strongest(ctx: PageContext, loaded: Loaded) -> None:
    """Each token's strongest feature under every dictionary."""
    trace, hooks = ctx.trace, loaded.feats.hooks
    ids, values = loaded.feats.strongest()
    st.subheader("Each token's strongest feature")
    fig = strongest_map(ids, values, hooks, trace.labels, "Strongest feature of each token under each dictionary",
                        max_text_cols=int(18 / ctx.display.scale))
    show_figure(fig, ctx.app, "features_strongest", select_key="feature_map",
                on_select=lambda: open_cell(ids, trace.n_tokens),
                data=lambda: pd.DataFrame({f"{h} feature": ids[r] for r, h in enumerate(hooks)}
                                          | {f"{h} activation": values[r] for r, h in enumerate(hooks)},
                                          index=trace.labels))
    st.caption("Click a cell to open that feature's card below.")


def open_column(top: np.ndarray) -> None:
    """on_select of one dictionary's top features: the clicked column's feature."""
    points = selected_points("feature_cols")
    if points and points[0].get("curve_number") == 1:
        set_shared("feature", int(top[points[0]["point_index"]]))


def text_features(ctx: PageContext, loaded: Loaded) -> tuple[int, np.ndarray]:
    """One dictionary's strongest features on the text; returns its row and those features' ids."""
    trace, hooks = ctx.trace, loaded.feats.hooks
    row = pick_index(st, "Dictionary", "flayer", len(hooks), len(hooks) // 2, lambda i: hooks[i])
    acts = loaded.feats.acts[row]
    top = top_text_features(acts, 16)
    show_figure(text_features_heatmap(acts, top, trace.labels, f"{hooks[row]}: the text's {len(top)} strongest features"),
                ctx.app, f"features_{hooks[row]}", select_key="feature_cols", on_select=lambda: open_column(top),
                data=lambda: pd.DataFrame(acts[:, top], index=trace.labels, columns=[f"F{int(f)}" for f in top]))
    return row, top


def feature_card(ctx: PageContext, loaded: Loaded, row: int, top: np.ndarray) -> None:
    """The chosen feature: where it fires, its corpus contexts, the tokens it promotes, the heads writing to it."""
    trace, cfg, model, vocab, n = ctx.trace, ctx.cfg, ctx.model, ctx.vocab, ctx.trace.n_tokens
    hooks, acts = loaded.feats.hooks, loaded.feats.acts[row]
    d, folder = loaded.dicts[row], loaded.folders[row]
    default = int(top[0]) if len(top) else 0
    feature = shared_number(st.number_input, f"Feature (0–{d.d_sae - 1})", "feature", 0, d.d_sae - 1, default, int,
                            help="Its id in this dictionary; clicking a cell or a column above chooses it too.")
    name = feature_name(hooks[row], feature)
    st.subheader(f"Feature {name}")
    index = get_index(folder, cfg.d_vocab)
    mine = acts[:, feature]
    fires = int((mine > 0).sum())
    st.markdown(f"On your text it is active at **{fires}** of {n} tokens"
                + (f", most at position {int(mine.argmax())} ({plain(trace.labels[int(mine.argmax())])}, "
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
        writes = head_contributions(model, np.array(trace.ids), d, feature, pos).numpy()
        show_figure(head_writes_figure(writes, f"Heads whose output at position {pos} adds to {name}"), ctx.app,
                    f"feature_heads_{name}")
        st.caption(f"Each head's output at position {pos} ({plain(trace.labels[pos])}), z W_O, projected on the feature's "
                   "encoder column W_enc[:, f]: what it adds to the feature's pre-activation (heads after the "
                   "dictionary's hook add nothing).")
    except ValueError as exc:
        st.caption(f"Heads writing to this feature: not shown ({plain(str(exc))}).")
    show_code(ctx.app, "features", lambda: features_code(ctx.path, ctx.text, folder, feature, n, pos,
                                                         export_load_args(model)),
              "checkpoint, text and dictionary")


ctx = open_page("Features (sparse dictionaries)",
                "A sparse dictionary rewrites one layer's activation as a sum of a few features out of thousands, "
                "each a direction the model uses. Which fire on your text, and what do they mean?")
loaded = load_dictionaries(ctx)
if loaded is not None:
    quality(ctx, loaded)
    strongest(ctx, loaded)
    feature_card(ctx, loaded, *text_features(ctx, loaded))
manage_dictionaries(ctx.app)
