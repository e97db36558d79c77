"""OLMo 2 (Hugging Face ``model_type: olmo2``; OLMo et al., 2024): the Llama layout with the norms moved to the
sub-layers' outputs (``mid = pre + RMSNorm(attn(pre))``, ``post = mid + RMSNorm(mlp(mid))``; config switch
``norm_placement = "output"``) and an RMSNorm over all query heads and over all key heads of a position before
rotation (``q_norm [n_heads * head_dim]``, ``k_norm [n_kv_heads * head_dim]``; ``qk_norm = "all"``)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config
from viz_model.loading.weights import check_config
from viz_model.loading.families.common import Weights
from viz_model.loading.families.llama import config_from_hf as llama_config, convert

OUTPUT_NORMS = {"ln1_post": "post_attention_layernorm", "ln2_post": "post_feedforward_layernorm"}


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of an OLMo2 ``config.json`` (not yet validated).

    Raises:
        CheckpointError: as :func:`viz_model.loading.families.llama.config_from_hf`.
    """
    return llama_config(hf, label, qk_norm="all", norm_placement="output")


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``Olmo2ForCausalLM`` (or ``Olmo2Model``) weights.

    Raises:
        CheckpointError: an invalid config or one above the memory cap; missing or mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    return cfg, convert(cfg, Weights(state, label, ("model.",)), OUTPUT_NORMS)
