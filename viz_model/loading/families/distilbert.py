"""DistilBERT (Hugging Face ``model_type: distilbert``; Sanh et al., 2019): BERT's post-LN encoder with half the
layers, no token types and no pooler. ``DistilBertForMaskedLM`` adds the masked-LM head (``vocab_transform``,
the activation, ``vocab_layer_norm``, then ``vocab_projector`` tied to the word embeddings, with a bias); a bare
``DistilBertModel`` outputs hidden states. Positions are the table stored in the file (learned, or the sinusoid
that ``sinusoidal_pos_embds`` wrote into it)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config
from viz_model.loading.weights import CheckpointError, check_config
from viz_model.loading.families.common import Weights, activation, heads_in, heads_out, opt_bool, require_int

EPS = 1e-12  # transformers' DistilBERT LayerNorms (fixed, not in the config)


def config_from_hf(hf: dict, label: str, mlm: bool = True) -> Config:
    """The :class:`Config` of a DistilBERT ``config.json`` (not yet validated); ``mlm`` as in BERT's.

    Raises:
        CheckpointError: a field of the wrong type, an unsupported activation.
    """
    d, h = require_int(hf, "dim", label), require_int(hf, "n_heads", label)
    if d % h:
        raise CheckpointError(f"{label}: dim ({d}) is not a multiple of n_heads ({h})")
    return Config(n_layers=require_int(hf, "n_layers", label), d_model=d, n_heads=h, d_head=d // h,
                  d_mlp=require_int(hf, "hidden_dim", label), d_vocab=require_int(hf, "vocab_size", label),
                  n_ctx=require_int(hf, "max_position_embeddings", label), positional="learned", norm="layernorm",
                  norm_placement="post", mlp=activation(hf.get("activation", "gelu"), label), causal=False,
                  tied_embeddings=opt_bool(hf, "tie_word_embeddings", True, label) or not mlm, final_norm=False,
                  layer_norm_eps=EPS, embed_norm=True, lm_head="mlm" if mlm else "none", unembed_bias=mlm,
                  family="distilbert")


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``DistilBertModel`` or ``DistilBertForMaskedLM`` weights.

    Raises:
        CheckpointError: as :func:`config_from_hf`; an invalid config or one above the memory cap; missing or
            mis-shaped weights.
    """
    w = Weights(state, label, ("distilbert.",))
    mlm = w.has("vocab_transform.weight")
    cfg = check_config(config_from_hf(hf, label, mlm), label)
    d, h, k, m, vocab = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp, cfg.d_vocab

    def linear(name: str, n_in: int, n_out: int) -> tuple[torch.Tensor, torch.Tensor]:
        return w.get(name + ".weight", (n_out, n_in)).T, w.get(name + ".bias", (n_out,))

    def norm(theirs: str, ours: str) -> None:
        out[ours + ".w"], out[ours + ".b"] = w.get(theirs + ".weight", (d,)), w.get(theirs + ".bias", (d,))

    out = {"embed.W_E": w.get("embeddings.word_embeddings.weight", (vocab, d)),
           "pos_embed.W_pos": w.get("embeddings.position_embeddings.weight", (cfg.n_ctx, d))}
    norm("embeddings.LayerNorm", "ln_embed")
    for i in range(cfg.n_layers):
        p, q = f"transformer.layer.{i}.", f"blocks.{i}."
        for name, theirs in zip("QKV", ("q_lin", "k_lin", "v_lin")):
            W, b = linear(p + "attention." + theirs, d, d)
            out[q + f"attn.W_{name}"], out[q + f"attn.b_{name}"] = heads_in(W, h, k), b.reshape(h, k)
        W, out[q + "attn.b_O"] = linear(p + "attention.out_lin", d, d)
        out[q + "attn.W_O"] = heads_out(W, h, k)
        out[q + "mlp.W_in"], out[q + "mlp.b_in"] = linear(p + "ffn.lin1", d, m)
        out[q + "mlp.W_out"], out[q + "mlp.b_out"] = linear(p + "ffn.lin2", m, d)
        norm(p + "sa_layer_norm", q + "ln1")
        norm(p + "output_layer_norm", q + "ln2")
    if mlm:
        out["mlm_head.W"], out["mlm_head.b"] = linear("vocab_transform", d, d)
        out["mlm_head.ln.w"], out["mlm_head.ln.b"] = w.get("vocab_layer_norm.weight", (d,)), w.get("vocab_layer_norm.bias", (d,))
        out["b_U"] = w.get("vocab_projector.bias", (vocab,))
        if not cfg.tied_embeddings:
            out["W_U"] = w.get("vocab_projector.weight", (vocab, d)).T
    return cfg, out  # views: build_model lays each weight out
