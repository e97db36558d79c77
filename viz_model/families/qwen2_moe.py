"""Qwen2-MoE (Hugging Face ``model_type: qwen2_moe``; Qwen1.5-MoE): the Qwen2 layout (q/k/v biases) with each
block's MLP replaced by a mixture of ``num_experts`` SwiGLU experts of width ``moe_intermediate_size``,
``num_experts_per_tok`` per token (renormalised only with ``norm_topk_prob``), plus a shared expert of width
``shared_expert_intermediate_size`` that every token goes through, scaled by ``sigmoid(x W_shared_gate)``
(config switch ``d_shared_mlp``; :mod:`viz_model.moe`). Checkpoints whose layers are not all sparse
(``decoder_sparse_step`` above 1 or ``mlp_only_layers``) are refused; with ``num_experts`` 0 every layer is a dense
MLP of width ``intermediate_size`` (a Qwen2 model). ``use_sliding_window`` windows the layers ``layer_types`` marks,
by default the even layers below ``max_window_layers`` (:func:`viz_model.families.llama.qwen_windows`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..config import Config, _show
from ..weights import CheckpointError, check_config
from .common import Weights, opt_bool, opt_int, require_int
from .experts import add_moe_weights
from .llama import PRE_NORMS, config_from_hf as llama_config, convert, qwen_windows


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of a Qwen2-MoE ``config.json`` (not yet validated).

    Raises:
        CheckpointError: as :func:`viz_model.families.llama.config_from_hf`; dense layers among sparse ones
            (``decoder_sparse_step`` > 1, ``mlp_only_layers``); malformed ``layer_types``.
    """
    windows = qwen_windows(hf, label, moe=True)
    n_experts = opt_int(hf, "num_experts", 60, label)
    step, dense = opt_int(hf, "decoder_sparse_step", 1, label), hf.get("mlp_only_layers") or []
    if n_experts and (step != 1 or dense):
        why = f"decoder_sparse_step {_show(step)}" if step != 1 else f"mlp_only_layers {_show(dense)}"
        raise CheckpointError(f"{label}: Qwen2-MoE with dense layers among the sparse ones ({why}) is not supported")
    bias = opt_bool(hf, "qkv_bias", True, label)
    if not n_experts:  # every layer a dense MLP of width intermediate_size
        return llama_config(hf, label, attn_bias=bias, mlp_bias=False, **windows)
    return llama_config(hf, label, n_experts=n_experts, experts_per_token=require_int(hf, "num_experts_per_tok", label),
                        norm_topk_prob=opt_bool(hf, "norm_topk_prob", False, label),
                        d_mlp=require_int(hf, "moe_intermediate_size", label),
                        d_shared_mlp=opt_int(hf, "shared_expert_intermediate_size", 0, label), attn_bias=bias,
                        mlp_bias=False, **windows)


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``Qwen2MoeForCausalLM`` (or ``Qwen2MoeModel``) weights.

    Raises:
        CheckpointError: as :func:`config_from_hf`; an invalid config or one above the memory cap; missing or
            mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    w = Weights(state, label, ("model.",))
    out = convert(cfg, w, PRE_NORMS)
    if not cfg.n_experts:
        return cfg, out
    return cfg, add_moe_weights(cfg, w, out, "layers.{}.mlp.", shared=bool(cfg.d_shared_mlp))
