"""QK attribution: why a head attends from one token to another, as a sum of (query source × key source) terms.

The score of head ``h`` in layer ``L`` at (query ``i``, key ``j``) is ``q_i · k_j / s`` (``s``: the layer's divisor,
:func:`viz_model.components.attn_divisor`) plus, in T5, a relative position bias. With the norm's scale frozen at its
value in this run (``blocks.{L}.ln1.hook_scale``, as TransformerLens' ``apply_ln_to_stack``), everything between the
residual stream and q or k is linear: LayerNorm's mean-centring (applied to each source), the product with ``w``,
``W_Q[h]`` / ``W_K[h // n_rep]`` (grouped- and multi-query attention), a q/k norm with its scale frozen too, and the
rotary rotation at the token's own position (partial under GPT-NeoX). The residual stream at both positions is a sum
of sources (:func:`viz_model.interventions.residual.residual_sources`), so ``q_i = Σ_a q_i^a + q_i^bias`` and
``k_j = Σ_b k_j^b + k_j^bias``, and the bilinear score splits exactly into ``Σ_{a,b} q_i^a · k_j^b / s``: one term
per pair, "bias" being what the norm's offset and ``b_Q`` / ``b_K`` add (the QK circuit of Elhage et al., 2021, "A
Mathematical Framework for Transformer Circuits", read through the residual stream's sources).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from viz_model.components import attn_divisor
from viz_model.model import VizTransformer
from viz_model.placement import weight
from viz_model.rotary import apply_rotary, rotary_angles, rotary_scale, scaled_freqs
from viz_model.interventions.residual import _through_norm, residual_sources, source_hooks

KEY_BLOCK_BYTES = 64 * 2**20  # qk_pattern_attribution: the key side's source vectors of one block of keys, at most
SOFTCAP_NOTE = ("this model soft-caps its attention scores (c·tanh(score / c), c = {cap:g}), which is not a sum: the "
                "terms split the score before the cap")


def qk_hooks(model: VizTransformer, layer: int) -> list[str]:
    """The hook names :func:`qk_attribution` reads for ``layer``: pass them as ``names_filter`` to ``run_with_cache``
    (add ``blocks.{layer}.attn.hook_pattern`` for :func:`qk_pattern_attribution`)."""
    names = source_hooks(model, layer)
    if model.blocks[layer].ln1 is not None:
        names.append(f"blocks.{layer}.ln1.hook_scale")
    if model.cfg.qk_norm != "none":
        names += [f"blocks.{layer}.attn.q_norm.hook_scale", f"blocks.{layer}.attn.k_norm.hook_scale"]
    return names


def check_qk_supported(model: VizTransformer, layer: int, head: int) -> None:
    """Raise ``ValueError`` (one line, for the page) when the score of ``(layer, head)`` is not a sum of source terms:
    post-LN models (each sub-layer's output is renormalised together with the stream, so no source keeps its own
    part), an embedding LayerNorm (BERT: the same at the input), clamped q and k (OLMoE's ``clip_qkv``), or a layer
    or head out of range. A parallel-residual block (GPT-NeoX) is supported: its attention reads ``resid_pre``
    through ``ln1``, as in a sequential pre-LN block (no supported family reads the query through another norm)."""
    cfg = model.cfg
    if not 0 <= layer < cfg.n_layers:
        raise ValueError(f"layer {layer} is outside [0, {cfg.n_layers})")
    if not 0 <= head < cfg.n_heads:
        raise ValueError(f"head {head} is outside [0, {cfg.n_heads})")
    if cfg.norm_placement == "post":
        raise ValueError("QK attribution needs a pre-LN model: in a post-LN model every sub-layer's output is "
                         "renormalised together with the stream, so the residual stream is not a sum of sources")
    if model.ln_embed is not None:
        raise ValueError("QK attribution is not defined with an embedding LayerNorm (it renormalises the input)")
    if cfg.clip_qkv is not None:
        raise ValueError("QK attribution is not defined when q and k are clamped (clip_qkv): a clamp is not linear")


def qk_note(model: VizTransformer) -> str | None:
    """One sentence to show beside the terms when they do not sum to the model's own score (Gemma 2's soft cap), else
    None."""
    cap = model.cfg.attn_softcap
    return None if cap is None else SOFTCAP_NOTE.format(cap=cap)


@dataclass
class QKTerms:
    """What :func:`qk_terms` computes: ``terms[a, b, p]`` is the part of the score (query ``query_pos``, key
    ``key_positions[p]``) that source ``query_sources[a]`` at the query and ``key_sources[b]`` at the key make, in
    score units (after the divisor, before a soft cap); ``rel_pos`` ``[P]`` is T5's relative position bias (else
    None). ``score()`` is their sum ``[P]``."""

    query_sources: list[str]
    key_sources: list[str]
    terms: torch.Tensor  # [n_query_sources, n_key_sources, P] float32
    rel_pos: torch.Tensor | None  # [P] float32

    def score(self) -> torch.Tensor:
        """``[P]``: the sum of the terms (and the relative position bias): the score before the mask and any cap."""
        total = self.terms.sum((0, 1))
        return total if self.rel_pos is None else total + self.rel_pos


def _side(model: VizTransformer, cache: Mapping[str, torch.Tensor], layer: int, head: int, positions: list[int],
          query: bool, device: torch.device) -> tuple[list[str], torch.Tensor]:
    """Every source's part of q (``query``) or k at ``positions``: ``(names + ["bias"], [S + 1, P, d_head])``."""
    cfg, block = model.cfg, model.blocks[layer]
    attn = block.attn
    names, vectors = residual_sources(model, cache, positions, layer, device)  # [S, P, d_model]
    idx = torch.as_tensor(positions, dtype=torch.long)
    ln = block.ln1
    if ln is not None:
        scale = cache[f"blocks.{layer}.ln1.hook_scale"][0][idx].float().to(device)  # [P, 1]
        vectors = _through_norm(vectors, ln, scale)
        const = weight(ln, "b").float().to(device) if hasattr(ln, "b") else torch.zeros(cfg.d_model, device=device)
    else:
        const = torch.zeros(cfg.d_model, device=device)
    h = head if query else cfg.kv_head(head)
    W = weight(attn, "W_Q" if query else "W_K")[h].float().to(device)  # [d_model, d_head]
    b = weight(attn, "b_Q" if query else "b_K")
    parts = torch.cat([vectors @ W, (const @ W).expand(1, len(positions), -1)])  # [S + 1, P, d_head]
    if b is not None:
        parts[-1] += b[h].float().to(device)
    if cfg.qk_norm != "none":
        qk_norm = attn.q_norm if query else attn.k_norm
        scale = cache[f"blocks.{layer}.attn.{'q' if query else 'k'}_norm.hook_scale"][0][idx].float().to(device)
        scale = scale[:, h if qk_norm.per_head else 0, 0]  # [P]: per head, or one over all heads of the position
        w = weight(qk_norm, "w").float().to(device)
        w = w if qk_norm.per_head else w.view(-1, cfg.d_head)[h]
        parts = parts / scale[None, :, None] * w
    if cfg.positional == "rotary":
        layer_cfg = attn.cfg
        n = cache["hook_embed"].shape[1]
        angles = rotary_angles(n, layer_cfg.d_rotary, layer_cfg.rotary_base, 0, scaled_freqs(layer_cfg, n))[idx]
        parts = apply_rotary(parts[:, :, None], angles.to(device), rotary_scale(layer_cfg))[:, :, 0]
    return names + ["bias"], parts


