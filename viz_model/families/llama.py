"""Llama-family decoders (Hugging Face ``llama``, ``mistral``, ``qwen2``): pre-RMSNorm, rotary positions
(rotate_half pairing), SwiGLU feed-forward, grouped- or multi-query attention, no biases except Qwen2's
q/k/v biases and optional ``attention_bias``/``mlp_bias``; Mistral's sliding window when configured.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..config import Config, _show
from ..weights import CheckpointError, check_config
from .common import Weights, heads_in, heads_out, opt_bool, opt_dict, opt_float, opt_int, opt_str, require_int


def _rope_theta(hf: dict, label: str) -> float:
    params = opt_dict(hf, "rope_parameters", label)
    scaling = opt_dict(hf, "rope_scaling", label)
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if kind != "default":
        raise CheckpointError(f"{label}: rotary scaling {_show(kind)} is not supported (only the default rotary embedding)")
    if "rope_theta" in params:
        return opt_float(params, "rope_theta", 10000.0, label)
    return opt_float(hf, "rope_theta", 10000.0, label)


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of a Llama, Mistral or Qwen2 ``config.json`` (not yet validated).

    Raises:
        CheckpointError: a field of the wrong type, an activation other than SiLU, rotary scaling, Qwen2's
            per-layer sliding windows.
    """
    family = hf["model_type"]
    act = opt_str(hf, "hidden_act", "silu", label)
    if act != "silu":
        raise CheckpointError(f"{label}: hidden_act {_show(act)} is not supported for {family} (SwiGLU uses silu)")
    d, h = require_int(hf, "hidden_size", label), require_int(hf, "num_attention_heads", label)
    g = opt_int(hf, "num_key_value_heads", None, label) or h
    k = opt_int(hf, "head_dim", None, label) or d // h
    qkv_bias = family == "qwen2" or opt_bool(hf, "attention_bias", False, label)
    window = opt_int(hf, "sliding_window", None, label) if family == "mistral" else None
    if family == "qwen2" and opt_bool(hf, "use_sliding_window", False, label):  # transformers windows only some layers
        raise CheckpointError(f"{label}: Qwen2 with use_sliding_window is not supported (per-layer windows)")
    return Config(n_layers=require_int(hf, "num_hidden_layers", label), d_model=d, n_heads=h, n_kv_heads=g, d_head=k,
                  d_mlp=require_int(hf, "intermediate_size", label), d_vocab=require_int(hf, "vocab_size", label),
                  n_ctx=require_int(hf, "max_position_embeddings", label), positional="rotary",
                  rotary_base=_rope_theta(hf, label), attn_window=window, norm="rmsnorm", norm_placement="pre",
                  mlp="swiglu", causal=True, tied_embeddings=opt_bool(hf, "tie_word_embeddings", False, label),
                  final_norm=True, layer_norm_eps=opt_float(hf, "rms_norm_eps", 1e-6, label), attn_bias=qkv_bias,
                  mlp_bias=opt_bool(hf, "mlp_bias", False, label), family=family)


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``LlamaForCausalLM`` / ``MistralForCausalLM`` / ``Qwen2ForCausalLM`` weights (or their bare models).

    Raises:
        CheckpointError: as :func:`config_from_hf`; an invalid config or one above the memory cap; missing or
            mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    d, h, g, k = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    qkv_bias, tied = cfg.attn_bias, cfg.tied_embeddings
    w = Weights(state, label, ("model.",))
    m = cfg.d_mlp
    out = {"embed.W_E": w.get("embed_tokens.weight", (cfg.d_vocab, d)), "ln_final.w": w.get("norm.weight", (d,))}
    for i in range(cfg.n_layers):
        p, q = f"layers.{i}.", f"blocks.{i}."
        out[q + "ln1.w"] = w.get(p + "input_layernorm.weight", (d,))
        out[q + "ln2.w"] = w.get(p + "post_attention_layernorm.weight", (d,))
        a = p + "self_attn."
        for name, proj, n in (("Q", "q_proj", h), ("K", "k_proj", g), ("V", "v_proj", g)):
            out[q + f"attn.W_{name}"] = heads_in(w.get(a + proj + ".weight", (n * k, d)).T, n, k)
            if qkv_bias:
                out[q + f"attn.b_{name}"] = w.get(a + proj + ".bias", (n * k,)).reshape(n, k)
        out[q + "attn.W_O"] = heads_out(w.get(a + "o_proj.weight", (d, h * k)).T, h, k)
        if qkv_bias:  # Qwen2 has no o_proj bias; Llama's attention_bias has one
            has_o = w.has(a + "o_proj.bias")
            out[q + "attn.b_O"] = w.get(a + "o_proj.bias", (d,)) if has_o else torch.zeros(d)
        f = p + "mlp."
        out[q + "mlp.W_gate"] = w.get(f + "gate_proj.weight", (m, d)).T
        out[q + "mlp.W_in"] = w.get(f + "up_proj.weight", (m, d)).T
        out[q + "mlp.W_out"] = w.get(f + "down_proj.weight", (d, m)).T
        if cfg.mlp_bias:
            out[q + "mlp.b_gate"] = w.get(f + "gate_proj.bias", (m,))
            out[q + "mlp.b_in"] = w.get(f + "up_proj.bias", (m,))
            out[q + "mlp.b_out"] = w.get(f + "down_proj.bias", (d,))
    if not tied:
        out["W_U"] = w.get("lm_head.weight", (cfg.d_vocab, d)).T
    return cfg, {name: t.contiguous() for name, t in out.items()}
