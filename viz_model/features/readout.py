"""What a dictionary says about a text: feature activations, reconstruction error, and a feature's readouts
(the tokens its decoder direction promotes, the heads that write to it). Torch only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from viz_model.model import VizTransformer
from viz_model.features.dictionary import SparseDictionary
from viz_model.placement import weight

RESID = re.compile(r"^blocks\.(\d+)\.hook_resid_(pre|mid|post)$")
LN2 = re.compile(r"^blocks\.(\d+)\.ln2\.hook_normalized$")


def _tokens(tokens: torch.Tensor) -> torch.Tensor:
    tokens = torch.as_tensor(tokens, dtype=torch.int64)
    if tokens.ndim == 1:
        tokens = tokens[None]
    if tokens.ndim != 2 or tokens.shape[0] != 1 or tokens.shape[1] == 0:
        raise ValueError(f"tokens must be [pos] or [1, pos] with pos >= 1, got shape {tuple(tokens.shape)}")
    return tokens


@torch.no_grad()
def hook_values(model: VizTransformer, tokens: torch.Tensor, dictionary: SparseDictionary
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)``: the activation the dictionary reads ``[pos, d_in]`` and the one it reconstructs / predicts
    ``[pos, d_out]`` (the same tensor for an SAE), float32 on the CPU whatever the model's device, for one text
    ``tokens`` ``[pos]`` or ``[1, pos]``.

    Raises:
        KeyError: a hook the model does not have.
        ValueError: bad tokens, or widths that do not match the dictionary.
    """
    tokens = _tokens(tokens)
    names = list(dict.fromkeys([dictionary.hook_name, dictionary.out_hook]))
    _, cache = model.run_with_cache(tokens, names_filter=names)
    x, y = cache[dictionary.hook_name][0].float().cpu(), cache[dictionary.out_hook][0].float().cpu()
    if x.shape[-1] != dictionary.d_in or y.shape[-1] != dictionary.d_out:
        raise ValueError(f"the dictionary reads width {dictionary.d_in} and writes {dictionary.d_out}, the model's hooks "
                         f"have {x.shape[-1]} and {y.shape[-1]}")
    return x, y


def feature_acts(model: VizTransformer, tokens: torch.Tensor, dictionary: SparseDictionary) -> torch.Tensor:
    """Every feature's activation at every position: ``dictionary.encode`` of its hook's value, ``[pos, d_sae]``
    float32 (>= 0), for ``tokens`` ``[pos]`` or ``[1, pos]``.

    Raises:
        KeyError / ValueError: as :func:`hook_values`.
    """
    x, _ = hook_values(model, tokens, dictionary)
    with torch.no_grad():
        return dictionary.encode(x).float()


@dataclass
class Reconstruction:
    """A dictionary's reconstruction of one text. ``target`` ``[pos, d_out]``: the hook's value (SAE) or the MLP's
    output (transcoder); ``recon``: ``decode(encode(x))``; ``error = target - recon`` (so ``target = recon + error``
    exactly in float32); ``fvu``: fraction of variance unexplained ``sum ||error||^2 / sum ||target - mean(target)||^2``
    over all positions (1 - SAELens's pooled explained variance; Gao et al. 2024 report normalised MSE, the same
    ratio with the mean taken over the dataset); ``l0`` ``[pos]``: active features per position."""
    target: torch.Tensor
    recon: torch.Tensor
    error: torch.Tensor
    acts: torch.Tensor
    fvu: float
    l0: torch.Tensor


def fvu(target: torch.Tensor, recon: torch.Tensor) -> float:
    """``sum ||target - recon||^2 / sum ||target - mean(target)||^2`` over the rows of ``[n, d]`` tensors
    (NaN for fewer than 2 rows or constant targets)."""
    target, recon = target.double(), recon.double()
    den = (target - target.mean(0)).pow(2).sum()
    return float((target - recon).pow(2).sum() / den) if den > 0 else float("nan")


