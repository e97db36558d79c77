"""The optimiser, learning-rate schedule and update step shared by both training commands."""

from __future__ import annotations

import math

import torch


def cosine_lr(step: int, total: int, peak: float, floor: float, warmup: int) -> float:
    """Linear warm-up to ``peak`` then cosine decay to ``floor`` (Loshchilov & Hutter, 2017)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def adamw(model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float]) -> torch.optim.AdamW:
    """AdamW (Loshchilov & Hutter, 2019) with weight decay on matrices only (not on biases and norm weights)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas)


def update(model: torch.nn.Module, opt: torch.optim.Optimizer, loss: torch.Tensor, lr: float) -> None:
    """One optimiser step at learning rate ``lr``: backward, clip the gradient norm to 1, step."""
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
