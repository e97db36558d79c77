"""Qwen2-MoE (Hugging Face ``model_type: qwen2_moe``; Qwen1.5-MoE): the Qwen2 layout (q/k/v biases) with each
block's MLP replaced by a mixture of ``num_experts`` SwiGLU experts of width ``moe_intermediate_size``,
``num_experts_per_tok`` per token (renormalised only with ``norm_topk_prob``), plus a shared expert of width
``shared_expert_intermediate_size`` that every token goes through, scaled by ``sigmoid(x W_shared_gate)``
(config switch ``d_shared_mlp``; :mod:`viz_model.feed_forward`). Layers may keep a dense MLP of width
``intermediate_size`` instead, as transformers' ``Qwen2MoeDecoderLayer`` builds them: layer ``i`` is dense when
``i in mlp_only_layers`` or ``(i + 1) % decoder_sparse_step != 0`` (config switches ``dense_layers``,
``d_dense_mlp``; only the other layers have a router and its hooks); with ``num_experts`` 0, or when no layer is
sparse, every layer is a dense MLP of width ``intermediate_size`` (a Qwen2 model). ``use_sliding_window`` windows
the layers ``layer_types`` marks, by default the even layers below ``max_window_layers``
(:func:`viz_model.loading.families.llama.qwen_windows`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config, _is_int, _show
from viz_model.limits import INT_RANGES
from viz_model.loading.weights import CheckpointError, check_config
from viz_model.loading.families.common import Weights, opt_bool, opt_int, require_int
from viz_model.loading.families.experts import add_moe_weights
from viz_model.loading.families.llama import PRE_NORMS, config_from_hf as llama_config, convert, qwen_windows

MIXTURE_OF_EXPERTS = True  # a router and experts in (some) blocks: viz_model.feed_forward.MoE


def dense_layers(hf: dict, label: str) -> list[int]:
    """The layers transformers 5.23's ``Qwen2MoeDecoderLayer`` gives a dense MLP: ``i in mlp_only_layers`` or
    ``(i + 1) % decoder_sparse_step != 0`` (indices in ``mlp_only_layers`` beyond the stack are ignored, as there).

    Raises:
        CheckpointError: ``decoder_sparse_step`` not a positive integer (transformers divides by it), or
            ``mlp_only_layers`` not a list of integers.
    """
    n_layers = min(require_int(hf, "num_hidden_layers", label), INT_RANGES["n_layers"][1] + 1)  # more: refused later
    step = opt_int(hf, "decoder_sparse_step", 1, label)
    only = hf.get("mlp_only_layers")
    only = [] if only is None else only
    if step < 1:
        raise CheckpointError(f"{label}: config field decoder_sparse_step must be a positive integer, got {_show(step)}")
    if not isinstance(only, list) or not all(_is_int(i) for i in only):
        raise CheckpointError(f"{label}: config field mlp_only_layers must be a list of layer indices, got {_show(only)}")
    only = set(only)
    return [i for i in range(n_layers) if i in only or (i + 1) % step]


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of a Qwen2-MoE ``config.json`` (not yet validated).

    Raises:
        CheckpointError: as :func:`viz_model.loading.families.llama.config_from_hf` and :func:`dense_layers`; malformed
            ``layer_types``.
    """
    windows = qwen_windows(hf, label, moe=True)
    n_experts = opt_int(hf, "num_experts", 60, label)
    bias = opt_bool(hf, "qkv_bias", True, label)
    dense = dense_layers(hf, label) if n_experts else []
    if not n_experts or len(dense) >= hf["num_hidden_layers"]:  # every layer a dense MLP of width intermediate_size
        return llama_config(hf, label, attn_bias=bias, mlp_bias=False, **windows)
    return llama_config(hf, label, n_experts=n_experts, experts_per_token=require_int(hf, "num_experts_per_tok", label),
                        norm_topk_prob=opt_bool(hf, "norm_topk_prob", False, label),
                        d_mlp=require_int(hf, "moe_intermediate_size", label),
                        d_shared_mlp=opt_int(hf, "shared_expert_intermediate_size", 0, label), attn_bias=bias,
                        mlp_bias=False, dense_layers=dense or None,
                        d_dense_mlp=require_int(hf, "intermediate_size", label) if dense else None, **windows)


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
