"""Features: a sparse dictionary (SAE or transcoder) rewrites a layer's activation as a few readable features."""

from typing import NamedTuple

import streamlit as st

from viz_ui.app.preload import preload_plotly

preload_plotly()  # before the imports below load torch: the browser fetches Plotly's code meanwhile

import numpy as np
import pandas as pd

from viz_model import CheckpointError
from viz_ui.app.dictionary_jobs import adopt_finished, manage_dictionaries
from viz_ui.app.feature_card import show_feature_card
from viz_ui.app.features import TextFeatures, dictionary, dictionary_sets, get_text_features
from viz_ui.views.features import feature_name, strongest_map, text_features_heatmap, top_text_features
from viz_ui.app.layout import (pick_index, selected_points, set_position, set_shared, shared_number, show_figure,
                               show_table)
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
    hooks, acts = loaded.feats.hooks, loaded.feats.acts[row]
    d, folder = loaded.dicts[row], loaded.folders[row]
    default = int(top[0]) if len(top) else 0
    feature = shared_number(st.number_input, f"Feature (0–{d.d_sae - 1})", "feature", 0, d.d_sae - 1, default, int,
                            help="Its id in this dictionary; clicking a cell or a column above chooses it too.")
    st.subheader(f"Feature {feature_name(hooks[row], feature)}")
    show_feature_card(ctx, d, folder, feature, acts[:, feature])


ctx = open_page("Features (sparse dictionaries)",
                "A sparse dictionary rewrites one layer's activation as a sum of a few features out of thousands, "
                "each a direction the model uses. Which fire on your text, and what do they mean?")
loaded = load_dictionaries(ctx)
if loaded is not None:
    quality(ctx, loaded)
    strongest(ctx, loaded)
    feature_card(ctx, loaded, *text_features(ctx, loaded))
manage_dictionaries(ctx.app)
