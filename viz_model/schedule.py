"""The learning-rate schedule shared by both training commands."""

from __future__ import annotations

import math


def cosine_lr(step: int, total: int, peak: float, floor: float, warmup: int) -> float:
    """Linear warm-up to ``peak`` then cosine decay to ``floor`` (Loshchilov & Hutter, 2017)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))
