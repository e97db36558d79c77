"""Llama-family decoders (Hugging Face ``llama``, ``mistral``, ``qwen2``): pre-RMSNorm, rotary positions
(rotate_half pairing; Llama 3.1's ``llama3`` and ``linear`` scaling), SwiGLU feed-forward, grouped- or multi-query
attention, no biases except Qwen2's q/k/v biases and optional ``attention_bias``/``mlp_bias``; Mistral's sliding
window when configured, in every layer; Qwen2's and Qwen3's ``use_sliding_window``, in the layers ``layer_types``
marks (by default those from ``max_window_layers`` on; :func:`qwen_windows`). :func:`config_from_hf` and
:func:`convert` also serve the families built on this layout (Qwen3, OLMo2, Gemma, Phi-3, the MoE families).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config, _show
from viz_model.loading.weights import CheckpointError, check_config
from viz_model.loading.families.common import Weights, heads_in, heads_out, opt_bool, opt_float, opt_int, opt_str, require_int, sliding_layers
from viz_model.loading.families.rope import rope_fields


def qwen_windows(hf: dict, label: str, moe: bool = False) -> dict:
    """``attn_window`` and ``window_layers`` of a Qwen2 / Qwen3 (``moe``: Qwen2-MoE) ``config.json``, as
    transformers 5.23's configurations set them: without ``use_sliding_window`` no layer has a window; with it the
    window is ``sliding_window`` (4,096 when absent) in the layers ``layer_types`` marks ``sliding_attention``, and
    when the file has no ``layer_types``, in layers ``i >= max_window_layers`` (default 28; Qwen2, Qwen3) or in the
    even layers ``i < max_window_layers`` (Qwen2-MoE: ``(i + 1) % 2 and i < max_window_layers``).

    Raises:
        CheckpointError: a field of the wrong type; windowed layers without a window (transformers refuses them too).
    """
    n_layers = require_int(hf, "num_hidden_layers", label)
    use = opt_bool(hf, "use_sliding_window", False, label)
    window = (opt_int(hf, "sliding_window", None, label) if "sliding_window" in hf else 4096) if use else None
    layers = sliding_layers(hf, n_layers, label)
    if layers is None:
        first = opt_int(hf, "max_window_layers", 28, label)
        layers = [i for i in range(n_layers) if use and window is not None
                  and ((i + 1) % 2 and i < first if moe else i >= first)]
    if layers and window is None:
        raise CheckpointError(f"{label}: layer_types marks sliding_attention layers but there is no sliding window "
                              "(use_sliding_window false or sliding_window null)")
    return {"attn_window": window if layers else None, "window_layers": layers or None}


def config_from_hf(hf: dict, label: str, **fields) -> Config:
    """The :class:`Config` of a Llama, Mistral or Qwen2 ``config.json`` (not yet validated); ``fields`` override
    (the families built on this one: Qwen3, OLMo2, Gemma).

    Raises:
        CheckpointError: a field of the wrong type, an activation other than SiLU, rotary scaling other than
            linear and llama3 (and Phi-3's LongRoPE), malformed ``layer_types`` (Qwen2, Qwen3).
    """
    family = hf["model_type"]
    act = opt_str(hf, "hidden_act", "silu", label)
    if act != "silu" and "mlp" not in fields:
        raise CheckpointError(f"{label}: hidden_act {_show(act)} is not supported for {family} (SwiGLU uses silu)")
    d, h = require_int(hf, "hidden_size", label), require_int(hf, "num_attention_heads", label)
    g = opt_int(hf, "num_key_value_heads", None, label) or h
    k = opt_int(hf, "head_dim", None, label) or d // h
    qkv_bias = family == "qwen2" or opt_bool(hf, "attention_bias", False, label)
    window = opt_int(hf, "sliding_window", None, label) if family == "mistral" else None
    windows = qwen_windows(hf, label) if family in ("qwen2", "qwen3") else {"attn_window": window}
    base = dict(n_layers=require_int(hf, "num_hidden_layers", label), d_model=d, n_heads=h, n_kv_heads=g, d_head=k,
                d_mlp=require_int(hf, "intermediate_size", label), d_vocab=require_int(hf, "vocab_size", label),
                n_ctx=require_int(hf, "max_position_embeddings", label), positional="rotary",
                **windows, norm="rmsnorm", norm_placement="pre", mlp="swiglu", causal=True,
                tied_embeddings=opt_bool(hf, "tie_word_embeddings", False, label), final_norm=True,
                layer_norm_eps=opt_float(hf, "rms_norm_eps", 1e-6, label), attn_bias=qkv_bias,
                mlp_bias=opt_bool(hf, "mlp_bias", False, label), family=family,
                **rope_fields(hf, label, k, longrope=family == "phi3"))
    return Config(**{**base, **fields})


def convert(cfg: Config, w: Weights, norms: dict[str, str], norm_weight=lambda t: t) -> dict[str, torch.Tensor]:
    """The weights of a Llama-layout checkpoint (``embed_tokens``, ``layers.{i}.self_attn.q_proj`` ...) in this
    project's names. ``norms``: this project's norm name -> the checkpoint's, per layer (``ln1`` ->
    ``input_layernorm`` ...); ``norm_weight``: applied to every norm weight (Gemma stores ``w - 1``). q/k norm
    weights (``self_attn.q_norm``, ``k_norm``) are read when ``cfg.qk_norm`` asks for them."""
    d, h, g, k = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    qkv_bias = cfg.attn_bias
    out = {"embed.W_E": w.get("embed_tokens.weight", (cfg.d_vocab, d)),
           "ln_final.w": norm_weight(w.get("norm.weight", (d,)))}
    for i in range(cfg.n_layers):
        p, q = f"layers.{i}.", f"blocks.{i}."
        for ours, theirs in norms.items():
            out[q + ours + ".w"] = norm_weight(w.get(p + theirs + ".weight", (d,)))
        a = p + "self_attn."
        for name, proj, n in (("Q", "q_proj", h), ("K", "k_proj", g), ("V", "v_proj", g)):
            out[q + f"attn.W_{name}"] = heads_in(w.get(a + proj + ".weight", (n * k, d)).T, n, k)
            if qkv_bias:
                out[q + f"attn.b_{name}"] = w.get(a + proj + ".bias", (n * k,)).reshape(n, k)
        if cfg.qk_norm != "none":
            for name, n in (("q_norm", h), ("k_norm", g)):
                out[q + f"attn.{name}.w"] = norm_weight(w.get(a + name + ".weight", (k if cfg.qk_norm == "head" else n * k,)))
        out[q + "attn.W_O"] = heads_out(w.get(a + "o_proj.weight", (d, h * k)).T, h, k)
        if qkv_bias:  # Qwen2 has no o_proj bias; Llama's attention_bias has one
            has_o = w.has(a + "o_proj.bias")
            out[q + "attn.b_O"] = w.get(a + "o_proj.bias", (d,)) if has_o else torch.zeros(d)
        if cfg.is_moe_layer(i):  # a mixture of experts: its family adds the router and experts (families/experts.py)
            continue
        f, m = p + "mlp.", cfg.for_layer(i).d_mlp  # Qwen2-MoE's dense layers among experts: their own width
        out[q + "mlp.W_gate"] = w.get(f + "gate_proj.weight", (m, d)).T
        out[q + "mlp.W_in"] = w.get(f + "up_proj.weight", (m, d)).T
        out[q + "mlp.W_out"] = w.get(f + "down_proj.weight", (d, m)).T
        if cfg.mlp_bias:
            out[q + "mlp.b_gate"] = w.get(f + "gate_proj.bias", (m,))
            out[q + "mlp.b_in"] = w.get(f + "up_proj.bias", (m,))
            out[q + "mlp.b_out"] = w.get(f + "down_proj.bias", (d,))
    if not cfg.tied_embeddings:
        out["W_U"] = w.get("lm_head.weight", (cfg.d_vocab, d)).T
    return out  # views: build_model lays each weight out


PRE_NORMS = {"ln1": "input_layernorm", "ln2": "post_attention_layernorm"}


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``LlamaForCausalLM`` / ``MistralForCausalLM`` / ``Qwen2ForCausalLM`` weights (or their bare models).

    Raises:
        CheckpointError: as :func:`config_from_hf`; an invalid config or one above the memory cap; missing or
            mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    return cfg, convert(cfg, Weights(state, label, ("model.",)), PRE_NORMS)
