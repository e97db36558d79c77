"""What rotary positions (RoPE; Su et al., 2021) do, computed with the model's own rotation
(:mod:`viz_model.rotary`) and its recorded queries and keys (no Streamlit)."""

from __future__ import annotations

import math

import numpy as np
import torch

from viz_model.components import scale_scores
from viz_model.rotary import apply_rotary, rotary_angles, scaled_freqs


def angle_table(n_pos: int, d_head: int, base: float, cfg=None) -> np.ndarray:
    """Rotation angle ``pos * theta_i`` of every dimension pair, wrapped to ``[0, 2 pi)``:
    ``[n_pos, d_head / 2]`` radians; with ``cfg`` (a model's or layer's Config) the frequencies that model really
    uses (:func:`viz_model.rotary.scaled_freqs`: partial rotary, linear or llama3 scaling), ``[n_pos, d_rotary / 2]``."""
    freqs = None if cfg is None else scaled_freqs(cfg)
    return np.mod(rotary_angles(n_pos, d_head, base, freqs=freqs).numpy(), 2 * math.pi)


@torch.no_grad()
def relative_scores(q: np.ndarray, k: np.ndarray, base: float, max_delta: int, cfg=None) -> np.ndarray:
    """The scaled score ``rot(q, m) . rot(k, m - delta) / sqrt(d_head)`` of one (unrotated) query ``q`` and
    key ``k`` ``[d_head]`` placed ``delta = 0 .. max_delta - 1`` positions apart: ``[max_delta]``. With ``cfg``
    (the layer's Config) the layer's own rotation, divisor and soft cap
    (:func:`viz_model.components.scale_scores`) are used, as its forward pass does.

    It does not depend on ``m`` (the rotations compose to a rotation by ``delta``), so it is computed with the
    key at position 0 and the query at position ``delta``.
    """
    d_head = q.shape[-1]
    freqs = None if cfg is None else scaled_freqs(cfg)
    angles = rotary_angles(max_delta, d_head, base, freqs=freqs)  # [delta, d_rotary / 2]
    qs = apply_rotary(torch.tensor(q, dtype=torch.float32).expand(1, max_delta, 1, d_head), angles)[0, :, 0]
    k0 = torch.tensor(k, dtype=torch.float32)  # position 0: no rotation
    if cfg is None:
        return (qs @ k0).numpy() / math.sqrt(d_head)
    return scale_scores(qs @ k0, cfg).numpy()
