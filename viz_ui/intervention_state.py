"""Streamlit caching of the interventions page's results, keyed by model key + texts + settings (as
:mod:`viz_ui.state`): moving between the page's parts, or reopening a view, does not re-run the model."""

from __future__ import annotations

import numpy as np
import streamlit as st

from .interventions import (AblationView, Prompt, ablation_means, ablation_view, attribution_view, corrupted_prompt,
                            default_corruption, head_effects, parse_heads, patch_lens, patching_sweep, patching_values,
                            prompt_of)
from .state import get_trace, resolve


def get_prompt(path: str, text: str) -> Prompt:
    """The ids the app runs for ``text`` (see :func:`viz_ui.interventions.prompt_of`).

    Raises:
        ValueError: a text that cannot be run (one line, see :func:`viz_ui.state.get_trace`).
    """
    return prompt_of(get_trace(path, text))


def get_corrupted(path: str, clean_text: str, corrupted_text: str) -> Prompt:
    """The corrupted run of a patching pair (see :func:`viz_ui.interventions.corrupted_prompt`)."""
    return corrupted_prompt(get_prompt(path, clean_text), get_trace(path, corrupted_text))


def _means(path: str, text: str, kind: str, mean_text: str):
    if kind != "mean":
        return None
    model, _ = resolve(path)
    return ablation_means(model, get_prompt(path, mean_text or text))


@st.cache_data(max_entries=32, ttl=3600, show_spinner="Running the model with the heads switched off…")
def get_ablation(path: str, text: str, heads: str, kind: str, mean_text: str, pos: int) -> AblationView:
    """:func:`viz_ui.interventions.ablation_view` for the heads written as ``"L0H1,L2H3"``; ``mean_text``: the
    reference text of mean ablation (empty: ``text`` itself)."""
    model, _ = resolve(path)
    hs = parse_heads(heads, model.cfg.n_layers, model.cfg.n_heads)
    return ablation_view(model, get_prompt(path, text), hs, kind, _means(path, text, kind, mean_text), pos)


@st.cache_data(max_entries=32, ttl=3600, show_spinner="Ablating every head in turn (batched)…")
def get_head_effects(path: str, text: str, heads: str, kind: str, mean_text: str, pos: int,
                     token_id: int) -> np.ndarray:
    """:func:`viz_ui.interventions.head_effects`, with ``heads`` ablated in every run: ``[n_layers, n_heads]``."""
    model, _ = resolve(path)
    hs = parse_heads(heads, model.cfg.n_layers, model.cfg.n_heads)
    return head_effects(model, get_prompt(path, text), token_id, pos, kind, _means(path, text, kind, mean_text), hs)


@st.cache_data(max_entries=16, ttl=3600, show_spinner="Looking for a one-word edit that changes the output…")
def get_default_corruption(path: str, text: str) -> str:
    """:func:`viz_ui.interventions.default_corruption` of ``text``."""
    model, tokenizer = resolve(path)
    return default_corruption(model, tokenizer, get_prompt(path, text), text)


@st.cache_data(max_entries=32, ttl=3600, show_spinner=False)
def get_patching_values(path: str, clean_text: str, corrupted_text: str, kind: str, answer: int, wrong: int,
                        pos: int) -> tuple[float, float]:
    """The metric of the clean and the corrupted run (:func:`viz_ui.interventions.patching_values`)."""
    model, _ = resolve(path)
    return patching_values(model, get_prompt(path, clean_text), get_corrupted(path, clean_text, corrupted_text),
                           kind, answer, wrong, pos)


@st.cache_data(max_entries=64, ttl=3600, show_spinner="Patching every cell of this map (batched)…")
def get_patching_sweep(path: str, clean_text: str, corrupted_text: str, kind: str, answer: int, wrong: int, pos: int,
                       site: str) -> np.ndarray:
    """One patching sweep (:func:`viz_ui.interventions.patching_sweep`), not normalised: each map of the page is
    computed, and drawn, in turn.

    Raises:
        ValueError: prompts of different lengths, a text that cannot be run.
    """
    model, _ = resolve(path)
    return patching_sweep(model, get_prompt(path, clean_text), get_corrupted(path, clean_text, corrupted_text), kind,
                          answer, wrong, pos, site)


@st.cache_data(max_entries=32, ttl=3600, show_spinner="Patching one cell…")
def get_patch_lens(path: str, clean_text: str, corrupted_text: str, site: str, layer: int,
                   index: int) -> dict[str, float]:
    """:func:`viz_ui.interventions.patch_lens` for one cell."""
    model, _ = resolve(path)
    return patch_lens(model, get_prompt(path, clean_text), get_corrupted(path, clean_text, corrupted_text), site,
                      layer, index)


@st.cache_data(max_entries=32, ttl=3600, show_spinner="Splitting the logit…")
def get_attribution(path: str, text: str, token_id: int, pos: int) -> tuple[dict[str, float], float]:
    """:func:`viz_ui.interventions.attribution_view`.

    Raises:
        ValueError: a model direct logit attribution does not support (one line).
    """
    model, _ = resolve(path)
    return attribution_view(model, get_prompt(path, text), token_id, pos)


@st.cache_data(max_entries=32, ttl=3600, show_spinner=False)
def get_corrupted_logits(path: str, clean_text: str, corrupted_text: str, pos: int) -> np.ndarray:
    """The corrupted run's logits at ``pos``, ``[d_vocab]`` (an encoder-decoder's decoder reading the clean output)."""
    import torch

    model, _ = resolve(path)
    prompt = get_corrupted(path, clean_text, corrupted_text)
    with torch.no_grad():
        return model(prompt.tokens, **prompt.kwargs)[0, pos].float().cpu().numpy()
