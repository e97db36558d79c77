"""Gemma 2 and Gemma 3 text models (Hugging Face ``model_type: gemma2``, ``gemma3_text``): Gemma
(:mod:`viz_model.loading.families.gemma`: scaled embeddings, ``1 + weight`` RMSNorms, GeGLU) plus

- sandwich norms: each sub-layer's input and output are normed (``norm_placement = "sandwich"``; ``ln1``,
  ``ln1_post``, ``ln2``, ``ln2_post`` = input, post-attention, pre- and post-feed-forward layernorms);
- scores divided by ``sqrt(query_pre_attn_scalar)`` instead of ``sqrt(head_dim)`` (``attn_scale``);
- attention scores and final logits soft-capped, ``c tanh(x / c)`` (``attn_softcap``, ``logit_softcap``; Gemma 2);
- sliding-window attention in the layers ``layer_types`` marks ``sliding_attention`` (every other layer in Gemma 2,
  five of six in Gemma 3; ``attn_window`` with ``window_layers``);
- Gemma 3: q/k norm per head (``qk_norm = "head"``) and a rotary base of its own, unscaled, in the windowed
  layers (``rotary_base_local``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from viz_model.config import Config
from viz_model.loading.weights import CheckpointError, check_config
from viz_model.loading.families.common import Weights, opt_bool, opt_dict, opt_float, opt_int, require_int, sliding_layers
from viz_model.loading.families.gemma import gemma_fields, plus_one
from viz_model.loading.families.llama import config_from_hf as llama_config, convert
from viz_model.loading.families.rope import rope_fields

SANDWICH = {"ln1": "input_layernorm", "ln1_post": "post_attention_layernorm", "ln2": "pre_feedforward_layernorm",
            "ln2_post": "post_feedforward_layernorm"}


def _window_layers(hf: dict, label: str, n_layers: int, gemma3: bool) -> list[int]:
    """Indices of the sliding-window layers: ``layer_types`` when the file has it, else transformers' default
    (Gemma 2: layers 0, 2, 4, ...; Gemma 3: all but every ``sliding_window_pattern``-th)."""
    layers = sliding_layers(hf, n_layers, label)
    if layers is None:
        every = opt_int(hf, "sliding_window_pattern", 6, label) if gemma3 else 2
        return [i for i in range(n_layers) if (i + 1) % max(1, every)]
    return layers


def _gemma3_rope(hf: dict, label: str, head_dim: int) -> dict:
    """Gemma 3's rotary settings: ``rope_parameters`` nested by layer type (transformers 5) or the older
    ``rope_theta`` / ``rope_scaling`` (global layers) and ``rope_local_base_freq``."""
    params = opt_dict(hf, "rope_parameters", label)
    full, local = opt_dict(params, "full_attention", label), opt_dict(params, "sliding_attention", label)
    flat = {k: v for k, v in hf.items() if k != "rope_parameters"}
    fields = rope_fields({**flat, "rope_parameters": full} if full else flat, label, head_dim, 1_000_000.0)
    if (local.get("rope_type") or "default") != "default":
        raise CheckpointError(f"{label}: Gemma 3 sliding layers with rotary scaling are not supported")
    fields["rotary_base_local"] = opt_float(local, "rope_theta", opt_float(hf, "rope_local_base_freq", 10000.0, label),
                                            label)
    return fields


def _cap(hf: dict, key: str, default: float | None, label: str) -> float | None:
    """A soft-cap value: a number, or null for none (the default when the key is absent)."""
    return None if key in hf and hf[key] is None else opt_float(hf, key, default, label)


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of a Gemma 2 or Gemma 3 text ``config.json`` (not yet validated).

    Raises:
        CheckpointError: as :func:`viz_model.loading.families.llama.config_from_hf`; malformed ``layer_types``;
            Gemma 3's bidirectional attention.
    """
    gemma3 = hf["model_type"] == "gemma3_text"
    if opt_bool(hf, "use_bidirectional_attention", False, label):
        raise CheckpointError(f"{label}: Gemma with use_bidirectional_attention is not supported")
    n_layers = require_int(hf, "num_hidden_layers", label)
    window = opt_int(hf, "sliding_window", None, label)
    head_dim = opt_int(hf, "head_dim", None, label) or require_int(hf, "hidden_size", label) // \
        require_int(hf, "num_attention_heads", label)
    scalar = opt_float(hf, "query_pre_attn_scalar", 256.0, label)
    fields = dict(norm_placement="sandwich", attn_scale=math.sqrt(scalar) if scalar > 0 else scalar,
                  attn_softcap=_cap(hf, "attn_logit_softcapping", None if gemma3 else 50.0, label),
                  logit_softcap=_cap(hf, "final_logit_softcapping", None if gemma3 else 30.0, label),
                  attn_window=window, window_layers=_window_layers(hf, label, n_layers, gemma3) if window else None,
                  **gemma_fields(hf, label, "hidden_activation"))
    if gemma3:
        fields.update(qk_norm="head", **_gemma3_rope(hf, label, head_dim))
    return llama_config(hf, label, **fields)


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``Gemma2ForCausalLM`` / ``Gemma3ForCausalLM`` (or their bare models) weights.

    Raises:
        CheckpointError: an invalid config or one above the memory cap; missing or mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    return cfg, convert(cfg, Weights(state, label, ("model.",)), SANDWICH, plus_one)
