"""GPT-2 (Hugging Face ``model_type: gpt2``) and nanoGPT ``ckpt.pt``.

Both are pre-LN decoders with learned positions, tied embeddings and a final LayerNorm. Hugging Face
GPT-2 stores ``Conv1D`` weights input-major (``[in, out]``, used as ``x @ W``) and the GELU tanh
approximation ("gelu_new"); nanoGPT stores ``nn.Linear`` weights (``[out, in]``), uses the exact GELU,
and its ``bias=False`` option drops every bias, LayerNorm's included.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config
from viz_model.loading.weights import CheckpointError, check_config
from viz_model.loading.families.common import Weights, activation, heads_in, heads_out, opt_bool, opt_float, opt_int, require_int


def _convert(w: Weights, cfg: Config, linear: bool, bias: bool) -> dict[str, torch.Tensor]:
    """Rename GPT-2-layout weights (``wte``, ``wpe``, ``h.{i}.attn.c_attn`` …) into this project's names.

    ``linear``: weights are ``nn.Linear`` ``[out, in]`` (nanoGPT) rather than ``Conv1D`` ``[in, out]``.
    """
    d, h, k, m = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp

    def mat(name: str, n_in: int, n_out: int) -> torch.Tensor:
        return w.get(name, (n_out, n_in)).T if linear else w.get(name, (n_in, n_out))

    def vec(name: str, n: int) -> torch.Tensor:  # a LayerNorm bias; nanoGPT's bias=False has none (zeros)
        return w.get(name, (n,)) if bias else torch.zeros(n)

    out = {"embed.W_E": w.get("wte.weight", (cfg.d_vocab, d)), "pos_embed.W_pos": w.get("wpe.weight", (cfg.n_ctx, d))}
    for i in range(cfg.n_layers):
        p, q = f"h.{i}.", f"blocks.{i}."
        for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            out[q + ours + ".w"] = w.get(p + theirs + ".weight", (d,))
            out[q + ours + ".b"] = vec(p + theirs + ".bias", d)
        qkv = mat(p + "attn.c_attn.weight", d, 3 * d)
        for name, part in zip("QKV", qkv.split(d, dim=1)):
            out[q + f"attn.W_{name}"] = heads_in(part, h, k)
        out[q + "attn.W_O"] = heads_out(mat(p + "attn.c_proj.weight", d, d), h, k)
        out[q + "mlp.W_in"] = mat(p + "mlp.c_fc.weight", d, m)
        out[q + "mlp.W_out"] = mat(p + "mlp.c_proj.weight", m, d)
        if bias:
            for name, part in zip("QKV", w.get(p + "attn.c_attn.bias", (3 * d,)).split(d)):
                out[q + f"attn.b_{name}"] = part.reshape(h, k)
            out[q + "attn.b_O"] = w.get(p + "attn.c_proj.bias", (d,))
            out[q + "mlp.b_in"] = w.get(p + "mlp.c_fc.bias", (m,))
            out[q + "mlp.b_out"] = w.get(p + "mlp.c_proj.bias", (d,))
    out["ln_final.w"] = w.get("ln_f.weight", (d,))
    out["ln_final.b"] = vec("ln_f.bias", d)
    return out


def config_from_hf(hf: dict, label: str) -> Config:
    """The :class:`Config` of a Hugging Face GPT-2 ``config.json`` (not yet validated).

    Raises:
        CheckpointError: a field of the wrong type, options this project does not reproduce (unscaled
            attention, scaling by layer index).
    """
    if not opt_bool(hf, "scale_attn_weights", True, label) or opt_bool(hf, "scale_attn_by_inverse_layer_idx", False, label):
        raise CheckpointError(f"{label}: GPT-2 attention scaling options other than 1/sqrt(d_head) are not supported")
    d, h = require_int(hf, "n_embd", label), require_int(hf, "n_head", label)
    if d % h:
        raise CheckpointError(f"{label}: n_embd ({d}) is not a multiple of n_head ({h})")
    return Config(n_layers=require_int(hf, "n_layer", label), d_model=d, n_heads=h, d_head=d // h,
                  d_mlp=opt_int(hf, "n_inner", None, label) or 4 * d, d_vocab=require_int(hf, "vocab_size", label),
                  n_ctx=require_int(hf, "n_positions", label), positional="learned", norm="layernorm",
                  norm_placement="pre", mlp=activation(hf.get("activation_function", "gelu_new"), label), causal=True,
                  tied_embeddings=opt_bool(hf, "tie_word_embeddings", True, label), final_norm=True,
                  layer_norm_eps=opt_float(hf, "layer_norm_epsilon", 1e-5, label), family="gpt2")


def from_hf(hf: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """Hugging Face GPT-2 (``GPT2Model`` or ``GPT2LMHeadModel`` weights).

    Raises:
        CheckpointError: as :func:`config_from_hf`; an invalid config or one above the memory cap; missing or
            mis-shaped weights.
    """
    cfg = check_config(config_from_hf(hf, label), label)
    w = Weights(state, label, ("transformer.",))
    out = _convert(w, cfg, linear=False, bias=True)
    if not cfg.tied_embeddings:
        out["W_U"] = w.get("lm_head.weight", (cfg.d_vocab, cfg.d_model)).T
    return cfg, out


def config_from_nanogpt(args: dict, label: str) -> Config:
    """The :class:`Config` of nanoGPT's ``model_args`` (not yet validated).

    Raises:
        CheckpointError: missing or mistyped fields (``bias`` must be true or false).
    """
    d, h = require_int(args, "n_embd", label), require_int(args, "n_head", label)
    if d % h:
        raise CheckpointError(f"{label}: n_embd ({d}) is not a multiple of n_head ({h})")
    bias = opt_bool(args, "bias", True, label)
    return Config(n_layers=require_int(args, "n_layer", label), d_model=d, n_heads=h, d_head=d // h, d_mlp=4 * d,
                  d_vocab=require_int(args, "vocab_size", label), n_ctx=require_int(args, "block_size", label),
                  positional="learned", norm_placement="pre", mlp="gelu", causal=True, tied_embeddings=True,
                  final_norm=True, layer_norm_eps=1e-5, attn_bias=bias, mlp_bias=bias, family="nanogpt")


def from_nanogpt(args: dict, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """nanoGPT's ``ckpt.pt``: ``model_args`` (n_layer, n_head, n_embd, block_size, bias, vocab_size) and
    ``model`` (its state dict, possibly with the ``_orig_mod.`` prefix that ``torch.compile`` adds).

    Raises:
        CheckpointError: missing or mistyped model_args fields, a config above the memory cap, missing or
            mis-shaped weights.
    """
    cfg = check_config(config_from_nanogpt(args, label), label)
    w = Weights({k.removeprefix("_orig_mod.") if isinstance(k, str) else k: v for k, v in state.items()}, label,
                ("transformer.",))
    return cfg, _convert(w, cfg, linear=True, bias=cfg.attn_bias)