@torch.no_grad()
def qk_terms(model: VizTransformer, cache: Mapping[str, torch.Tensor], layer: int, head: int, query_pos: int,
             key_positions: Sequence[int]) -> QKTerms:
    """Every (query source × key source) term of the scores of head ``head`` in layer ``layer`` from ``query_pos`` to
    each of ``key_positions`` (``P`` positions; negative ones count from the end): see :class:`QKTerms`.

    Raises:
        ValueError: an unsupported model (:func:`check_qk_supported`), a position out of range.
        KeyError: a hook of :func:`qk_hooks` missing from the cache.
    """
    check_qk_supported(model, layer, head)
    n = cache["hook_embed"].shape[1]
    keys = list(key_positions)
    for p in [query_pos, *keys]:
        if not -n <= p < n:
            raise ValueError(f"position {p} is outside the {n} positions of the text")
    query_pos, keys = query_pos % n, [p % n for p in keys]
    device = model.device
    q_names, q = _side(model, cache, layer, head, [query_pos], True, device)  # [Sq, 1, d_head]
    k_names, k = _side(model, cache, layer, head, keys, False, device)  # [Sk, P, d_head]
    terms = torch.einsum("ad,bpd->abp", q[:, 0], k) / attn_divisor(model.blocks[layer].attn.cfg)
    rel = model.blocks[layer].attn.rel_pos
    rel_pos = None
    if rel is not None:  # T5: W_rel at the bucket of each (query, key) distance, the same for every source
        rel_pos = rel.bias(n, n)[head, query_pos][torch.as_tensor(keys, device=rel.W_rel.device)].float().to(device)
    return QKTerms(q_names, k_names, terms.cpu(), None if rel_pos is None else rel_pos.cpu())


