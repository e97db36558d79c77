"""Mixture-of-experts weights of Hugging Face checkpoints (Mixtral, Qwen2-MoE, OLMoE) in this project's names
(:class:`viz_model.feed_forward.MoE`): the router and every expert of every layer, and Qwen2-MoE's shared expert.

Two layouts are read: the one on the Hub and written by ``save_pretrained`` (one ``nn.Linear`` per expert:
``experts.{e}.gate_proj/up_proj/down_proj``, Mixtral's ``w1/w3/w2``), and transformers 5's in-memory one (all
experts in two 3-D tensors: ``experts.gate_up_proj [n_experts, 2 d_mlp, d_model]``, ``experts.down_proj
[n_experts, d_model, d_mlp]``).
"""

from __future__ import annotations

import torch

from viz_model.config import Config
from viz_model.loading.families.common import Weights

PROJ = ("gate_proj", "up_proj", "down_proj")  # SwiGLU's gate, linear branch and output, as transformers names them


def moe_weights(cfg: Config, w: Weights, prefix: str, proj: tuple[str, str, str] = PROJ,
                shared: bool = False) -> dict[str, torch.Tensor]:
    """The weights of one layer's mixture of experts, keyed as under ``blocks.{i}.mlp.``: ``W_router
    [d_model, n_experts]``, ``experts.{e}.W_gate / W_in [d_model, d_mlp]``, ``experts.{e}.W_out [d_mlp, d_model]``
    and, with ``shared``, ``shared_expert.*`` and ``W_shared_gate [d_model, 1]``.

    Args:
        prefix: the checkpoint's module holding ``gate`` (the router) and ``experts``, e.g. ``"layers.3.mlp."``.
        proj: the names of the gate, linear and output projections of each expert (Mixtral: w1, w3, w2).

    Raises:
        CheckpointError: a missing or mis-shaped weight, named.
    """
    d, m, n = cfg.d_model, cfg.d_mlp, cfg.n_experts
    out = {"W_router": w.get(prefix + "gate.weight", (n, d)).T}
    gate, up, down = proj
    fused = w.has(prefix + "experts.gate_up_proj")
    if fused:
        gate_up = w.get(prefix + "experts.gate_up_proj", (n, 2 * m, d))
        down_all = w.get(prefix + "experts.down_proj", (n, d, m))
    for e in range(n):
        q = f"experts.{e}."
        if fused:
            out[q + "W_gate"], out[q + "W_in"] = gate_up[e, :m].T, gate_up[e, m:].T
            out[q + "W_out"] = down_all[e].T
        else:
            p = f"{prefix}experts.{e}."
            out[q + "W_gate"] = w.get(p + gate + ".weight", (m, d)).T
            out[q + "W_in"] = w.get(p + up + ".weight", (m, d)).T
            out[q + "W_out"] = w.get(p + down + ".weight", (d, m)).T
    if shared:
        s, p = cfg.d_shared_mlp, prefix + "shared_expert."
        out["shared_expert.W_gate"] = w.get(p + "gate_proj.weight", (s, d)).T
        out["shared_expert.W_in"] = w.get(p + "up_proj.weight", (s, d)).T
        out["shared_expert.W_out"] = w.get(p + "down_proj.weight", (d, s)).T
        out["W_shared_gate"] = w.get(prefix + "shared_expert_gate.weight", (1, d)).T
    return out


def add_moe_weights(cfg: Config, w: Weights, out: dict[str, torch.Tensor], prefix: str,
                    proj: tuple[str, str, str] = PROJ, shared: bool = False) -> dict[str, torch.Tensor]:
    """``out`` (a converted state dict) with every layer's mixture of experts added: :func:`moe_weights` of
    ``prefix.format(i)`` under ``blocks.{i}.mlp.`` (views) for every mixture-of-experts layer (``cfg.moe_layers``;
    dense layers keep the MLP the family's converter read). Returns ``out``."""
    for i in cfg.moe_layers:
        for name, t in moe_weights(cfg, w, prefix.format(i), proj, shared).items():
            out[f"blocks.{i}.mlp.{name}"] = t  # a view: build_model lays it out
    return out
