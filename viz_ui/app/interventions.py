"""Streamlit caching of the interventions page's results, keyed by model key + texts + settings (as
:mod:`viz_ui.app.state`): moving between the page's parts, or reopening a view, does not re-run the model. The costly
ones (``*_gated``) go through :func:`viz_ui.app.gate.costly`: behind a button with their estimated time when the loaded
model would take more than :data:`viz_ui.app.gate.GATE_SECONDS`."""

from __future__ import annotations

from typing import Any

import numpy as np
import streamlit as st
import torch

from viz_ui.analysis import costs
from viz_ui.app.gate import cached_result, combine, costly
from viz_ui.analysis.interventions import (N_GENERATE, AblationView, Prompt, ablation_logits, ablation_means,
                            ablation_view, attribution_view,
                            corrupted_prompt, default_corruption, fitting_corruptions, head_effects, metric_for,
                            Head, patch_lens, patching_sweep, patching_values, prompt_of)
from viz_ui.app.layout import get_shared, set_shared
from viz_ui.app.state import estimate_seconds, get_trace, resolve
from viz_model import attribution

SITES = ("resid_pre", "attn_out", "mlp_out", "head")
_EFFECT_MAP_N = "_effect_map_n"  # how many clicks the effect map had: its chart key, renewed at each click
_CORRUPT_FOR = "_corrupt_for"  # (clean text, default corrupted text) the corrupted text last followed


def effect_map_key() -> str:
    """The widget key of the ablation's per-head effect map; :func:`renew_effect_map_key` gives it a new one."""
    return f"effect_map_{st.session_state.setdefault(_EFFECT_MAP_N, 0)}"


def renew_effect_map_key() -> None:
    """After a click on the effect map: a fresh chart key, so that the chart forgets the clicked point."""
    st.session_state[_EFFECT_MAP_N] = st.session_state.get(_EFFECT_MAP_N, 0) + 1


def follow_corruption(text: str, default: str) -> None:
    """Keep the shared corrupted text (``corrupt``) on ``default``, the corruption found for the clean ``text``,
    until the user edits it: when the clean text changed, or when the search ended and the corrupted text was still
    the previous default."""
    before = st.session_state.get(_CORRUPT_FOR)
    if before != (text, default):
        if before is not None and (before[0] != text or get_shared("corrupt") == before[1]):
            set_shared("corrupt", default)
        st.session_state[_CORRUPT_FOR] = (text, default)


def get_prompt(path: str, text: str) -> Prompt:
    """The ids the app runs for ``text`` (see :func:`viz_ui.analysis.interventions.prompt_of`).

    Raises:
        ValueError: a text that cannot be run (one line, see :func:`viz_ui.app.state.get_trace`).
    """
    return prompt_of(get_trace(path, text))


def get_corrupted(path: str, clean_text: str, corrupted_text: str) -> Prompt:
    """The corrupted run of a patching pair (see :func:`viz_ui.analysis.interventions.corrupted_prompt`)."""
    return corrupted_prompt(get_prompt(path, clean_text), get_trace(path, corrupted_text))


def _means(path: str, text: str, kind: str, mean_text: str):
    if kind != "mean":
        return None
    model, _ = resolve(path)
    return ablation_means(model, get_prompt(path, mean_text or text))


