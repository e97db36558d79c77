"""Direct logit attribution: how much each component writes, directly, into one logit.

In a pre-LN model the final residual stream is a sum: ``resid = embed + pos_embed + Σ_layers (attn_out + mlp_out)``
(Elhage et al., 2021, "A Mathematical Framework for Transformer Circuits"), and each layer's attention output is
itself ``Σ_h z_h W_O[h] + b_O``. The final norm is linear once its scale is frozen at its value in this run
(TransformerLens' ``apply_ln_to_stack``): LayerNorm ``(x - mean(x)) / scale * w + b``, RMSNorm ``x / scale * w``.
So the logit ``logits[0, pos, t]`` splits exactly into one term per component plus a constant (the final norm's
``b`` and the unembedding bias ``b_U`` read through ``W_U[:, t]``).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.model import VizTransformer
from viz_model.placement import weight
from viz_model.interventions.qk import (QKTerms, check_qk_supported, qk_attribution, qk_hooks, qk_note, qk_pattern_attribution,  # noqa: F401
                 qk_terms)  # viz_model.attribution.qk_*: QK attribution lives in .qk, reached from here as the issue names it
from viz_model.interventions.residual import residual_sources, source_hooks


def attribution_hooks(model: VizTransformer) -> list[str]:
    """The hook names :func:`direct_logit_attribution` reads: pass them as ``names_filter`` to ``run_with_cache``."""
    return source_hooks(model) + (["ln_final.hook_scale"] if model.ln_final is not None else [])


def check_supported(model: VizTransformer) -> None:
    """Raise ``ValueError`` (one line, for the page) when the logit is not a sum of component terms for this model:
    post-LN (every sub-layer's output is renormalised), an embedding LayerNorm, a masked-LM head (a non-linear
    transform before the unembedding), or no language-model head."""
    cfg = model.cfg
    if not model.has_lm_head:
        raise ValueError("this model has no language-model head, so there is no logit to attribute")
    if cfg.norm_placement != "pre":
        raise ValueError("direct logit attribution needs a pre-LN model: in a post-LN model every sub-layer's output is "
                         "renormalised, so the final residual stream is not a sum of the components' outputs")
    if model.ln_embed is not None:
        raise ValueError("direct logit attribution is not defined with an embedding LayerNorm (it renormalises the input)")
    if model.mlm_head is not None:
        raise ValueError("direct logit attribution is not defined through a masked-LM head (a non-linear transform "
                         "before the unembedding)")


@torch.no_grad()
def direct_logit_attribution(model: VizTransformer, cache: Mapping[str, torch.Tensor], token_id: int,
                             pos: int = -1) -> dict[str, float]:
    """The direct contribution of every component to ``logits[0, pos, token_id]``.

    Args:
        cache: from ``model.run_with_cache(tokens)`` (batch row 0 is used), holding :func:`attribution_hooks`.
        token_id: the output token whose logit is split.
        pos: the position (``-1`` = last).

    Returns:
        ``{component: logit units}`` in the order of the forward pass: ``embed``, ``pos_embed`` (learned or
        sinusoidal positions), ``token_type_embed`` (segment embeddings), then per layer ``L{l}H{h}`` for each
        self-attention head, ``L{l}.attn_bias`` (``b_O``, where the model has one), ``L{l}X{h}`` and
        ``L{l}.cross_attn_bias`` for cross-attention (encoder-decoder models; the encoder reaches the logit only
        through these), ``L{l}.mlp`` (the whole feed-forward output, every expert of a mixture included), and
        ``bias`` for the constant rest (final norm bias and ``b_U``). The values sum to the logit.

    Raises:
        ValueError: a model for which the split does not exist (see :func:`check_supported`), a token id or
            position out of range.
        KeyError: a hook missing from the cache.
    """
    check_supported(model)
    cfg = model.cfg
    if not 0 <= token_id < cfg.d_vocab:
        raise ValueError(f"token id {token_id} is outside the vocabulary [0, {cfg.d_vocab})")
    n_pos = cache["hook_embed"].shape[1]
    if not -n_pos <= pos < n_pos:
        raise ValueError(f"position {pos} is outside the {n_pos} positions of the text")
    direction = model.W_unembed[:, token_id].float()  # [d_model]
    ln = model.ln_final
    centre = ln is not None and hasattr(ln, "b")  # LayerNorm centres and has a bias; RMSNorm does neither
    if ln is not None:
        scale = cache["ln_final.hook_scale"][0, pos].float()  # [1], frozen at its value in this run
        direction = direction * weight(ln, "w").float().to(direction.device) / scale.to(direction.device)

    names, vectors = residual_sources(model, cache, [pos % n_pos], device=direction.device)  # [S, 1, d_model]
    if centre:
        vectors = vectors - vectors.mean(-1, keepdim=True)
    out = dict(zip(names, (vectors[:, 0] @ direction).tolist()))
    bias = 0.0
    if ln is not None and centre:
        unembed = model.W_unembed[:, token_id].float()
        bias += float(weight(ln, "b").float().to(unembed.device) @ unembed)
    if model.b_U is not None:
        bias += float(weight(model, "b_U")[token_id])
    out["bias"] = bias
    return out
