"""Qwen3 (Hugging Face ``model_type: qwen3``): the Llama layout with an RMSNorm on every query and key head before
rotation (``self_attn.q_norm`` / ``k_norm``, ``[head_dim]`` each; config switch ``qk_norm = "head"``), an explicit
``head_dim`` and no q/k/v biases unless ``attention_bias``."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config
from viz_model.loading.weights import check_config
from viz_model.loading.families.common import Weights
from viz_model.loading.families.llama import PRE_NORMS, config_from_hf as llama_config, convert


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of a Qwen3 ``config.json`` (not yet validated).

    Raises:
        CheckpointError: as :func:`viz_model.loading.families.llama.config_from_hf`.
    """
    return llama_config(hf, label, qk_norm="head")


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``Qwen3ForCausalLM`` (or ``Qwen3Model``) weights.

    Raises:
        CheckpointError: an invalid config or one above the memory cap; missing or mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    return cfg, convert(cfg, Weights(state, label, ("model.",)), PRE_NORMS)
