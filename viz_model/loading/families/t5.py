"""T5 and T5 v1.1 (Hugging Face ``model_type: t5``; Raffel et al., 2020): a pre-norm encoder-decoder without
positional embeddings. Positions enter through a learned relative position bias per head and distance bucket,
added to every self-attention layer's scores (one table per stack, stored in block 0; config ``rel_pos_buckets``,
``rel_pos_max_distance``); cross-attention has none. Scores are not divided by sqrt(d_kv) (``attn_scale = 1``);
norms are RMSNorm without bias (T5LayerNorm); the feed-forward network is ReLU (T5) or gated GELU, tanh
approximation (``feed_forward_proj: gated-gelu``, v1.1: ``mlp = "geglu"``); no biases anywhere.

Output: a file with its own ``lm_head.weight`` and ``tie_word_embeddings: false`` (Hub T5 v1.1) uses it; otherwise
the head is the shared embedding, as transformers ties it, multiplied by ``d_model^-0.5`` when transformers scales
the decoder's output (``scale_decoder_outputs``, original T5) — folded into ``W_U`` here.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config, _show
from viz_model.loading.weights import CheckpointError, check_config
from viz_model.loading.families.common import Weights, heads_in, heads_out, opt_bool, opt_float, opt_int, opt_str, require_int

FEED_FORWARD = {"relu": "relu", "gated-gelu": "geglu", "gated-silu": "swiglu", "gelu": "gelu"}


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of a T5 ``config.json`` (not yet validated).

    Raises:
        CheckpointError: a field of the wrong type, a feed-forward kind other than relu, gelu, gated-gelu and
            gated-silu.
    """
    ff = opt_str(hf, "feed_forward_proj", "relu", label)
    if ff not in FEED_FORWARD:
        raise CheckpointError(f"{label}: feed_forward_proj {_show(ff)} is not supported (supported: {', '.join(FEED_FORWARD)})")
    n_enc = require_int(hf, "num_layers", label)
    pad = opt_int(hf, "pad_token_id", 0, label)
    return Config(n_layers=opt_int(hf, "num_decoder_layers", None, label) or n_enc, n_encoder_layers=n_enc,
                  d_model=require_int(hf, "d_model", label), n_heads=require_int(hf, "num_heads", label),
                  d_head=require_int(hf, "d_kv", label), d_mlp=require_int(hf, "d_ff", label),
                  d_vocab=require_int(hf, "vocab_size", label), n_ctx=opt_int(hf, "n_positions", 512, label),
                  positional="none", norm="rmsnorm", norm_placement="pre", mlp=FEED_FORWARD[ff], causal=True,
                  tied_embeddings=False, final_norm=True,
                  layer_norm_eps=opt_float(hf, "layer_norm_epsilon", 1e-6, label), attn_bias=False, mlp_bias=False,
                  attn_scale=1.0, rel_pos_buckets=opt_int(hf, "relative_attention_num_buckets", 32, label),
                  rel_pos_max_distance=opt_int(hf, "relative_attention_max_distance", 128, label),
                  decoder_start_id=opt_int(hf, "decoder_start_token_id", pad, label),
                  decoder_end_id=opt_int(hf, "eos_token_id", 1, label), family="t5")


def _attention(w: Weights, theirs: str, ours: str, cfg: Config, out: dict) -> None:
    d, h, k = cfg.d_model, cfg.n_heads, cfg.d_head
    for name in "QKV":
        out[f"{ours}.W_{name}"] = heads_in(w.get(f"{theirs}.{name.lower()}.weight", (h * k, d)).T, h, k)
    out[f"{ours}.W_O"] = heads_out(w.get(f"{theirs}.o.weight", (d, h * k)).T, h, k)


def _mlp(w: Weights, theirs: str, ours: str, cfg: Config, out: dict) -> None:
    d, m = cfg.d_model, cfg.d_mlp
    if cfg.mlp in ("geglu", "swiglu"):
        out[ours + "W_gate"] = w.get(theirs + "wi_0.weight", (m, d)).T
        out[ours + "W_in"] = w.get(theirs + "wi_1.weight", (m, d)).T
    else:
        out[ours + "W_in"] = w.get(theirs + "wi.weight", (m, d)).T
    out[ours + "W_out"] = w.get(theirs + "wo.weight", (d, m)).T


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``T5ForConditionalGeneration`` weights.

    Raises:
        CheckpointError: as :func:`config_from_hf`; an invalid config or one above the memory cap; missing or
            mis-shaped weights (a bare ``T5Model`` without ``shared``-tied head loads with the shared embedding).
    """
    cfg = check_config(config_from_hf(hf, label), label)
    d, vocab, h = cfg.d_model, cfg.d_vocab, cfg.n_heads
    w = Weights(state, label)
    shared = w.get("shared.weight", (vocab, d))
    out = {"embed.W_E": shared}
    for stack, ours, n in (("encoder", "encoder.", cfg.n_encoder_layers), ("decoder", "", cfg.n_layers)):
        out[ours + "rel_pos.W_rel"] = w.get(f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                                            (cfg.rel_pos_buckets, h))
        out[ours + "ln_final.w"] = w.get(f"{stack}.final_layer_norm.weight", (d,))
        for i in range(n):
            p, q = f"{stack}.block.{i}.layer.", f"{ours}blocks.{i}."
            _attention(w, p + "0.SelfAttention", q + "attn", cfg, out)
            out[q + "ln1.w"] = w.get(p + "0.layer_norm.weight", (d,))
            if stack == "decoder":
                _attention(w, p + "1.EncDecAttention", q + "cross_attn", cfg, out)
                out[q + "ln_cross.w"] = w.get(p + "1.layer_norm.weight", (d,))
            f = p + ("2." if stack == "decoder" else "1.")
            _mlp(w, f + "DenseReluDense.", q + "mlp.", cfg, out)
            out[q + "ln2.w"] = w.get(f + "layer_norm.weight", (d,))
    own_head = w.has("lm_head.weight") and opt_bool(hf, "tie_word_embeddings", True, label) is False
    if own_head:
        out["W_U"] = w.get("lm_head.weight", (vocab, d)).T
    else:
        scale = hf.get("scale_decoder_outputs")
        scale = opt_bool(hf, "scale_decoder_outputs", True, label) if scale is not None else \
            opt_bool(hf, "tie_word_embeddings", True, label)
        out["W_U"] = shared.T.float() * (d ** -0.5) if scale else shared.T
    return cfg, out  # views: build_model lays each weight out
