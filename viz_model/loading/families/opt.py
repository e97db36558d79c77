"""OPT (Hugging Face ``model_type: opt``; Zhang et al., 2022): a GPT-2-like decoder with learned positions stored
with an offset of 2 rows (dropped here, as BART's), ReLU, pre-LN (``do_layer_norm_before``; OPT-350m is post-LN
without a final LayerNorm) and, when ``word_embed_proj_dim`` differs from ``hidden_size`` (OPT-350m), projections
between the narrower embedding and the residual stream (``project_in``, ``project_out``).

Those projections are linear maps applied right after the embedding lookup and right before the unembedding, so
they are multiplied into the matrices at load time: ``W_E = embed_tokens @ project_in^T`` ``[d_vocab, d_model]`` and
``W_U = project_out^T @ embed_tokens^T`` ``[d_model, d_vocab]`` (untied). Every embedding and logit the views show
is then exactly what OPT computes (up to float32 rounding of the products), without a separate switch.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config
from viz_model.loading.weights import CheckpointError, check_config
from viz_model.loading.families.common import Weights, activation, heads_in, heads_out, opt_bool, opt_int, require_int

POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding keeps two extra rows before position 0


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of an OPT ``config.json`` (not yet validated).

    Raises:
        CheckpointError: a field of the wrong type, an unsupported activation.
    """
    d, h = require_int(hf, "hidden_size", label), require_int(hf, "num_attention_heads", label)
    if d % h:
        raise CheckpointError(f"{label}: hidden_size ({d}) is not a multiple of num_attention_heads ({h})")
    pre = opt_bool(hf, "do_layer_norm_before", True, label)
    e = opt_int(hf, "word_embed_proj_dim", None, label) or d
    bias = opt_bool(hf, "enable_bias", True, label)
    final = pre and not opt_bool(hf, "_remove_final_layer_norm", False, label)
    return Config(n_layers=require_int(hf, "num_hidden_layers", label), d_model=d, n_heads=h, d_head=d // h,
                  d_mlp=require_int(hf, "ffn_dim", label), d_vocab=require_int(hf, "vocab_size", label),
                  n_ctx=require_int(hf, "max_position_embeddings", label), positional="learned", norm="layernorm",
                  norm_placement="pre" if pre else "post", mlp=activation(hf.get("activation_function", "relu"), label),
                  causal=True, tied_embeddings=e == d and opt_bool(hf, "tie_word_embeddings", True, label),
                  final_norm=final, layer_norm_eps=1e-5, attn_bias=bias, mlp_bias=bias, family="opt")


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``OPTForCausalLM`` (or ``OPTModel``) weights.

    Raises:
        CheckpointError: as :func:`config_from_hf`; an invalid config or one above the memory cap; missing or
            mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    d, h, k, m, vocab = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp, cfg.d_vocab
    e = opt_int(hf, "word_embed_proj_dim", None, label) or d
    affine = opt_bool(hf, "layer_norm_elementwise_affine", True, label)
    w = Weights(state, label, ("model.decoder.", "decoder."))

    def norm(theirs: str, ours: str) -> None:
        out[ours + ".w"] = w.get(theirs + ".weight", (d,)) if affine else torch.ones(d)
        out[ours + ".b"] = w.get(theirs + ".bias", (d,)) if affine else torch.zeros(d)

    embed = w.get("embed_tokens.weight", (vocab, e))
    out = {"embed.W_E": embed if e == d else embed.float() @ w.get("project_in.weight", (d, e)).T.float(),
           "pos_embed.W_pos": w.get("embed_positions.weight", (cfg.n_ctx + POSITION_OFFSET, d))[POSITION_OFFSET:]}
    if cfg.final_norm:
        norm("final_layer_norm", "ln_final")
    for i in range(cfg.n_layers):
        p, q = f"layers.{i}.", f"blocks.{i}."
        norm(p + "self_attn_layer_norm", q + "ln1")
        norm(p + "final_layer_norm", q + "ln2")
        for name, proj in (("Q", "q_proj"), ("K", "k_proj"), ("V", "v_proj")):
            out[q + f"attn.W_{name}"] = heads_in(w.get(p + f"self_attn.{proj}.weight", (d, d)).T, h, k)
            if cfg.attn_bias:
                out[q + f"attn.b_{name}"] = w.get(p + f"self_attn.{proj}.bias", (d,)).reshape(h, k)
        out[q + "attn.W_O"] = heads_out(w.get(p + "self_attn.out_proj.weight", (d, d)).T, h, k)
        out[q + "mlp.W_in"] = w.get(p + "fc1.weight", (m, d)).T
        out[q + "mlp.W_out"] = w.get(p + "fc2.weight", (d, m)).T
        if cfg.attn_bias:
            out[q + "attn.b_O"] = w.get(p + "self_attn.out_proj.bias", (d,))
            out[q + "mlp.b_in"] = w.get(p + "fc1.bias", (m,))
            out[q + "mlp.b_out"] = w.get(p + "fc2.bias", (d,))
    if not cfg.tied_embeddings:
        head = w.get("lm_head.weight", (vocab, e)) if w.has("lm_head.weight") else embed
        out["W_U"] = head.T if e == d else w.get("project_out.weight", (e, d)).T.float() @ head.T.float()
    return cfg, out  # views: build_model lays each weight out
