"""One attention head, step by step: every intermediate number of ``softmax(q k^T / sqrt(d_k)) v``.

All values come from the trace of the running model (its hooks) or from its weights; the few values
no hook records (the unscaled dot products, the per-head output before summing) are exact functions
of recorded ones. Formulas: Vaswani et al. (2017), "Attention Is All You Need", sections 3.2.1-3.2.2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from viz_model import VizTransformer
from viz_model.components import attn_divisor
from viz_model.placement import weight

from viz_ui.analysis.text_trace import Trace


@dataclass
class HeadSteps:
    """The arithmetic of head ``head`` of layer ``layer`` for the query at position ``query``."""

    layer: int
    head: int
    query: int
    d_head: int
    x: np.ndarray  # [pos, d_model] the attention input (LayerNorm output for pre-LN)
    W_Q: np.ndarray  # [d_model, d_head] this head's slice
    W_K: np.ndarray
    W_V: np.ndarray
    q: np.ndarray  # [pos, d_head] = x W_Q + b_Q (hook_q; after rotation, hook_rot_q, in rotary models)
    k: np.ndarray  # [pos, d_head] (hook_k of this head's key/value head; hook_rot_k in rotary models)
    v: np.ndarray  # [pos, d_head] (hook_v of this head's key/value head)
    dots: np.ndarray  # [key_pos] q_query . k_j, before scaling and masking
    scaled: np.ndarray  # [key_pos] dots / sqrt(d_head) (or the model's own divisor, attn_scale)
    scores: np.ndarray  # [key_pos] after the mask (-inf for j > query when causal) (hook_attn_scores)
    weights: np.ndarray  # [key_pos] softmax(scores) (hook_pattern)
    z: np.ndarray  # [d_head] sum_j weights_j v_j (hook_z)
    z_all: np.ndarray  # [n_heads * d_head] every head's z at this query, concatenated
    W_O: np.ndarray  # [n_heads * d_head, d_model]
    head_out: np.ndarray  # [d_model] this head's part: z W_O[head]
    attn_out: np.ndarray  # [d_model] concat(z) W_O + b_O (hook_attn_out)
    resid_pre: np.ndarray  # [d_model] the residual stream before the block
    resid_mid: np.ndarray  # [d_model] after adding attn_out (before LayerNorm in post-LN models)
    kv_head: int = 0  # the key/value head this query head reads (grouped-query attention)
    rotated: bool = False  # q and k are shown after the rotary rotation
    capped: np.ndarray | None = None  # [key_pos] cap * tanh(scaled / cap) when the model soft-caps scores (Gemma 2)
    divisor: float = 0.0  # what q.k is divided by (sqrt(d_head) unless the config sets attn_scale)
    rel_bias: np.ndarray | None = None  # [key_pos] T5's relative position bias for this head and query (rel_pos.hook_bias)


    @property
    def norms(self) -> dict[str, float]:
        """L2 norms of this head's part, attn_out, resid_pre and resid_pre + attn_out."""
        return {name: float(np.linalg.norm(v)) for name, v in (
            ("this head's part", self.head_out), ("attn_out", self.attn_out), ("resid_pre", self.resid_pre),
            ("resid_pre + attn_out", self.resid_mid))}


