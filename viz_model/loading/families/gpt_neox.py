"""GPT-NeoX and Pythia (Hugging Face ``model_type: gpt_neox``; Black et al., 2022; Biderman et al., 2023): pre-LN
with LayerNorm and biases, rotary positions on only the first ``rotary_pct`` of each head (Pythia: 25 %; config
switch ``rotary_dim``), and a parallel residual (``use_parallel_residual``, default true: attention and MLP both
read the block's input, ``post = pre + attn(ln1(pre)) + mlp(ln2(pre))``; switch ``parallel_residual``). The fused
``query_key_value`` matrix is laid out head by head (``[head, (q, k, v), d_head]``), unlike GPT-2's ``[q | k | v]``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config
from viz_model.loading.weights import CheckpointError, check_config
from viz_model.loading.families.common import Weights, activation, heads_out, opt_bool, opt_float, require_int
from viz_model.loading.families.rope import rope_fields


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of a GPT-NeoX ``config.json`` (not yet validated).

    Raises:
        CheckpointError: a field of the wrong type, an unsupported activation or rotary scaling.
    """
    d, h = require_int(hf, "hidden_size", label), require_int(hf, "num_attention_heads", label)
    if d % h:
        raise CheckpointError(f"{label}: hidden_size ({d}) is not a multiple of num_attention_heads ({h})")
    bias = opt_bool(hf, "attention_bias", True, label)
    return Config(n_layers=require_int(hf, "num_hidden_layers", label), d_model=d, n_heads=h, d_head=d // h,
                  d_mlp=require_int(hf, "intermediate_size", label), d_vocab=require_int(hf, "vocab_size", label),
                  n_ctx=require_int(hf, "max_position_embeddings", label), positional="rotary",
                  norm="layernorm", norm_placement="pre", mlp=activation(hf.get("hidden_act", "gelu"), label),
                  causal=True, tied_embeddings=opt_bool(hf, "tie_word_embeddings", False, label), final_norm=True,
                  layer_norm_eps=opt_float(hf, "layer_norm_eps", 1e-5, label), attn_bias=bias, mlp_bias=True,
                  parallel_residual=opt_bool(hf, "use_parallel_residual", True, label), family="gpt_neox",
                  **rope_fields(hf, label, d // h, opt_float(hf, "rotary_emb_base", 10000.0, label),
                                partial_key="rotary_pct", default_partial=0.25))


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``GPTNeoXForCausalLM`` (or ``GPTNeoXModel``) weights.

    Raises:
        CheckpointError: as :func:`config_from_hf`; an invalid config or one above the memory cap; missing or
            mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    d, h, k, m = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp
    w = Weights(state, label, ("gpt_neox.",))
    out = {"embed.W_E": w.get("embed_in.weight", (cfg.d_vocab, d)),
           "ln_final.w": w.get("final_layer_norm.weight", (d,)), "ln_final.b": w.get("final_layer_norm.bias", (d,))}
    for i in range(cfg.n_layers):
        p, q = f"layers.{i}.", f"blocks.{i}."
        for ours, theirs in (("ln1", "input_layernorm"), ("ln2", "post_attention_layernorm")):
            out[q + ours + ".w"] = w.get(p + theirs + ".weight", (d,))
            out[q + ours + ".b"] = w.get(p + theirs + ".bias", (d,))
        qkv = w.get(p + "attention.query_key_value.weight", (3 * d, d)).reshape(h, 3, k, d)  # [head, qkv, k, d]
        for j, name in enumerate("QKV"):
            out[q + f"attn.W_{name}"] = qkv[:, j].transpose(1, 2)  # [head, d_model, d_head]
        out[q + "attn.W_O"] = heads_out(w.get(p + "attention.dense.weight", (d, d)).T, h, k)
        if cfg.attn_bias:
            qkv_b = w.get(p + "attention.query_key_value.bias", (3 * d,)).reshape(h, 3, k)
            for j, name in enumerate("QKV"):
                out[q + f"attn.b_{name}"] = qkv_b[:, j]
            out[q + "attn.b_O"] = w.get(p + "attention.dense.bias", (d,))
        out[q + "mlp.W_in"] = w.get(p + "mlp.dense_h_to_4h.weight", (m, d)).T
        out[q + "mlp.b_in"] = w.get(p + "mlp.dense_h_to_4h.bias", (m,))
        out[q + "mlp.W_out"] = w.get(p + "mlp.dense_4h_to_h.weight", (d, m)).T
        out[q + "mlp.b_out"] = w.get(p + "mlp.dense_4h_to_h.bias", (d,))
    if not cfg.tied_embeddings:
        out["W_U"] = w.get("embed_out.weight", (cfg.d_vocab, d)).T
    return cfg, out  # views: build_model lays each weight out
