"""What rotary positions (RoPE; Su et al., 2021) do, computed with the model's own rotation
(:mod:`viz_model.rotary`) and its recorded queries and keys (no Streamlit)."""

from __future__ import annotations

import math

import numpy as np
import torch

from viz_model.rotary import apply_rotary, rotary_angles


def angle_table(n_pos: int, d_head: int, base: float) -> np.ndarray:
    """Rotation angle ``pos * theta_i`` of every dimension pair, wrapped to ``[0, 2 pi)``:
    ``[n_pos, d_head / 2]`` radians."""
    return np.mod(rotary_angles(n_pos, d_head, base).numpy(), 2 * math.pi)


@torch.no_grad()
def relative_scores(q: np.ndarray, k: np.ndarray, base: float, max_delta: int) -> np.ndarray:
    """The scaled score ``rot(q, m) . rot(k, m - delta) / sqrt(d_head)`` of one (unrotated) query ``q`` and
    key ``k`` ``[d_head]`` placed ``delta = 0 .. max_delta - 1`` positions apart: ``[max_delta]``.

    It does not depend on ``m`` (the rotations compose to a rotation by ``delta``), so it is computed with the
    key at position 0 and the query at position ``delta``.
    """
    d_head = q.shape[-1]
    angles = rotary_angles(max_delta, d_head, base)  # [delta, d_head / 2]
    qs = apply_rotary(torch.tensor(q, dtype=torch.float32).expand(1, max_delta, 1, d_head), angles)[0, :, 0]
    k0 = torch.tensor(k, dtype=torch.float32)  # position 0: no rotation
    return (qs @ k0).numpy() / math.sqrt(d_head)
