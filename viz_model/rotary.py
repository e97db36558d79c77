"""Rotary position embeddings (RoPE; Su et al., 2021, "RoFormer", section 3.4).

Instead of adding a vector to the input, RoPE rotates each query and key: dimension pairs
``(x_i, x_{i + d_head/2})`` are turned by the angle ``pos * theta_i`` with
``theta_i = base^(-2i / d_head)``. Because a rotation by ``m`` then by ``-n`` is a rotation by ``m - n``,
``q_m . k_n`` depends on the tokens and on their distance ``m - n`` only. The pairing (first half with
second half, "rotate_half") is the one of GPT-NeoX and of transformers' Llama implementation.
"""

from __future__ import annotations

import torch


def rotary_freqs(d_head: int, base: float) -> torch.Tensor:
    """``theta_i = base^(-2i / d_head)`` for ``i = 0 .. d_head/2 - 1``: ``[d_head / 2]`` float32, radians per position."""
    return 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.int64).float() / d_head))


def rotary_angles(n_pos: int, d_head: int, base: float, offset: int = 0) -> torch.Tensor:
    """Angles ``pos * theta_i`` for positions ``offset .. offset + n_pos - 1``: ``[n_pos, d_head / 2]`` radians."""
    pos = torch.arange(offset, offset + n_pos, dtype=torch.float32)
    return pos[:, None] * rotary_freqs(d_head, base)[None, :]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the last axis (halves of ``d_head``)."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate queries or keys ``x`` ``[batch, pos, head_index, d_head]`` by ``angles`` ``[pos, d_head / 2]``.

    ``x * cos + rotate_half(x) * sin`` with cos and sin repeated over both halves (transformers'
    ``apply_rotary_pos_emb``).
    """
    emb = torch.cat([angles, angles], dim=-1)[None, :, None, :]
    return x * emb.cos().to(x.dtype) + rotate_half(x) * emb.sin().to(x.dtype)
