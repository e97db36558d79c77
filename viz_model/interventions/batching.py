"""Running many patched copies of one prompt in one forward pass (shared by ablation and patching)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..components import attn_budget_bytes
from ..model import VizTransformer


def copies_per_pass(model: VizTransformer, n_pos: int) -> int:
    """How many copies of an ``n_pos``-token prompt one forward pass may hold: about half the attention memory
    budget (``VIZ_ATTN_BUDGET_MB``, see :func:`viz_model.components.attn_budget_bytes`) divided by what one copy
    keeps alive at once (logits, a few residual-stream and MLP activations, and one layer's scores and pattern),
    float32. At least 1."""
    cfg = model.cfg
    per_copy = 4 * n_pos * (cfg.d_vocab + 8 * cfg.d_model + 3 * cfg.d_mlp + 2 * cfg.n_heads * n_pos)
    return max(1, attn_budget_bytes() // 2 // max(1, per_copy))


def repeat_kwargs(kwargs: dict, batch: int) -> dict:
    """``forward`` keyword arguments with every batch-of-one tensor (``src_tokens``, ``encoder_out``,
    ``token_type_ids``) repeated to ``batch`` rows."""
    return {k: v.expand(batch, *v.shape[1:]) if isinstance(v, torch.Tensor) and v.shape[:1] == (1,) else v
            for k, v in kwargs.items()}


Cell = tuple[int, ...]


@torch.no_grad()
def run_cells(model: VizTransformer, tokens: torch.Tensor, cells: Sequence[Cell],
              hooks_for: Callable[[list[tuple[int, Cell]]], list[tuple[str, Callable]]],
              reduce: Callable[[torch.Tensor], torch.Tensor], **kwargs) -> torch.Tensor:
    """Run one copy of ``tokens`` (``[1, pos]``) per cell, batched, and reduce each copy's logits.

    Args:
        cells: one intervention per copy (e.g. ``(layer, pos)``).
        hooks_for: given ``[(row in the batch, cell), ...]`` of one pass, the ``(hook name, fn)`` pairs that apply
            each cell's intervention to its own row only.
        reduce: logits ``[1, pos, d_vocab]`` of one copy -> a scalar tensor (e.g. a patching metric).

    Returns:
        ``[len(cells)]`` float32, in the order of ``cells``.

    Raises:
        ValueError: when ``tokens`` is not one prompt ``[1, pos]``; from the model's ``forward``.
    """
    if tokens.ndim != 2 or tokens.shape[0] != 1:
        raise ValueError(f"give one prompt, [1, pos]; got shape {tuple(tokens.shape)}")
    out = torch.empty(len(cells))
    step = copies_per_pass(model, tokens.shape[1])
    for start in range(0, len(cells), step):
        chunk = list(enumerate(cells[start:start + step]))
        batch = tokens.expand(len(chunk), -1)
        logits = model.run_with_hooks(batch, hooks_for(chunk), **repeat_kwargs(kwargs, len(chunk)))
        for row, _ in chunk:
            out[start + row] = float(reduce(logits[row:row + 1]))
    return out


def hooks_by_layer(chunk: list[tuple[int, Cell]], hook_name: Callable[[int], str],
                   write: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], None]) -> list[tuple[str, Callable]]:
    """``hooks_for`` of :func:`run_cells` for cells ``(layer, index)``: one hook per layer of the pass, at
    ``hook_name(layer)``, that copies its value and calls ``write(x, rows, indices, layer)`` with the batch rows
    of that layer's cells and their indices (a position, a head) as int64 tensors."""
    by_layer: dict[int, list[tuple[int, int]]] = {}
    for row, (layer, index) in chunk:
        by_layer.setdefault(layer, []).append((row, index))
    fns = []
    for layer, items in by_layer.items():
        rows, indices = torch.tensor([r for r, _ in items]), torch.tensor([i for _, i in items])

        def fn(x, hook, rows=rows, indices=indices, layer=layer):
            x = x.clone()
            write(x, rows, indices, layer)
            return x
        fns.append((hook_name(layer), fn))
    return fns
