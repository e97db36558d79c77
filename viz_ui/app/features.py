"""Streamlit glue for sparse dictionaries (the Features and Steering pages): which dictionaries this session may use
for the loaded model, the dictionaries and their top-context indexes loaded once per server, and each text's feature
activations cached per (model, text, dictionaries).

A *dictionary set* is one or more dictionary folders in SAELens's layout (``viz_model.features.saelens``), usually one per
layer, that read the same model: the shipped set of a shipped model (``assets/dictionaries/<model file stem>/``), and
sets trained or uploaded in this session (kept in this session's state only, like uploaded models).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import streamlit as st
import torch

from viz_model.features.dictionary import TRANSCODER_IN, SparseDictionary
from viz_model.features.index import FeatureIndex, load_index
from viz_model.features.saelens import load_dictionary, shipped_dictionaries

from viz_ui.app.state import resolve

SESSION_SETS = "_feature_sets"  # session_state key: {model_path: {label: (folder, ...)}}


def _model_stem(model_path: str) -> str | None:
    """The file stem of a shipped model's path (whose dictionaries live under ``assets/dictionaries/<stem>/``)."""
    path = Path(model_path)
    return path.stem if path.suffix == ".safetensors" and path.parent.name == "models" else None


def dictionary_sets(model_path: str) -> dict[str, tuple[str, ...]]:
    """Every dictionary set this session may use with the model at ``model_path``: ``{label: (folder, ...)}``, the
    shipped sets first (its sparse autoencoders, then its transcoders, each ordered by layer), then this session's
    trained or uploaded sets, newest last."""
    sets: dict[str, tuple[str, ...]] = {}
    stem = _model_stem(model_path)
    if stem:
        shipped = shipped_dictionaries(stem)
        saes = [str(p) for name, p in shipped.items() if not TRANSCODER_IN.match(name)]
        transcoders = [str(p) for name, p in shipped.items() if TRANSCODER_IN.match(name)]
        if saes:
            sets[f"shipped: {len(saes)} sparse autoencoders for {stem}"] = tuple(saes)
        if transcoders:
            sets[f"shipped: {len(transcoders)} transcoders for {stem}"] = tuple(transcoders)
    sets.update(st.session_state.get(SESSION_SETS, {}).get(model_path, {}))
    return sets


def add_session_set(model_path: str, label: str, folders: list[str] | tuple[str, ...]) -> None:
    """Make a dictionary set trained or uploaded in this session available for the model at ``model_path``."""
    st.session_state.setdefault(SESSION_SETS, {}).setdefault(model_path, {})[label] = tuple(str(f) for f in folders)


@st.cache_resource(max_entries=64, show_spinner=False)
def get_dictionary(folder: str, mtime: float = 0.0) -> SparseDictionary:
    """The dictionary in ``folder`` (float32, eval mode), loaded once per server; ``mtime`` (the weights file's
    modification time) keys a folder rewritten in place.

    Raises:
        CheckpointError (``DictionaryError``): the folder's files cannot be used, in one line.
    """
    return load_dictionary(folder).eval()


def dictionary(folder: str) -> SparseDictionary:
    """:func:`get_dictionary` keyed by the folder's weights file's modification time."""
    weights = Path(folder) / "sae_weights.safetensors"
    return get_dictionary(str(folder), weights.stat().st_mtime if weights.exists() else 0.0)


@st.cache_resource(max_entries=64, show_spinner=False)
def get_index(folder: str, d_vocab: int | None = None) -> FeatureIndex | None:
    """The top-context index of the dictionary in ``folder`` (``viz_model.features.index``), or None when it has
    none or it cannot be used: :func:`viz_model.features.index.load_index` checks it against its dictionary's
    ``d_sae``, its corpus and the vocabulary of ``d_vocab`` tokens (the model's), so that every feature of the
    dictionary has its entry and every token of a context its label (an upload with a bad index is refused whole)."""
    try:
        return load_index(folder, d_vocab)
    except (FileNotFoundError, ValueError, OSError):
        return None


@dataclass
class TextFeatures:
    """Every dictionary's features for one text. Per dictionary (in the set's order): ``acts`` ``[pos, d_sae]``
    float32 (>= 0), ``fvu`` (fraction of variance of its target it leaves unexplained on this text, NaN for one
    token), ``l0`` (mean active features per position)."""

    hooks: list[str]
    acts: list[np.ndarray]
    fvu: list[float]
    l0: list[float]

    def strongest(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, values)`` ``[n_dictionaries, pos]``: each position's strongest feature under each dictionary."""
        ids = np.stack([a.argmax(-1) for a in self.acts])
        return ids, np.stack([a.max(-1) for a in self.acts])


@st.cache_data(max_entries=8, show_spinner=False)
def get_text_features(model_path: str, ids: tuple[int, ...], folders: tuple[str, ...]) -> TextFeatures:
    """The features of the token ids ``ids`` under each dictionary of ``folders``: one forward pass of the model
    recording every hook the dictionaries read and predict, then each dictionary's ``encode`` and ``decode``
    (``viz_model.features.feature_acts`` and ``reconstruction``, batched over the set).

    Raises:
        ValueError: a dictionary reads a hook the model lacks, or widths that are not the model's.
    """
    model, _ = resolve(model_path)
    dicts = [dictionary(f) for f in folders]
    names = sorted({d.hook_name for d in dicts} | {d.out_hook for d in dicts})
    missing = [n for n in names if n not in model.hook_dict]
    if missing:
        raise ValueError(f"the model has no hook named {missing[0]}")
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([ids]), names_filter=names)
        acts, fvus, l0s = [], [], []
        for d in dicts:
            x, y = cache[d.hook_name][0].float().cpu(), cache[d.out_hook][0].float().cpu()
            if x.shape[-1] != d.d_in or y.shape[-1] != d.d_out:
                raise ValueError(f"the dictionary on {d.hook_name} reads width {d.d_in} and writes {d.d_out}; "
                                 f"the model's hooks have {x.shape[-1]} and {y.shape[-1]}")
            f = d.encode(x).float()
            recon = d.decode(f).float()
            den = (y - y.mean(0)).pow(2).sum()
            fvus.append(float((y - recon).pow(2).sum() / den) if len(ids) > 1 and den > 0 else float("nan"))
            l0s.append(float((f > 0).sum(-1).float().mean()))
            acts.append(f.numpy())
    return TextFeatures([d.hook_name for d in dicts], acts, fvus, l0s)