def _as_dict(terms: torch.Tensor, q_names: list[str], k_names: list[str], rel_pos: float | None) -> dict:
    values = terms.tolist()
    out = {(a, b): values[i][j] for i, a in enumerate(q_names) for j, b in enumerate(k_names)}
    if rel_pos is not None:
        out[("rel_pos", "rel_pos")] = rel_pos
    return out


def qk_attribution(model: VizTransformer, cache: Mapping[str, torch.Tensor], layer: int, head: int, query_pos: int,
                   key_pos: int) -> dict[tuple[str, str], float]:
    """The score of head ``head`` in layer ``layer`` at (``query_pos``, ``key_pos``), split into one term per (query
    source, key source).

    The score is ``blocks.{layer}.attn.hook_attn_scores[0, head, query_pos, key_pos]`` before the mask (a key the mask
    hides gets its terms too) and, under a soft cap (Gemma 2, see :func:`qk_note`), before the cap: ``q · k / s``
    (``s`` the layer's divisor, scores units) plus T5's relative position bias.

    Args:
        cache: from ``model.run_with_cache(tokens)`` (batch row 0 is used), holding :func:`qk_hooks` ``(model, layer)``.
        query_pos, key_pos: positions in the text (negative ones count from the end).

    Returns:
        ``{(query source, key source): value}``. Sources as in
        :func:`viz_model.interventions.attribution.direct_logit_attribution`: ``embed``, ``pos_embed``,
        ``token_type_embed``, ``L{l}H{h}``, ``L{l}.attn_bias``, ``L{l}X{h}``, ``L{l}.cross_attn_bias``, ``L{l}.mlp``
        for every ``l < layer``, and ``bias`` (the norm's offset ``b`` and ``b_Q`` on the query side, ``b`` and
        ``b_K`` on the key side); plus ``("rel_pos", "rel_pos")`` for T5. The values sum to the score within
        1e-4 × max(1, |score|) in float32.

    Raises:
        ValueError: a post-LN model, an embedding LayerNorm, clamped q/k (:func:`check_qk_supported`), a layer,
            head or position out of range.
        KeyError: a hook missing from the cache.
    """
    t = qk_terms(model, cache, layer, head, query_pos, [key_pos])
    return _as_dict(t.terms[:, :, 0], t.query_sources, t.key_sources,
                    None if t.rel_pos is None else float(t.rel_pos[0]))


@torch.no_grad()
def qk_pattern_attribution(model: VizTransformer, cache: Mapping[str, torch.Tensor], layer: int, head: int,
                           query_pos: int) -> dict[tuple[str, str], float]:
    """Which sources drive the head's pattern for one query: each (query source, key source) term averaged over the
    keys the query sees, weighted by the attention the query gives them, ``Σ_j pattern[query_pos, j] · term_j(a, b)``.

    Shapes: ``blocks.{layer}.attn.hook_pattern`` ``[batch, head_index, query_pos, key_pos]`` (row 0, this head and
    query: ``[key_pos]``) weights the ``[n_query_sources, n_key_sources, key_pos]`` terms of :func:`qk_terms` over all
    keys, computed a block of keys at a time (:data:`KEY_BLOCK_BYTES` of source vectors); keys the mask hides have
    weight 0 and are skipped. Values are in score units; they sum to the pattern-weighted mean score
    (before a soft cap) of the keys the query sees.

    Args:
        cache: as :func:`qk_attribution`, with ``blocks.{layer}.attn.hook_pattern`` too.

    Returns:
        ``{(query source, key source): value}`` with the keys of :func:`qk_attribution`.

    Raises:
        ValueError: as :func:`qk_attribution`.
        KeyError: as :func:`qk_attribution`.
    """
    n = cache["hook_embed"].shape[1]
    p = cache[f"blocks.{layer}.attn.hook_pattern"][0, head, query_pos % n].float().cpu()  # [key_pos]
    keys = [j for j in range(n) if p[j] != 0]  # keys the mask hides add nothing
    # the key side holds [sources, keys, d_model] floats: a block of keys at a time keeps it within KEY_BLOCK_BYTES
    n_sources = 3 + layer * (model.cfg.n_heads + 2) * (2 if model.blocks[0].has_cross else 1)
    block = max(1, KEY_BLOCK_BYTES // (4 * n_sources * model.cfg.d_model))
    total, rel, names = None, None, None
    for start in range(0, len(keys), block):
        part = keys[start:start + block]
        t = qk_terms(model, cache, layer, head, query_pos, part)
        weighted = t.terms @ p[part]
        total = weighted if total is None else total + weighted
        if t.rel_pos is not None:
            rel = (rel or 0.0) + float(t.rel_pos @ p[part])
        names = (t.query_sources, t.key_sources)
    return _as_dict(total, *names, rel)
