"""What rotary positions (RoPE; Su et al., 2021) do, computed with the model's own rotation
(:mod:`viz_model.rotary`) and its recorded queries and keys (no Streamlit)."""

from __future__ import annotations

import math

import numpy as np
import torch

from viz_model.components import scale_scores
from viz_model.rotary import apply_rotary, long_factors, rotary_angles, rotary_scale, scaled_freqs


def angle_table(n_pos: int, d_head: int, base: float, cfg=None) -> np.ndarray:
    """Rotation angle ``pos * theta_i`` of every dimension pair, wrapped to ``[0, 2 pi)``:
    ``[n_pos, d_head / 2]`` radians; with ``cfg`` (a model's or layer's Config) the frequencies that model really
    uses for a text of ``n_pos`` tokens (:func:`viz_model.rotary.scaled_freqs`: partial rotary, linear, llama3 or
    LongRoPE scaling), ``[n_pos, d_rotary / 2]``."""
    freqs = None if cfg is None else scaled_freqs(cfg, n_pos)
    return np.mod(rotary_angles(n_pos, d_head, base, freqs=freqs).numpy(), 2 * math.pi)


def longrope_words(cfg, n_pos: int) -> str:
    """What LongRoPE does to a text of ``n_pos`` tokens, in one sentence: which factor list it uses and why, their
    range, and the factor on cos and sin (:mod:`viz_model.rotary`); "" for any other scaling."""
    if cfg.rotary_scaling != "longrope":
        return ""
    long, ctx = long_factors(cfg, n_pos), cfg.rotary_original_ctx
    factors = cfg.rotary_long_factor if long else cfg.rotary_short_factor
    scale = rotary_scale(cfg)
    return (f"LongRoPE: each pair's θ_i is divided by a factor of its own (here from {min(factors):g} to "
            f"{max(factors):g}). This text has {n_pos:,} tokens, {'more than' if long else 'no more than'} the "
            f"{ctx:,} of the model's pre-training context, so it uses the {'long' if long else 'short'} factors; a text "
            f"of {'at most' if long else 'more than'} {ctx:,} tokens would use the {'short' if long else 'long'} ones. "
            f"cos and sin are also multiplied by {scale:.4g}, so the rotated part of q·k is {scale ** 2:.4g} times "
            "larger.")


@torch.no_grad()
def relative_scores(q: np.ndarray, k: np.ndarray, base: float, max_delta: int, cfg=None,
                    n_pos: int | None = None) -> np.ndarray:
    """The scaled score ``rot(q, m) . rot(k, m - delta) / sqrt(d_head)`` of one (unrotated) query ``q`` and
    key ``k`` ``[d_head]`` placed ``delta = 0 .. max_delta - 1`` positions apart: ``[max_delta]``. With ``cfg``
    (the layer's Config) the layer's own rotation, divisor and soft cap
    (:func:`viz_model.components.scale_scores`) are used, as its forward pass does; under LongRoPE with the
    frequencies and the cos/sin factor of a text of ``n_pos`` tokens.

    It does not depend on ``m`` (the rotations compose to a rotation by ``delta``), so it is computed with the
    key at position 0 and the query at position ``delta``.
    """
    d_head = q.shape[-1]
    freqs = None if cfg is None else scaled_freqs(cfg, n_pos)
    scale = 1.0 if cfg is None else rotary_scale(cfg)
    angles = rotary_angles(max_delta, d_head, base, freqs=freqs)  # [delta, d_rotary / 2]
    qs = apply_rotary(torch.tensor(q, dtype=torch.float32).expand(1, max_delta, 1, d_head), angles, scale)[0, :, 0]
    # position 0: no rotation, but LongRoPE's factor on cos and sin
    k0 = apply_rotary(torch.tensor(k, dtype=torch.float32).view(1, 1, 1, d_head), angles[:1], scale)[0, 0, 0]
    if cfg is None:
        return (qs @ k0).numpy() / math.sqrt(d_head)
    return scale_scores(qs @ k0, cfg).numpy()