def reconstruction(model: VizTransformer, tokens: torch.Tensor, dictionary: SparseDictionary) -> Reconstruction:
    """The dictionary's reconstruction of ``tokens`` ``[pos]`` / ``[1, pos]`` (see :class:`Reconstruction`).

    Raises:
        KeyError / ValueError: as :func:`hook_values`.
    """
    x, y = hook_values(model, tokens, dictionary)
    with torch.no_grad():
        acts = dictionary.encode(x).float()
        recon = dictionary.decode(acts).float()
    return Reconstruction(y, recon, y - recon, acts, fvu(y, recon), (acts > 0).sum(-1))


def top_features(acts: torch.Tensor, n: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """Each position's ``n`` strongest features: ``(indices, values)``, both ``[pos, n]``, strongest first
    (inactive features have value 0 and come last), for ``acts`` ``[pos, d_sae]`` from :func:`feature_acts`."""
    top = acts.topk(min(n, acts.shape[-1]), dim=-1)
    return top.indices, top.values


def activation_histogram(values: torch.Tensor, bins: int = 30) -> tuple[torch.Tensor, torch.Tensor]:
    """``(counts [bins], edges [bins + 1])`` of a feature's *non-zero* activations (``values``: any shape), on
    equal bins from 0 to their maximum (torch.histc); empty counts when it never fires."""
    v = values.flatten().float()
    v = v[v > 0]
    top = float(v.max()) if len(v) else 1.0
    return torch.histc(v, bins, 0.0, top), torch.linspace(0.0, top, bins + 1)


def _final_norm_direction(model: VizTransformer, direction: torch.Tensor) -> torch.Tensor:
    norm = model.ln_final
    if norm is None:
        return direction
    d = direction - direction.mean(-1, keepdim=True) if hasattr(norm, "b") else direction
    return d * norm.w.detach().float().to(d.device)


@torch.no_grad()
def logit_effects(model: VizTransformer, dictionary: SparseDictionary, feature: int) -> torch.Tensor:
    """How feature ``feature``'s decoder direction ``W_dec[feature]`` moves each token's logit, ``[d_vocab]`` (on the
    CPU; computed on the model's device):
    ``(W_dec[feature] through the final norm's linear part) @ W_U`` — the final norm's *weight* is applied (and,
    for LayerNorm, its mean-centring, which is linear), its division by the scale is not (a positive number per
    position that rescales all logits alike, so the ranking holds) and its bias is left out (it does not depend on
    the feature). This is the direct path only (through no later layer), as in TransformerLens's ``fold_ln``
    convention and Neuronpedia's "top logits".

    Raises:
        ValueError: a model without an LM head, a decoder not of width ``d_model``, a feature out of range.
    """
    if not model.has_lm_head:
        raise ValueError("this model has no language-model head (no unembedding to read the direction through)")
    if dictionary.d_out != model.cfg.d_model:
        raise ValueError(f"the decoder writes width {dictionary.d_out}, not the residual stream's {model.cfg.d_model}")
    if not 0 <= feature < dictionary.d_sae:
        raise ValueError(f"no feature {feature}: the dictionary has {dictionary.d_sae}")
    w_u = model.W_unembed  # [d_model, d_vocab] on the model's device: the product is computed there
    direction = _final_norm_direction(model, dictionary.W_dec[feature].float().to(w_u.device))
    return (direction @ w_u.float()).cpu()


@torch.no_grad()
def top_promoted(model: VizTransformer, dictionary: SparseDictionary, features, n: int = 5) -> torch.Tensor:
    """``[len(features), n]`` int64: for each feature, the ``n`` tokens whose logits :func:`logit_effects` raises most
    (descending), computed for all the features in one matrix product.

    Raises:
        ValueError: as :func:`logit_effects`.
    """
    feats = torch.as_tensor(list(features), dtype=torch.long)
    if not model.has_lm_head or dictionary.d_out != model.cfg.d_model:
        raise ValueError("the decoder cannot be read through this model's unembedding")
    if len(feats) and (feats.min() < 0 or feats.max() >= dictionary.d_sae):
        raise ValueError(f"features must lie in [0, {dictionary.d_sae})")
    w_u = model.W_unembed
    directions = _final_norm_direction(model, dictionary.W_dec[feats].float().to(w_u.device))
    return (directions @ w_u.float()).topk(min(n, w_u.shape[-1]), dim=-1).indices.cpu()


def promoted_tokens(model: VizTransformer, dictionary: SparseDictionary, feature: int, n: int = 10
                    ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """``((ids, effects) promoted, (ids, effects) suppressed)``: the ``n`` tokens whose logits
    :func:`logit_effects` raises most (descending) and lowers most (most negative first)."""
    eff = logit_effects(model, dictionary, feature)
    up, down = eff.topk(n), (-eff).topk(n)
    return (up.indices, up.values), (down.indices, -down.values)


@torch.no_grad()
def head_contributions(model: VizTransformer, tokens: torch.Tensor, dictionary: SparseDictionary, feature: int,
                       position: int) -> torch.Tensor:
    """How much each attention head's output at ``position`` adds to feature ``feature``'s pre-activation,
    ``[n_layers, n_heads]`` (0 for heads after the hook): ``(z[pos, h] @ W_O[h]) . W_enc[:, feature]``, read from
    ``blocks.{l}.attn.hook_z``. The pre-activation is linear in the residual stream, so this is exact for a
    dictionary on ``hook_resid_pre/mid/post``; for a transcoder on ``ln2.hook_normalized`` the head's output goes
    through that norm with its scale frozen at the cached ``ln2.hook_scale`` (LayerNorm's centring is linear and
    applied per head; its bias and the dictionary's ``b_dec``/``b_enc`` belong to no head).

    Raises:
        ValueError: a hook other than those two kinds, a model other than pre-LN with sequential blocks
            (post-LN, output norms and parallel residuals do not add heads into that stream directly), a
            position or feature out of range.
    """
    cfg = model.cfg
    m_resid, m_ln2 = RESID.match(dictionary.hook_name), LN2.match(dictionary.hook_name)
    if not (m_resid or m_ln2):
        raise ValueError(f"head contributions need a dictionary on blocks.<l>.hook_resid_* or ln2.hook_normalized, "
                         f"not {dictionary.hook_name}")
    if cfg.norm_placement != "pre" or cfg.parallel_residual or getattr(cfg, "output_norm", False):
        raise ValueError("head contributions are exact only for pre-LN models with sequential blocks")
    if not 0 <= feature < dictionary.d_sae:
        raise ValueError(f"no feature {feature}: the dictionary has {dictionary.d_sae}")
    tokens = _tokens(tokens)
    if not -tokens.shape[1] <= position < tokens.shape[1]:
        raise ValueError(f"position {position} is outside the text's {tokens.shape[1]} tokens")
    layer = int((m_resid or m_ln2).group(1))
    last = layer - 1 if m_resid and m_resid.group(2) == "pre" else layer
    names = [f"blocks.{lay}.attn.hook_z" for lay in range(last + 1)]
    if m_ln2:
        names.append(f"blocks.{layer}.ln2.hook_scale")
    _, cache = model.run_with_cache(tokens, names_filter=names)
    w_enc = dictionary.W_enc[:, feature].float().cpu()
    if m_ln2:
        norm = model.blocks[layer].ln2
        scale = cache[f"blocks.{layer}.ln2.hook_scale"][0, position].float().cpu()
    out = torch.zeros(cfg.n_layers, cfg.n_heads)
    for lay in range(last + 1):
        z = cache[f"blocks.{lay}.attn.hook_z"][0, position].float().cpu()  # [n_heads, d_head]
        w_o = weight(model.blocks[lay].attn, "W_O").float().cpu()  # an offloaded block's too
        heads = torch.einsum("hk,hkd->hd", z, w_o)  # [n_heads, d_model]
        if m_ln2:
            heads = heads - heads.mean(-1, keepdim=True) if hasattr(norm, "b") else heads
            heads = heads / scale * weight(norm, "w").float().cpu()
        out[lay] = heads @ w_enc
    return out
