"""Gemma (Hugging Face ``model_type: gemma``; Gemma Team, 2024): the Llama layout with three differences.

- Token embeddings are multiplied by ``sqrt(hidden_size)`` before the first block (config ``embed_scale``).
- Every RMSNorm scales by ``1 + weight``: the file stores the offset from 1, converted here to the scale itself
  (``w = 1 + weight``), so the views show the factor each dimension is really multiplied by.
- The gated feed-forward network uses GELU (tanh approximation) in place of SiLU (``mlp = "geglu"``); transformers
  reads a legacy ``hidden_act: "gelu"`` as that approximation too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from viz_model.config import Config, _show
from viz_model.loading.weights import CheckpointError, check_config
from viz_model.loading.families.common import Weights, opt_str
from viz_model.loading.families.llama import PRE_NORMS, config_from_hf as llama_config, convert

TANH_GELU = ("gelu", "gelu_pytorch_tanh", "gelu_new")


def plus_one(weight: torch.Tensor) -> torch.Tensor:
    """Gemma's stored RMSNorm weight -> the scale it applies (``1 + weight``)."""
    return weight.float() + 1.0  # in float32 (transformers: 1.0 + weight.float()); kept float32 in the model


def gemma_fields(hf: dict, label: str, act_key: str) -> dict:
    """The :class:`Config` fields every Gemma generation shares: GeGLU, tied and scaled embeddings.

    Raises:
        CheckpointError: an activation other than GELU's tanh approximation.
    """
    act = opt_str(hf, act_key, "gelu_pytorch_tanh", label)
    if act not in TANH_GELU:
        raise CheckpointError(f"{label}: {act_key} {_show(act)} is not supported (Gemma's gate uses gelu_pytorch_tanh)")
    d = hf.get("hidden_size")
    return {"mlp": "geglu", "embed_scale": math.sqrt(d) if isinstance(d, int) and d > 0 else 1.0,
            "tied_embeddings": True}


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of a Gemma ``config.json`` (not yet validated).

    Raises:
        CheckpointError: as :func:`viz_model.loading.families.llama.config_from_hf`; an unsupported activation.
    """
    return llama_config(hf, label, **gemma_fields(hf, label, "hidden_act"))


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``GemmaForCausalLM`` (or ``GemmaModel``) weights.

    Raises:
        CheckpointError: an invalid config or one above the memory cap; missing or mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    return cfg, convert(cfg, Weights(state, label, ("model.",)), PRE_NORMS, plus_one)
