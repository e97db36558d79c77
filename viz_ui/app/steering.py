"""The Steering & feature ablation page's results, cached per inputs (Streamlit glue): the direction to steer with
(a feature's decoder row, or the contrastive direction of two texts), the steered run (output at one position and
the greedy continuations, :mod:`viz_model.interventions.steering`) and the feature-ablated run. The runs go through
:func:`viz_ui.app.gate.costly`: behind a button with their estimated time when the loaded model would take more than
:data:`viz_ui.app.gate.GATE_SECONDS`, computed at once otherwise."""

from __future__ import annotations

from collections.abc import Callable

from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st
import torch

from viz_model.interventions.steering import ablate_features, contrastive_direction, steer, steered_continuations

from viz_ui.analysis.costs import GENERATE_STEP
from viz_ui.app.features import dictionary, get_index, get_text_features
from viz_ui.app.gate import costly
from viz_ui.app.interventions import get_prompt
from viz_ui.app.state import estimate_seconds, resolve

N_NEW = 20  # greedy tokens of each continuation


@dataclass(frozen=True)
class Direction:
    """What is added at ``hook``: ``vector`` ``[d]`` float32 (or a function computing it, called only inside the
    gated run: a contrastive direction costs two forward passes), and the unit ``alpha`` is counted in: ``unit``
    (the slider's 1 adds ``unit * vector``) with its name ``unit_words``."""

    hook: str
    vector: np.ndarray | Callable[[], np.ndarray]
    unit: float
    unit_words: str

    def array(self) -> np.ndarray:
        """The vector, computed now when it was given as a function."""
        return self.vector() if callable(self.vector) else self.vector


def feature_direction(model_path: str, ids: tuple[int, ...], folders: tuple[str, ...], index: int,
                      feature: int) -> Direction:
    """Feature ``feature`` of the ``index``-th dictionary of ``folders``: its decoder row ``W_dec[feature]`` at the
    hook the dictionary writes (``out_hook``). The unit is the feature's largest activation on the index's corpus
    (``act_max``), or on this text when the dictionary has no index, or 1 when it never fires on either: the slider
    then reads "alpha times the strongest the feature ever gets"."""
    d = dictionary(folders[index])
    vector = d.W_dec[feature].detach().float().cpu().numpy().copy()
    found = get_index(folders[index], resolve(model_path)[0].cfg.d_vocab)
    if found is not None and float(found.index["act_max"][feature]) > 0:
        return Direction(d.out_hook, vector, float(found.index["act_max"][feature]),
                         "its largest activation on the index's corpus")
    peak = float(get_text_features(model_path, ids, folders).acts[index][:, feature].max())
    if peak > 0:
        return Direction(d.out_hook, vector, peak, "its largest activation on this text (the dictionary has no index)")
    return Direction(d.out_hook, vector, 1.0, "an activation of 1 (it is not active on this text and has no index)")


@st.cache_data(max_entries=16, show_spinner=False)
def get_contrastive(model_path: str, text_a: str, text_b: str, hook: str) -> np.ndarray:
    """:func:`viz_model.interventions.steering.contrastive_direction` of the two texts (as the app tokenizes them)
    at ``hook``: ``[d_model]`` float32.

    Raises:
        ValueError: a text that cannot be run (one line).
    """
    model, _ = resolve(model_path)
    a, b = get_prompt(model_path, text_a), get_prompt(model_path, text_b)
    return contrastive_direction(model, a.tokens, b.tokens, hook).cpu().numpy()


@dataclass(frozen=True)
class SteerResult:
    """``intact`` and ``steered`` logits ``[d_vocab]`` (float32) at ``pos``; the greedy continuations' new ids
    (empty for an encoder)."""

    pos: int
    intact: np.ndarray
    steered: np.ndarray
    gen_intact: list[int]
    gen_steered: list[int]


def steer_gated(model_path: str, text: str, direction: Direction, key: tuple, alpha: float, last_only: bool,
                pos: int, where: Any = None) -> SteerResult | None:
    """The steered run for ``alpha`` (in the direction's unit) added at every position (``last_only`` False: the
    generated ones too) or at the text's last position only; ``key`` names the direction (what it was built from).
    None while its button waits."""
    model, _ = resolve(model_path)
    ids = get_prompt(model_path, text).ids
    causal = model.cfg.causal

    def compute(progress) -> SteerResult:
        vector = torch.from_numpy(direction.array())
        amount = alpha * direction.unit
        positions = [len(ids) - 1] if last_only else None
        tokens = torch.tensor([ids])
        with torch.no_grad():
            intact = model(tokens)[0, pos].float().cpu().numpy()
        steered = steer(model, tokens, direction.hook, vector, amount, positions)[0, pos].float().cpu().numpy()
        gen = steered_continuations(model, ids, direction.hook, vector, amount, N_NEW, positions) if causal else ([], [])
        return SteerResult(pos, intact, steered, list(gen[0]), list(gen[1]))

    copies = 2 + (2 * N_NEW * GENERATE_STEP if causal else 0) + (2 if callable(direction.vector) else 0)
    return costly("steering", (model_path, text, key, direction.hook, alpha, last_only, pos),
                  estimate_seconds(model_path, text, copies), compute, "Run the steered model", where)


@dataclass(frozen=True)
class AblateResult:
    """Feature ablation: ``intact`` and ``ablated`` logits ``[d_vocab]`` at ``pos``; ``kl`` ``[pos]``:
    KL(intact ‖ ablated) in nats at every position."""

    pos: int
    intact: np.ndarray
    ablated: np.ndarray
    kl: np.ndarray


def ablate_gated(model_path: str, text: str, folder: str, features: tuple[int, ...], pos: int,
                 where: Any = None) -> AblateResult | None:
    """The run with ``features`` of the dictionary in ``folder`` switched off at every position
    (:func:`viz_model.interventions.steering.ablate_features`), against the intact run. None while its button waits."""
    model, _ = resolve(model_path)
    ids = get_prompt(model_path, text).ids

    def compute(progress) -> AblateResult:
        tokens = torch.tensor([ids])
        with torch.no_grad():
            intact = model(tokens)[0].float().cpu()
        ablated = ablate_features(model, tokens, dictionary(folder), list(features))[0].float().cpu()
        logp, logq = torch.log_softmax(intact.double(), -1), torch.log_softmax(ablated.double(), -1)
        kl = (logp.exp() * (logp - logq)).sum(-1).clamp_min(0).numpy()
        return AblateResult(pos, intact[pos].numpy(), ablated[pos].numpy(), kl)

    return costly("feature_ablation", (model_path, text, folder, features, pos),
                  estimate_seconds(model_path, text, 2), compute, "Run the model without these features", where)
