"""Phi-3 (Hugging Face ``model_type: phi3``; Abdin et al., 2024): the Llama layout with fused projections,
``qkv_proj`` (``[q | k | v]`` rows: ``n_heads``, then ``n_kv_heads`` and ``n_kv_heads`` heads of ``head_dim``) and
``gate_up_proj`` (``[gate | up]``), split here into the separate matrices the views show. A ``sliding_window`` in
the config applies to every layer, as transformers' eager attention does; ``partial_rotary_factor`` turns only part of
each head. LongRoPE (``rope_scaling`` / ``rope_parameters`` of type ``longrope``, older ``su``; the 128k models): a
divisor of each pair's frequency, ``short_factor`` for texts of at most ``original_max_position_embeddings`` tokens and
``long_factor`` beyond, chosen per forward pass by the whole sequence's length, and cos and sin multiplied by an
attention factor (:func:`viz_model.loading.families.rope.longrope_fields`, :func:`viz_model.rotary.scaled_freqs`). Generation
with the KV cache recomputes the sequence once when it crosses into the long factors, as transformers' Phi-3 does
(:func:`viz_model.rotary.cache_needs_recompute`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config
from viz_model.loading.weights import check_config
from viz_model.loading.families.common import Weights, opt_int
from viz_model.loading.families.llama import PRE_NORMS, config_from_hf as llama_config, convert


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of a Phi-3 ``config.json`` (not yet validated).

    Raises:
        CheckpointError: as :func:`viz_model.loading.families.llama.config_from_hf`; LongRoPE without its factor lists
            (their length and values are checked by :meth:`Config.validate`, in :func:`from_hf`).
    """
    return llama_config(hf, label, attn_window=opt_int(hf, "sliding_window", None, label))


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``Phi3ForCausalLM`` (or ``Phi3Model``) weights.

    Raises:
        CheckpointError: an invalid config or one above the memory cap; missing or mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    d, h, g, k, m = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.d_mlp
    w = Weights(state, label, ("model.",))
    split = dict(w.state)
    for i in range(cfg.n_layers):
        a, f = f"layers.{i}.self_attn.", f"layers.{i}.mlp."
        q, kk, v = w.get(a + "qkv_proj.weight", ((h + 2 * g) * k, d)).split([h * k, g * k, g * k])
        split.update({a + "q_proj.weight": q, a + "k_proj.weight": kk, a + "v_proj.weight": v})
        gate, up = w.get(f + "gate_up_proj.weight", (2 * m, d)).split([m, m])
        split.update({f + "gate_proj.weight": gate, f + "up_proj.weight": up})
    return cfg, convert(cfg, Weights(split, label), PRE_NORMS)