def ablation_gated(path: str, text: str, heads: tuple[Head, ...], kind: str, mean_text: str, pos: int,
                   where: Any = None) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`viz_ui.analysis.interventions.ablation_logits` with ``heads`` (sorted ``(layer, head)`` pairs, part of the
    cache key as they are) switched off: the intact and ablated logits the output charts draw, two forward passes;
    ``mean_text``: the reference text of mean ablation (empty: ``text`` itself). None while its button waits."""
    model, _ = resolve(path)

    def compute(progress) -> tuple[np.ndarray, np.ndarray]:
        return ablation_logits(model, get_prompt(path, text), list(heads), kind, _means(path, text, kind, mean_text),
                               pos)

    return costly("ablation", (path, text, heads, kind, mean_text, pos),
                  estimate_seconds(path, text, 2 + (kind == "mean")), compute, "Run the model without these heads",
                  where)


def ablation_view_gated(path: str, text: str, heads: tuple[Head, ...], kind: str, mean_text: str, pos: int,
                        logits: tuple[np.ndarray, np.ndarray], where: Any = None) -> AblationView | None:
    """:func:`viz_ui.analysis.interventions.ablation_view` (the logit lens and greedy generations with and without
    ``heads``) on the ``logits`` of :func:`ablation_gated`: computed after the output charts are drawn, so that they
    appear without waiting for it. None while its button waits."""
    model, _ = resolve(path)

    def compute(progress) -> AblationView:
        return ablation_view(model, get_prompt(path, text), list(heads), kind, _means(path, text, kind, mean_text), pos,
                             logits)

    copies = costs.ablation_copies(model, N_GENERATE) - 2 + (kind == "mean")
    return costly("ablation_view", (path, text, heads, kind, mean_text, pos),
                  estimate_seconds(path, text, copies), compute,
                  "Compute the logit lens and the generations without these heads", where)


def head_effects_gated(path: str, text: str, heads: tuple[Head, ...], kind: str, mean_text: str, pos: int,
                       token_id: int, where: Any = None) -> np.ndarray | None:
    """:func:`viz_ui.analysis.interventions.head_effects`, with ``heads`` (sorted ``(layer, head)`` pairs) ablated in
    every run: ``[n_layers, n_heads]``. None while its button waits."""
    model, _ = resolve(path)

    def compute(progress) -> np.ndarray:
        return head_effects(model, get_prompt(path, text), token_id, pos, kind, _means(path, text, kind, mean_text),
                            list(heads), progress)

    copies = costs.head_effects_copies(model, len(get_prompt(path, text).ids)) + (kind == "mean")
    return costly("head_effects", (path, text, heads, kind, mean_text, pos, token_id),
                  estimate_seconds(path, text, copies), compute, "Compute the per-head effect map", where)


def corruption_gated(path: str, text: str, where: Any = None) -> str | None:
    """:func:`viz_ui.analysis.interventions.default_corruption` of ``text``, or None while its button waits."""
    model, tokenizer = resolve(path)
    prompt = get_prompt(path, text)
    n_candidates = len(fitting_corruptions(model, tokenizer, prompt, text)[0])
    return costly("corruption", (path, text), estimate_seconds(path, text, costs.corruption_copies(n_candidates)),
                  lambda progress: default_corruption(model, tokenizer, prompt, text, progress),
                  f"Find the edit that changes the output most ({n_candidates} candidates)", where)


def first_corruption(path: str, text: str) -> str:
    """The corrupted text to start with while :func:`corruption_gated` waits: the last word of ``text`` that has a
    same-length swap (no run of the model), or ``text`` itself."""
    model, tokenizer = resolve(path)
    cands, _ = fitting_corruptions(model, tokenizer, get_prompt(path, text), text)
    return cands[0] if cands else text


@st.cache_data(max_entries=32, ttl=3600, show_spinner=False)
def get_patching_values(path: str, clean_text: str, corrupted_text: str, kind: str, answer: int, wrong: int,
                        pos: int) -> tuple[float, float]:
    """The metric of the clean and the corrupted run (:func:`viz_ui.analysis.interventions.patching_values`); for a decoder
    or an encoder, read from the two texts' traces (the same runs: nothing is run again)."""
    model, _ = resolve(path)
    clean, corrupted = get_trace(path, clean_text), get_trace(path, corrupted_text)
    if not clean.is_encoder_decoder:
        metric = metric_for(kind, answer, wrong, pos)
        return tuple(float(metric(torch.tensor(np.asarray(t.arrays["hook_logits"], np.float32))[None]))
                     for t in (clean, corrupted))
    return patching_values(model, get_prompt(path, clean_text), get_corrupted(path, clean_text, corrupted_text),
                           kind, answer, wrong, pos)


def patching_estimates(path: str, text: str) -> dict[str, float]:
    """Estimated seconds of the page's four patching maps on the model at ``path`` for ``text``, per method."""
    model, _ = resolve(path)
    n = get_trace(path, text).n_tokens
    return {method: estimate_seconds(path, text, sum(costs.patching_copies(model, n, site, method) for site in SITES))
            for method in ("exact", "attribution")}


ATTRIBUTION_PARAMS = 300_000_000  # from this many parameters the patching maps start as attribution patching
ATTRIBUTION_EXACT_S = 20.0  # ... or when the exact maps would take longer than this many seconds


