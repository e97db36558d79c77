"""The one training loop of the project, shared by the CLI (``python -m viz_model.training``), the shipped
timelines and the in-browser training page: a generator that takes one optimiser step per batch and yields,
so that each caller decides when to evaluate, snapshot, report progress or stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from viz_model.model import VizTransformer
from viz_model.feed_forward import load_balancing_loss
from viz_model.training.schedule import adamw, cosine_lr, update


@dataclass
class TrainStep:
    """What one optimiser step did."""

    step: int  # steps done so far (1 after the first update)
    loss: float  # mean next-token cross-entropy of this step's batch, nats/token
    lr: float  # learning rate used for this step
    seconds: float  # wall time since the loop started, seconds
    aux_loss: float = 0.0  # mixture of experts: the load-balancing loss of this batch (not part of ``loss``)


def lm_batches(ids: torch.Tensor, n_ctx: int, batch_size: int, seed: int = 0) -> Iterator[torch.Tensor]:
    """Endless random windows of a token stream: ``[batch_size, n_ctx + 1]`` int64 (inputs and shifted targets).

    Raises:
        ValueError: when ``ids`` holds ``n_ctx + 1`` tokens or fewer.
    """
    if len(ids) <= n_ctx + 1:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than the context ({n_ctx}) + 2")
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.arange(n_ctx + 1)
    while True:
        starts = torch.randint(0, len(ids) - n_ctx - 1, (batch_size,), generator=gen)
        yield ids[starts[:, None] + offsets]


def train_steps(model: VizTransformer, batches: Iterator[torch.Tensor], steps: int, lr: float = 1e-3,
                min_lr: float = 1e-4, warmup: int = 200, weight_decay: float = 0.1,
                betas: tuple[float, float] = (0.9, 0.95), bf16: bool = False,
                should_stop: Callable[[], bool] = lambda: False, aux_loss_coef: float = 0.0) -> Iterator[TrainStep]:
    """Train a decoder-only ``model`` in place for ``steps`` AdamW steps (next-token cross-entropy), yielding a
    :class:`TrainStep` after each one. The model is in train mode while the loop runs and in eval mode after it
    ends (also when the caller stops iterating early or ``should_stop()`` turns true, checked before every step).

    Args:
        batches: ``[batch, n_ctx + 1]`` int64 token windows (e.g. :func:`lm_batches`); input = ``[:, :-1]``,
            target = ``[:, 1:]``.
        lr, min_lr, warmup: the schedule of :func:`viz_model.training.schedule.cosine_lr` (linear warm-up, cosine decay).
        weight_decay, betas: AdamW's (Loshchilov & Hutter, 2019), decay on matrices only.
        bf16: bfloat16 autocast on the CPU for speed (weights stay float32).
        aux_loss_coef: a mixture-of-experts model minimises ``cross-entropy + aux_loss_coef * load-balancing loss``
            (:func:`viz_model.feed_forward.load_balancing_loss` of every layer's router logits; 1 = balanced), so that the
            router does not send every token to the same few experts (Fedus et al., 2021; Mixtral uses 0.02).

    Raises:
        ValueError: from the model on a batch of the wrong shape or with ids outside the vocabulary.
    """
    opt = adamw(model, lr, weight_decay, betas)
    d_vocab = model.cfg.d_vocab
    routers = [n for n in model.hook_dict if n.endswith("hook_router_logits")] if aux_loss_coef else []
    t0 = time.perf_counter()
    try:
        for step in range(steps):
            if should_stop():
                return
            batch = next(batches)
            model.train()  # again each step: a caller may have evaluated in eval mode between two steps
            router_logits: list[torch.Tensor] = []
            record = model.hooks((n, lambda t, hook: router_logits.append(t)) for n in routers) if routers \
                else nullcontext()
            with record, torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, d_vocab), batch[:, 1:].reshape(-1))
            aux = load_balancing_loss(router_logits, model.cfg.experts_per_token) if routers else None
            rate = cosine_lr(step, steps, lr, min_lr, warmup)
            update(model, opt, loss if aux is None else loss + aux_loss_coef * aux, rate)
            yield TrainStep(step + 1, loss.item(), rate, time.perf_counter() - t0, 0.0 if aux is None else aux.item())
    finally:
        model.eval()
