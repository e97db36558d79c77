"""OLMoE (Hugging Face ``model_type: olmoe``; Muennighoff et al., 2024): the Llama layout, an RMSNorm over all
query heads and over all key heads of a position before rotation (``q_norm [d_model]``, ``k_norm [n_kv_heads *
d_head]``; config switch ``qk_norm = "all"``, as OLMo2), and a mixture of ``num_experts`` SwiGLU experts,
``num_experts_per_tok`` per token, renormalised only with ``norm_topk_prob`` (:mod:`viz_model.feed_forward`); ``clip_qkv``:
q and k (after their norm) and v clamped to ``±clip_qkv`` (config switch ``clip_qkv``).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config
from viz_model.loading.weights import check_config
from viz_model.loading.families.common import Weights, opt_bool, opt_float, require_int
from viz_model.loading.families.experts import add_moe_weights
from viz_model.loading.families.llama import PRE_NORMS, config_from_hf as llama_config, convert

MIXTURE_OF_EXPERTS = True  # a router and experts in (some) blocks: viz_model.feed_forward.MoE


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of an OLMoE ``config.json`` (not yet validated).

    Raises:
        CheckpointError: as :func:`viz_model.loading.families.llama.config_from_hf`; ``clip_qkv`` not a number.
    """
    h = require_int(hf, "num_attention_heads", label)
    clip = None if hf.get("clip_qkv") is None else opt_float(hf, "clip_qkv", None, label)
    return llama_config(hf, label, n_experts=require_int(hf, "num_experts", label),
                        experts_per_token=require_int(hf, "num_experts_per_tok", label),
                        norm_topk_prob=opt_bool(hf, "norm_topk_prob", False, label), qk_norm="all",
                        d_head=require_int(hf, "hidden_size", label) // h, mlp_bias=False, clip_qkv=clip)


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``OlmoeForCausalLM`` (or ``OlmoeModel``) weights.

    Raises:
        CheckpointError: an invalid config or one above the memory cap; missing or mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    w = Weights(state, label, ("model.",))
    return cfg, add_moe_weights(cfg, w, convert(cfg, w, PRE_NORMS), "layers.{}.mlp.")
