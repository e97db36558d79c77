"""Llama-family decoders (Hugging Face ``llama``, ``mistral``, ``qwen2``): pre-RMSNorm, rotary positions
(rotate_half pairing), SwiGLU feed-forward, grouped- or multi-query attention, no biases except Qwen2's
q/k/v biases and optional ``attention_bias``/``mlp_bias``; Mistral's sliding window when configured.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..config import Config
from ..weights import CheckpointError
from .common import Weights, heads_in, heads_out, require_int


def _rope_theta(hf: dict, label: str) -> float:
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if kind != "default":
        raise CheckpointError(f"{label}: rotary scaling {kind!r} is not supported (only the default rotary embedding)")
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``LlamaForCausalLM`` / ``MistralForCausalLM`` / ``Qwen2ForCausalLM`` weights (or their bare models).

    Raises:
        CheckpointError: an activation other than SiLU, rotary scaling, missing or mis-shaped weights.
    """
    family = hf["model_type"]
    if hf.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{label}: hidden_act {hf.get('hidden_act')!r} is not supported for {family} (SwiGLU uses silu)")
    d, h = require_int(hf, "hidden_size", label), require_int(hf, "num_attention_heads", label)
    g = hf.get("num_key_value_heads") or h
    k = hf.get("head_dim") or d // h
    qkv_bias = family == "qwen2" or bool(hf.get("attention_bias", False))
    window = hf.get("sliding_window") if family == "mistral" else None
    if family == "qwen2" and hf.get("use_sliding_window"):  # transformers windows only some layers (layer_types)
        raise CheckpointError(f"{label}: Qwen2 with use_sliding_window is not supported (per-layer windows)")
    tied = bool(hf.get("tie_word_embeddings", False))
    cfg = Config(n_layers=require_int(hf, "num_hidden_layers", label), d_model=d, n_heads=h, n_kv_heads=g, d_head=k,
                 d_mlp=require_int(hf, "intermediate_size", label), d_vocab=require_int(hf, "vocab_size", label),
                 n_ctx=require_int(hf, "max_position_embeddings", label), positional="rotary",
                 rotary_base=_rope_theta(hf, label), attn_window=window, norm="rmsnorm", norm_placement="pre",
                 mlp="swiglu", causal=True, tied_embeddings=tied, final_norm=True,
                 layer_norm_eps=float(hf.get("rms_norm_eps", 1e-6)), attn_bias=qkv_bias,
                 mlp_bias=bool(hf.get("mlp_bias", False)), family=family)
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
