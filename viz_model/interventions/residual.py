"""The residual stream as a sum of named sources, the decomposition that direct logit attribution and QK attribution
share.

In a pre-LN model the residual stream entering block ``L`` is a sum (Elhage et al., 2021, "A Mathematical Framework
for Transformer Circuits"): ``resid_pre[L] = embed + pos_embed + token_type_embed + Σ_{l<L} (attn_out_l + mlp_out_l)``
(and ``cross_attn_out_l`` in a decoder of an encoder-decoder model), and each attention output is
``Σ_h z_h W_O[h] + b_O``. A sub-layer's output norm (Gemma 2's ``ln1_post``, OLMo2's) is linear once its scale is
frozen at its value in this run, as TransformerLens' ``apply_ln_to_stack`` freezes the final norm, so each head's part
stays a separate source through it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from viz_model.model import VizTransformer
from viz_model.placement import weight


def source_hooks(model: VizTransformer, layer: int | None = None) -> list[str]:
    """The hook names :func:`residual_sources` reads for the stream entering block ``layer`` (None: after the last
    block, what the final norm reads): pass them as ``names_filter`` to ``run_with_cache``."""
    names = ["hook_embed"]
    if model.cfg.positional in ("learned", "sinusoidal"):
        names.append("hook_pos_embed")
    if model.cfg.n_token_types:
        names.append("hook_token_type_embed")
    for l, block in enumerate(model.blocks[:layer]):
        names += [f"blocks.{l}.attn.hook_z", f"blocks.{l}.hook_mlp_out"]
        if getattr(block, "ln1_post", None) is not None:
            names.append(f"blocks.{l}.ln1_post.hook_scale")
        if block.has_cross:
            names.append(f"blocks.{l}.cross_attn.hook_z")
            if getattr(block, "ln_cross_post", None) is not None:
                names.append(f"blocks.{l}.ln_cross_post.hook_scale")
    return names


def _through_norm(vectors: torch.Tensor, norm: nn.Module | None, scale: torch.Tensor | None) -> torch.Tensor:
    """``vectors`` ``[..., P, d_model]`` through ``norm`` with its scale frozen at ``scale`` ``[P, 1]`` (LayerNorm:
    centred, divided, times ``w``; RMSNorm: divided, times ``w``); the norm's bias is not added (a constant)."""
    if norm is None:
        return vectors
    w = weight(norm, "w").float().to(vectors.device)
    if hasattr(norm, "b"):
        vectors = vectors - vectors.mean(-1, keepdim=True)
    return vectors / scale.float().to(vectors.device) * w


@torch.no_grad()
def residual_sources(model: VizTransformer, cache: Mapping[str, torch.Tensor], positions: Sequence[int],
                     layer: int | None = None, device: torch.device | str | None = None,
                     ) -> tuple[list[str], torch.Tensor]:
    """Every source's vector in the residual stream entering block ``layer`` at ``positions``.

    Args:
        cache: from ``model.run_with_cache`` (batch row 0 is used), holding :func:`source_hooks`.
        positions: ``P`` positions (non-negative).
        layer: ``0 <= layer <= n_layers``; None means ``n_layers`` (the stream the final norm reads).
        device: where the result lives (default: the token embedding's device).

    Returns:
        ``(names, vectors)``: ``vectors`` ``[S, P, d_model]`` float32, one row per name, in the order of the forward
        pass: ``embed``, ``pos_embed`` (learned or sinusoidal positions), ``token_type_embed`` (segment embeddings),
        then per layer ``l < layer``: ``L{l}H{h}`` for each self-attention head (``z_h W_O[h]``), ``L{l}.attn_bias``
        (``b_O``, where the model has one, and an output norm's bias), ``L{l}X{h}`` and ``L{l}.cross_attn_bias``
        for cross-attention, ``L{l}.mlp`` (``hook_mlp_out``, every expert of a mixture included). An output norm
        (sandwich or output-norm models) is applied to each head's part with its scale frozen at
        ``blocks.{l}.ln1_post.hook_scale``. In a pre-LN model (or one with output norms and no post-LN) the rows
        sum to ``blocks.{layer}.hook_resid_pre`` (to float32 rounding).

    Raises:
        KeyError: a hook missing from the cache.
    """
    cfg = model.cfg
    layer = cfg.n_layers if layer is None else layer
    device = model.device if device is None else torch.device(device)
    idx = torch.as_tensor(list(positions), dtype=torch.long)

    def at(name: str) -> torch.Tensor:  # [P, ...] float32 on device
        return cache[name][0][idx.to(cache[name].device)].float().to(device)

    names, rows = ["embed"], [at("hook_embed")]
    if cfg.positional in ("learned", "sinusoidal"):
        names.append("pos_embed")
        rows.append(at("hook_pos_embed"))
    if cfg.n_token_types:
        names.append("token_type_embed")
        rows.append(at("hook_token_type_embed"))
    for l, block in enumerate(model.blocks[:layer]):
        parts = [("H", block.attn, "attn", getattr(block, "ln1_post", None), "ln1_post")]
        if block.has_cross:
            parts.append(("X", block.cross_attn, "cross_attn", getattr(block, "ln_cross_post", None), "ln_cross_post"))
        for letter, attn, name, post, post_name in parts:
            z = at(f"blocks.{l}.{name}.hook_z")  # [P, n_heads, d_head]
            W_O = weight(attn, "W_O").float().to(device)  # [n_heads, d_head, d_model]
            heads = torch.einsum("phk,hkd->hpd", z, W_O)  # [n_heads, P, d_model]
            b_O = weight(attn, "b_O")
            bias = None if b_O is None else b_O.float().to(device).expand(len(idx), -1)
            if post is not None:
                scale = at(f"blocks.{l}.{post_name}.hook_scale")  # [P, 1]
                heads = _through_norm(heads, post, scale)
                bias = None if bias is None else _through_norm(bias, post, scale)
                if hasattr(post, "b"):
                    post_b = weight(post, "b").float().to(device).expand(len(idx), -1)
                    bias = post_b if bias is None else bias + post_b
            names += [f"L{l}{letter}{h}" for h in range(cfg.n_heads)]
            rows += list(heads)
            if bias is not None:
                names.append(f"L{l}.{name}_bias")
                rows.append(bias)
        names.append(f"L{l}.mlp")
        rows.append(at(f"blocks.{l}.hook_mlp_out"))
    return names, torch.stack(rows)