def default_method(model, estimates: dict[str, float], methods: list[str]) -> str:
    """The patching method the page starts with: ``"attribution"`` for a model of :data:`ATTRIBUTION_PARAMS`
    parameters or more, or whose exact maps are estimated above :data:`ATTRIBUTION_EXACT_S` (when ``methods`` has
    it), else ``"exact"``."""
    big = model.n_params() >= ATTRIBUTION_PARAMS or estimates["exact"] > ATTRIBUTION_EXACT_S
    return "attribution" if big and "attribution" in methods else "exact"


def _patching_key(path, clean_text, corrupted_text, kind, answer, wrong, pos) -> tuple:
    return (path, clean_text, corrupted_text, kind, int(answer), int(wrong), int(pos))


def patching_cached(path: str, clean_text: str, corrupted_text: str, kind: str, answer: int, wrong: int, pos: int,
                    method: str) -> dict[str, np.ndarray] | None:
    """The four maps of :func:`patching_gated` if they are in the cache, else None (nothing is computed)."""
    maps = cached_result(f"patching_{method}", _patching_key(path, clean_text, corrupted_text, kind, answer, wrong, pos))
    return None if maps is None else dict(zip(SITES, maps))


def patching_gated(path: str, clean_text: str, corrupted_text: str, kind: str, answer: int, wrong: int, pos: int,
                   method: str, estimate_s: float, where: Any = None) -> dict[str, np.ndarray] | None:
    """The four patching maps (:func:`viz_ui.analysis.interventions.patching_sweep` with ``method``, not normalised) by site,
    or None while their button waits (``estimate_s``: from :func:`patching_estimates`).

    Raises:
        ValueError: prompts of different lengths, a text that cannot be run.
    """
    model, _ = resolve(path)
    clean, corrupted = get_prompt(path, clean_text), get_corrupted(path, clean_text, corrupted_text)
    n = len(clean.ids)
    parts = [(costs.patching_cells(model, n, site),
              lambda progress, site=site: patching_sweep(model, clean, corrupted, kind, answer, wrong, pos, site,
                                                         method, progress)) for site in SITES]
    run = combine(parts)
    label = ("Patch every cell (exact: one run per cell)" if method == "exact" else
             "Estimate every cell (attribution patching: one backward pass per map)")
    maps = costly(f"patching_{method}", _patching_key(path, clean_text, corrupted_text, kind, answer, wrong, pos), estimate_s,
                  run, label, where)
    return None if maps is None else dict(zip(SITES, maps))


def patch_lens_gated(path: str, clean_text: str, corrupted_text: str, site: str, layer: int, index: int,
                     where: Any = None) -> dict[str, float] | None:
    """:func:`viz_ui.analysis.interventions.patch_lens` for one cell (the clean run and one patched run), or None while its
    button waits."""
    model, _ = resolve(path)
    compute = lambda progress: patch_lens(model, get_prompt(path, clean_text),  # noqa: E731
                                          get_corrupted(path, clean_text, corrupted_text), site, layer, index)
    return costly("patch_lens", (path, clean_text, corrupted_text, site, layer, index),
                  estimate_seconds(path, clean_text, 3), compute, "See what this cell changed downstream", where)


def attribution_gated(path: str, text: str, token_id: int, pos: int, where: Any = None
                      ) -> tuple[dict[str, float], float] | None:
    """:func:`viz_ui.analysis.interventions.attribution_view`, or None while its button waits.

    Raises:
        ValueError: a model direct logit attribution does not support (one line).
    """

    model, _ = resolve(path)
    attribution.check_supported(model)  # before any button: an unsupported model is said at once
    return costly("attribution", (path, text, token_id, pos), estimate_seconds(path, text, 1.5),
                  lambda progress: attribution_view(model, get_prompt(path, text), token_id, pos),
                  "Split the logit", where)


@st.cache_data(max_entries=32, ttl=3600, show_spinner=False)
def get_corrupted_logits(path: str, clean_text: str, corrupted_text: str, pos: int) -> np.ndarray:
    """The corrupted run's logits at ``pos``, ``[d_vocab]`` (an encoder-decoder's decoder reading the clean output)."""
    model, _ = resolve(path)
    trace = get_trace(path, corrupted_text)
    if not trace.is_encoder_decoder:  # the corrupted text's own trace is that run
        return np.asarray(trace.arrays["hook_logits"][pos], np.float32)
    prompt = get_corrupted(path, clean_text, corrupted_text)
    with torch.no_grad():
        return model(prompt.tokens, **prompt.kwargs)[0, pos].float().cpu().numpy()
