"""Mixtral (Hugging Face ``model_type: mixtral``; Jiang et al., 2024): the Mistral layout with each block's MLP
replaced by a mixture of ``num_local_experts`` SwiGLU experts, ``num_experts_per_tok`` of them per token, their
router probabilities always renormalised to sum to 1 (config switches ``n_experts``, ``experts_per_token``,
``norm_topk_prob = True``; :mod:`viz_model.feed_forward`). ``router_jitter_noise`` acts only in training and is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config
from viz_model.loading.weights import check_config
from viz_model.loading.families.common import Weights, opt_int, require_int
from viz_model.loading.families.experts import add_moe_weights
from viz_model.loading.families.llama import PRE_NORMS, config_from_hf as llama_config, convert

MIXTURE_OF_EXPERTS = True  # a router and experts in (some) blocks: viz_model.feed_forward.MoE


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of a Mixtral ``config.json`` (not yet validated).

    Raises:
        CheckpointError: as :func:`viz_model.loading.families.llama.config_from_hf`; a field of the wrong type.
    """
    return llama_config(hf, label, n_experts=require_int(hf, "num_local_experts", label),
                        experts_per_token=require_int(hf, "num_experts_per_tok", label), norm_topk_prob=True,
                        attn_window=opt_int(hf, "sliding_window", None, label), mlp_bias=False)


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``MixtralForCausalLM`` (or ``MixtralModel``) weights: experts as ``block_sparse_moe.experts.{e}.w1/w3/w2``
    (the Hub's layout) or ``mlp.experts.gate_up_proj/down_proj`` (transformers 5's).

    Raises:
        CheckpointError: an invalid config or one above the memory cap; missing or mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    w = Weights(state, label, ("model.",))
    out = convert(cfg, w, PRE_NORMS)
    if w.has("layers.0.block_sparse_moe.gate.weight"):
        return cfg, add_moe_weights(cfg, w, out, "layers.{}.block_sparse_moe.", ("w1", "w3", "w2"))
    return cfg, add_moe_weights(cfg, w, out, "layers.{}.mlp.")