def _np(t) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def head_steps(model: VizTransformer, trace: Trace, layer: int, head: int, query: int) -> HeadSteps:
    """Collect :class:`HeadSteps` from ``trace`` (recorded hooks) and ``model`` (weights).

    Raises:
        IndexError: for a layer, head or query position out of range.
    """
    cfg = model.cfg
    if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads and 0 <= query < trace.n_tokens):
        raise IndexError(f"layer {layer}, head {head}, query {query} out of range")
    a, p = trace.arrays, f"blocks.{layer}."
    attn = model.blocks[layer].attn
    x = a[p + "ln1.hook_normalized"] if cfg.input_norm else a[p + "hook_resid_pre"]
    q, k, v, g = _qkv(trace, cfg, layer, head)
    dots = k @ q[query]
    divisor, cap = attn_divisor(cfg), cfg.attn_softcap
    z_all = a[p + "attn.hook_z"][query].reshape(-1)
    W_O = _np(weight(attn, "W_O")).reshape(cfg.n_heads * cfg.d_head, cfg.d_model)
    return HeadSteps(
        layer=layer, head=head, query=query, d_head=cfg.d_head, x=x,
        W_Q=_np(weight(attn, "W_Q")[head]), W_K=_np(weight(attn, "W_K")[g]), W_V=_np(weight(attn, "W_V")[g]), q=q, k=k, v=v,
        dots=dots, scaled=dots / divisor, divisor=divisor,
        capped=None if cap is None else cap * np.tanh(dots / divisor / cap),
        scores=a[p + "attn.hook_attn_scores"][head, query], weights=a[p + "attn.hook_pattern"][head, query],
        z=a[p + "attn.hook_z"][query, head], z_all=z_all, W_O=W_O,
        head_out=z_all[head * cfg.d_head:(head + 1) * cfg.d_head] @ W_O[head * cfg.d_head:(head + 1) * cfg.d_head],
        attn_out=a[p + "hook_attn_out"][query], resid_pre=a[p + "hook_resid_pre"][query],
        resid_mid=(a[p + "hook_resid_pre"][query] + a[p + "hook_attn_out"][query]),
        kv_head=g, rotated=cfg.positional == "rotary",
        rel_bias=a["rel_pos.hook_bias"][head, query] if cfg.rel_pos_buckets else None,
    )


def _qkv(trace: Trace, cfg, layer: int, head: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """This head's q, k, v ``[pos, d_head]`` as the dot product uses them (after rotary rotation), and the
    index of its key/value head (``head // (n_heads / n_kv_heads)``)."""
    a, p, g = trace.arrays, f"blocks.{layer}.attn.", cfg.kv_head(head)
    rot = "rot_" if cfg.positional == "rotary" else ""
    return a[p + f"hook_{rot}q"][:, head], a[p + f"hook_{rot}k"][:, g], a[p + "hook_v"][:, g], g


def unmasked_view(trace: Trace, cfg, layer: int, head: int) -> tuple[np.ndarray, np.ndarray]:
    """One head's scores and pattern as they would be without the causal mask (``cfg``: the model's Config).

    ``scores = q k^T / sqrt(d_head)`` (the model's divisor and soft cap, when it has them) for every (query, key)
    pair, from the recorded q and k (rotated, in rotary models; the head's key/value head under grouped-query
    attention), and ``softmax(scores)`` over all keys. Returns two ``[query_pos, key_pos]`` arrays.
    """
    q, k, _, _ = _qkv(trace, cfg, layer, head)
    scores = q @ k.T / attn_divisor(cfg)
    if cfg.attn_softcap is not None:
        scores = cfg.attn_softcap * np.tanh(scores / cfg.attn_softcap)
    if cfg.rel_pos_buckets:  # T5: the decoder's relative position bias, as the forward pass adds it
        scores = scores + trace.arrays["rel_pos.hook_bias"][head]
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return scores, e / e.sum(-1, keepdims=True)


def future_share(pattern: np.ndarray) -> float:
    """Mean over queries of the weight a ``[query_pos, key_pos]`` pattern puts on later keys (above the diagonal)."""
    return float(np.triu(pattern, 1).sum(-1).mean())


def largest_weights(s: HeadSteps, k: int = 15) -> np.ndarray:
    """Key positions with the largest weights for the query (visible keys only), largest first."""
    visible = np.flatnonzero(np.isfinite(s.scores))
    return visible[np.argsort(-s.weights[visible], kind="stable")][:k]


def value_contributions(s: HeadSteps) -> np.ndarray:
    """``w_j v_j`` for every key position ``[key_pos, d_head]``; their sum over j is ``z``."""
    return s.weights[:, None] * s.v
