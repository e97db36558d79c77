"""BART (Hugging Face ``model_type: bart``; Lewis et al., 2019): a post-LN encoder-decoder.

Token embeddings are shared by encoder, decoder and the output layer (plus ``final_logits_bias``); each
stack has its own learned positions (stored with an offset of 2 rows, dropped here) and an embedding
LayerNorm; decoder blocks are self-attention, cross-attention (``encoder_attn``) and the feed-forward
network, each followed by Add & LayerNorm, as in Vaswani et al. (2017).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from viz_model.config import Config
from viz_model.loading.weights import CheckpointError, check_config
from viz_model.loading.families.common import Weights, activation, heads_in, heads_out, opt_bool, opt_int, require_int

POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding keeps two extra rows before position 0


def _attention(w: Weights, theirs: str, ours: str, d: int, h: int, k: int, out: dict) -> None:
    for name, proj in (("Q", "q_proj"), ("K", "k_proj"), ("V", "v_proj")):
        out[f"{ours}.W_{name}"] = heads_in(w.get(f"{theirs}.{proj}.weight", (d, d)).T, h, k)
        out[f"{ours}.b_{name}"] = w.get(f"{theirs}.{proj}.bias", (d,)).reshape(h, k)
    out[f"{ours}.W_O"] = heads_out(w.get(f"{theirs}.out_proj.weight", (d, d)).T, h, k)
    out[f"{ours}.b_O"] = w.get(f"{theirs}.out_proj.bias", (d,))


def _norm(w: Weights, theirs: str, ours: str, d: int, out: dict) -> None:
    out[f"{ours}.w"], out[f"{ours}.b"] = w.get(theirs + ".weight", (d,)), w.get(theirs + ".bias", (d,))


def _layer(w: Weights, theirs: str, ours: str, cfg: Config, cross: bool, out: dict) -> None:
    d, h, k, m = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp
    _attention(w, theirs + "self_attn", ours + "attn", d, h, k, out)
    _norm(w, theirs + "self_attn_layer_norm", ours + "ln1", d, out)
    if cross:
        _attention(w, theirs + "encoder_attn", ours + "cross_attn", d, h, k, out)
        _norm(w, theirs + "encoder_attn_layer_norm", ours + "ln_cross", d, out)
    out[ours + "mlp.W_in"] = w.get(theirs + "fc1.weight", (m, d)).T
    out[ours + "mlp.b_in"] = w.get(theirs + "fc1.bias", (m,))
    out[ours + "mlp.W_out"] = w.get(theirs + "fc2.weight", (d, m)).T
    out[ours + "mlp.b_out"] = w.get(theirs + "fc2.bias", (d,))
    _norm(w, theirs + "final_layer_norm", ours + "ln2", d, out)


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of a BART ``config.json`` (not yet validated).

    Raises:
        CheckpointError: a field of the wrong type, encoder and decoder of different widths or head counts,
            pre-LN variants (``normalize_before``, mBART).
    """
    d = require_int(hf, "d_model", label)
    h = require_int(hf, "encoder_attention_heads", label)
    ffn = require_int(hf, "encoder_ffn_dim", label)
    if opt_int(hf, "decoder_attention_heads", h, label) != h or opt_int(hf, "decoder_ffn_dim", ffn, label) != ffn:
        raise CheckpointError(f"{label}: encoder and decoder must have the same head count and feed-forward width")
    if opt_bool(hf, "normalize_before", False, label) or opt_bool(hf, "add_final_layer_norm", False, label):
        raise CheckpointError(f"{label}: pre-LN BART variants (normalize_before, mBART) are not supported")
    if d % h:
        raise CheckpointError(f"{label}: d_model ({d}) is not a multiple of encoder_attention_heads ({h})")
    return Config(n_layers=require_int(hf, "decoder_layers", label), n_encoder_layers=require_int(hf, "encoder_layers", label),
                  d_model=d, n_heads=h, d_head=d // h, d_mlp=ffn, d_vocab=require_int(hf, "vocab_size", label),
                  n_ctx=require_int(hf, "max_position_embeddings", label), positional="learned", norm="layernorm",
                  norm_placement="post", mlp=activation(hf.get("activation_function", "gelu"), label), causal=True,
                  tied_embeddings=True, final_norm=False, layer_norm_eps=1e-5, embed_norm=True, unembed_bias=True,
                  embed_scale=math.sqrt(d) if opt_bool(hf, "scale_embedding", False, label) else 1.0,
                  decoder_start_id=opt_int(hf, "decoder_start_token_id", 2, label),
                  decoder_end_id=opt_int(hf, "eos_token_id", 2, label), family="bart")


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``BartForConditionalGeneration`` (or ``BartModel``) weights.

    Raises:
        CheckpointError: as :func:`config_from_hf`; an invalid config or one above the memory cap; missing or
            mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    d, vocab = cfg.d_model, cfg.d_vocab
    w = Weights(state, label, ("model.",))
    n = cfg.n_ctx + POSITION_OFFSET
    out = {"embed.W_E": w.get("shared.weight", (vocab, d)) if w.has("shared.weight")
           else w.get("encoder.embed_tokens.weight", (vocab, d)),
           "encoder.pos_embed.W_pos": w.get("encoder.embed_positions.weight", (n, d))[POSITION_OFFSET:],
           "pos_embed.W_pos": w.get("decoder.embed_positions.weight", (n, d))[POSITION_OFFSET:]}
    _norm(w, "encoder.layernorm_embedding", "encoder.ln_embed", d, out)
    _norm(w, "decoder.layernorm_embedding", "ln_embed", d, out)
    for i in range(cfg.n_encoder_layers):
        _layer(w, f"encoder.layers.{i}.", f"encoder.blocks.{i}.", cfg, False, out)
    for i in range(cfg.n_layers):
        _layer(w, f"decoder.layers.{i}.", f"blocks.{i}.", cfg, True, out)
    out["b_U"] = w.get("final_logits_bias", (1, vocab))[0] if w.has("final_logits_bias") else torch.zeros(vocab)
    return cfg, out  # views: build_model lays each weight out
