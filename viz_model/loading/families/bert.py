"""BERT (Hugging Face ``model_type: bert``): a bidirectional post-LN encoder.

Embeddings are word + learned position + token type (segment), followed by a LayerNorm; each block is
``LN(x + attn(x))`` then ``LN(mid + FFN(mid))`` (Devlin et al., 2019). ``BertForMaskedLM`` weights add
the masked-LM head (dense + GELU + LayerNorm, then the tied word embeddings plus a bias); a bare
``BertModel`` (e.g. a sentence-embedding model) has no head and outputs hidden states. The pooler is
not used by any view and is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config, _show
from viz_model.loading.weights import CheckpointError, check_config
from viz_model.loading.families.common import Weights, activation, heads_in, heads_out, opt_bool, opt_float, opt_int, opt_str, require_int


def _linear(w: Weights, name: str, n_in: int, n_out: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An ``nn.Linear`` as (input-major weight ``[n_in, n_out]``, bias ``[n_out]``)."""
    return w.get(name + ".weight", (n_out, n_in)).T, w.get(name + ".bias", (n_out,))


def config_from_hf(hf: dict, label: str, mlm: bool = True) -> Config:
    """The :class:`Config` of a Hugging Face BERT ``config.json`` (not yet validated); ``mlm``: the weights hold
    the masked-LM head (with only the config, it is assumed, the larger of the two models).

    Raises:
        CheckpointError: a field of the wrong type, relative position embeddings.
    """
    kind = opt_str(hf, "position_embedding_type", "absolute", label)
    if kind != "absolute":
        raise CheckpointError(f"{label}: BERT position_embedding_type {_show(kind)} is not supported")
    d, h = require_int(hf, "hidden_size", label), require_int(hf, "num_attention_heads", label)
    if d % h:
        raise CheckpointError(f"{label}: hidden_size ({d}) is not a multiple of num_attention_heads ({h})")
    tied = opt_bool(hf, "tie_word_embeddings", True, label)
    return Config(n_layers=require_int(hf, "num_hidden_layers", label), d_model=d, n_heads=h, d_head=d // h,
                  d_mlp=require_int(hf, "intermediate_size", label), d_vocab=require_int(hf, "vocab_size", label),
                  n_ctx=require_int(hf, "max_position_embeddings", label), positional="learned", norm="layernorm",
                  norm_placement="post", mlp=activation(hf.get("hidden_act", "gelu"), label), causal=False,
                  tied_embeddings=tied or not mlm, final_norm=False,
                  layer_norm_eps=opt_float(hf, "layer_norm_eps", 1e-12, label),
                  n_token_types=opt_int(hf, "type_vocab_size", 2, label), embed_norm=True,
                  lm_head="mlm" if mlm else "none", unembed_bias=mlm, family="bert")


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """``BertModel`` or ``BertForMaskedLM`` weights.

    Raises:
        CheckpointError: as :func:`config_from_hf`; an invalid config or one above the memory cap; missing or
            mis-shaped weights.
    """
    w = Weights(state, label, ("bert.",))
    mlm = w.has("cls.predictions.transform.dense.weight")
    cfg = check_config(config_from_hf(hf, label, mlm), label)
    d, h = cfg.d_model, cfg.n_heads
    tied = cfg.tied_embeddings
    k, m = cfg.d_head, cfg.d_mlp
    e = "embeddings."
    out = {"embed.W_E": w.get(e + "word_embeddings.weight", (cfg.d_vocab, d)),
           "pos_embed.W_pos": w.get(e + "position_embeddings.weight", (cfg.n_ctx, d)),
           "W_token_type": w.get(e + "token_type_embeddings.weight", (cfg.n_token_types, d)),
           "ln_embed.w": w.get(e + "LayerNorm.weight", (d,)), "ln_embed.b": w.get(e + "LayerNorm.bias", (d,))}
    for i in range(cfg.n_layers):
        p, q = f"encoder.layer.{i}.", f"blocks.{i}."
        for name, theirs in zip("QKV", ("query", "key", "value")):
            W, b = _linear(w, p + "attention.self." + theirs, d, d)
            out[q + f"attn.W_{name}"], out[q + f"attn.b_{name}"] = heads_in(W, h, k), b.reshape(h, k)
        W, out[q + "attn.b_O"] = _linear(w, p + "attention.output.dense", d, d)
        out[q + "attn.W_O"] = heads_out(W, h, k)
        out[q + "mlp.W_in"], out[q + "mlp.b_in"] = _linear(w, p + "intermediate.dense", d, m)
        out[q + "mlp.W_out"], out[q + "mlp.b_out"] = _linear(w, p + "output.dense", m, d)
        for ours, theirs in (("ln1", "attention.output.LayerNorm"), ("ln2", "output.LayerNorm")):
            out[q + ours + ".w"], out[q + ours + ".b"] = w.get(p + theirs + ".weight", (d,)), w.get(p + theirs + ".bias", (d,))
    if mlm:
        t = "cls.predictions."
        out["mlm_head.W"], out["mlm_head.b"] = _linear(w, t + "transform.dense", d, d)
        out["mlm_head.ln.w"] = w.get(t + "transform.LayerNorm.weight", (d,))
        out["mlm_head.ln.b"] = w.get(t + "transform.LayerNorm.bias", (d,))
        # the decoder applies decoder.bias (transformers ties it to predictions.bias; older files have only the latter)
        out["b_U"] = w.get(t + "decoder.bias", (cfg.d_vocab,)) if w.has(t + "decoder.bias") else w.get(t + "bias", (cfg.d_vocab,))
        if not tied:
            out["W_U"] = w.get(t + "decoder.weight", (cfg.d_vocab, d)).T
    return cfg, out  # views: build_model lays each weight out
