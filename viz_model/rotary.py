"""Rotary position embeddings (RoPE; Su et al., 2021, "RoFormer", section 3.4).

Instead of adding a vector to the input, RoPE rotates each query and key: dimension pairs
``(x_i, x_{i + d_head/2})`` are turned by the angle ``pos * theta_i`` with
``theta_i = base^(-2i / d_head)``. Because a rotation by ``m`` then by ``-n`` is a rotation by ``m - n``,
``q_m . k_n`` depends on the tokens and on their distance ``m - n`` only. The pairing (first half with
second half, "rotate_half") is the one of GPT-NeoX and of transformers' Llama implementation.
"""

from __future__ import annotations

import math

import torch


def rotary_freqs(d_head: int, base: float) -> torch.Tensor:
    """``theta_i = base^(-2i / d_head)`` for ``i = 0 .. d_head/2 - 1``: ``[d_head / 2]`` float32, radians per position."""
    return 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.int64).float() / d_head))


def long_factors(cfg, n_pos: int | None) -> bool:
    """Whether LongRoPE uses its long factors for a sequence of ``n_pos`` positions (the longest position + 1, the
    cached ones included): when ``n_pos > rotary_original_ctx``, as transformers' ``longrope_frequency_update``
    decides on every forward pass (``seq_len = max(position_ids) + 1``). ``n_pos`` None: the short ones, as
    transformers' initial frequencies. False for every other scaling."""
    return cfg.rotary_scaling == "longrope" and n_pos is not None and n_pos > cfg.rotary_original_ctx


def rotary_scale(cfg) -> float:
    """What cos and sin are multiplied by (transformers' ``attention_scaling``): ``rotary_attn_factor`` under LongRoPE,
    else 1. Rotated dimensions of q and k both grow by it, so their part of q.k grows by its square."""
    return float(cfg.rotary_attn_factor) if cfg.rotary_scaling == "longrope" else 1.0


def cache_needs_recompute(cfg, n_cached: int, n_new: int) -> bool:
    """Whether a KV cache of ``n_cached`` positions holds keys rotated with LongRoPE's short factors while a forward
    pass over ``n_new`` more positions uses the long ones (the sequence crosses ``rotary_original_ctx``). transformers'
    Phi-3 then drops its cache and recomputes the whole sequence (``Phi3ForCausalLM.prepare_inputs_for_generation``),
    so that every key is rotated with the same factors; :func:`viz_model.sampling.iter_generate` does the same."""
    return (cfg.rotary_scaling == "longrope" and 0 < n_cached <= cfg.rotary_original_ctx
            and long_factors(cfg, n_cached + n_new))


def scaled_freqs(cfg, n_pos: int | None = None) -> torch.Tensor:
    """The frequencies a model's rotary positions really use: ``[d_rotary / 2]`` float32, radians per position.

    ``rotary_freqs(cfg.d_rotary, cfg.rotary_base)`` (only the first ``rotary_dim`` dimensions turn under partial
    rotary), then the config's scaling for longer contexts, as transformers' ``modeling_rope_utils``:

    - ``linear`` (Position Interpolation, Chen et al., 2023): every frequency divided by ``rotary_factor``;
    - ``llama3`` (Llama 3.1): with wavelength ``w = 2 pi / theta``, ``L = rotary_original_ctx``, ``lo = L /
      low_freq_factor``, ``hi = L / high_freq_factor``: ``w < hi`` kept, ``w > lo`` divided by the factor, and
      between them ``(1 - s) theta / factor + s theta`` with ``s = (L / w - low) / (high - low)``;
    - ``longrope`` (LongRoPE, Ding et al., 2024; Phi-3 128k): ``theta_i = 1 / (f_i base^(2i / d))``, ``f`` =
      ``rotary_long_factor`` for a sequence of ``n_pos`` positions above ``rotary_original_ctx``, else
      ``rotary_short_factor`` (:func:`long_factors`; transformers' ``_compute_longrope_parameters``); cos and sin
      are multiplied by :func:`rotary_scale` besides.

    ``n_pos``: the length of the sequence being run (cached positions included); only LongRoPE depends on it.
    """
    if cfg.rotary_scaling == "longrope":
        factors = cfg.rotary_long_factor if long_factors(cfg, n_pos) else cfg.rotary_short_factor
        shape = torch.arange(0, cfg.d_rotary, 2, dtype=torch.int64).float() / cfg.d_rotary
        return 1.0 / (torch.tensor(factors, dtype=torch.float32) * cfg.rotary_base ** shape)
    freqs = rotary_freqs(cfg.d_rotary, cfg.rotary_base)
    if cfg.rotary_scaling == "linear":
        return freqs / cfg.rotary_factor
    if cfg.rotary_scaling == "llama3":
        factor, low, high = cfg.rotary_factor, cfg.rotary_low_freq_factor, cfg.rotary_high_freq_factor
        ctx = cfg.rotary_original_ctx
        wavelen = 2 * math.pi / freqs
        scaled = torch.where(wavelen > ctx / low, freqs / factor, freqs)
        smooth = (ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < ctx / high) * ~(wavelen > ctx / low)
        return torch.where(medium, smoothed, scaled)
    return freqs


def rotary_angles(n_pos: int, d_head: int, base: float, offset: int = 0,
                  freqs: torch.Tensor | None = None) -> torch.Tensor:
    """Angles ``pos * theta_i`` for positions ``offset .. offset + n_pos - 1``: ``[n_pos, d_head / 2]`` radians
    (``freqs``: the model's own frequencies, :func:`scaled_freqs`; default ``rotary_freqs(d_head, base)``), on
    ``freqs``' device."""
    pos = torch.arange(offset, offset + n_pos, dtype=torch.float32, device=None if freqs is None else freqs.device)
    return pos[:, None] * (rotary_freqs(d_head, base) if freqs is None else freqs)[None, :]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the last axis (halves of ``d_head``)."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x: torch.Tensor, angles: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Rotate queries or keys ``x`` ``[batch, pos, head_index, d_head]`` by ``angles`` ``[pos, d_rotary / 2]``.

    ``x * cos + rotate_half(x) * sin`` with cos and sin repeated over both halves (transformers'
    ``apply_rotary_pos_emb``), both multiplied by ``scale`` when it is not 1 (LongRoPE, :func:`rotary_scale`).
    Partial rotary (GPT-NeoX): when ``angles`` cover fewer than ``d_head / 2`` pairs, only the first
    ``2 * angles.shape[-1]`` dimensions turn and the rest pass unchanged.
    """
    n_rot = 2 * angles.shape[-1]
    emb = torch.cat([angles, angles], dim=-1)[None, :, None, :]
    cos, sin = (emb.cos(), emb.sin()) if scale == 1.0 else (emb.cos() * scale, emb.sin() * scale)
    if n_rot < x.shape[-1]:
        x_rot, x_pass = x[..., :n_rot], x[..., n_rot:]
        return torch.cat([x_rot * cos.to(x.dtype) + rotate_half(x_rot) * sin.to(x.dtype), x_pass], dim=-1)
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)
