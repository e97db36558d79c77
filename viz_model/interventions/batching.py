"""Running many patched copies of one prompt in one forward pass (shared by ablation and patching)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import time

import torch

from viz_model.limits import attn_budget_bytes
from viz_model.model import VizTransformer
from viz_model.interventions.cost import forward_flops, sweep_cost  # noqa: F401  (the sweeps' cost, re-exported beside them)


def copies_per_pass(model: VizTransformer, n_pos: int) -> int:
    """How many copies of an ``n_pos``-token prompt one forward pass may hold: about half the attention memory
    budget (``VIZ_ATTN_BUDGET_MB``, see :func:`viz_model.limits.attn_budget_bytes`) divided by what one copy
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


def seconds_per_forward(model: VizTransformer, tokens: torch.Tensor, batch: int = 1, **kwargs) -> float:
    """Wall seconds of one forward pass of one copy of ``tokens`` (``[1, pos]``, no grad), the unit of
    :func:`sweep_cost`: a forward pass of ``batch`` copies, timed once after one warm-up run, divided by ``batch``.
    A batched copy costs less than a prompt alone (bigger matrix products), so for an exact sweep time a batch of
    about the copies of one pass (:func:`copies_per_pass`, at most the cells of a layer); for attribution
    patching, ``batch=1``. ``kwargs`` as ``forward`` (batch-of-one tensors are repeated)."""
    ids, extra = tokens.expand(batch, -1), repeat_kwargs(kwargs, batch)
    with torch.no_grad():
        model(ids, **extra)
        start = time.perf_counter()
        model(ids, **extra)
        return (time.perf_counter() - start) / batch


def reads_logits_at(metric: Callable, *positions: int) -> Callable:
    """``metric`` marked as reading the logits of ``positions`` only (e.g. ``-1``): :func:`run_cells` then decodes
    only those rows of each copy (:meth:`VizTransformer.forward_from`'s ``logit_positions``; the other rows are NaN).
    Returns ``metric`` itself."""
    metric.logit_positions = tuple(int(p) for p in positions)
    return metric


Cell = tuple[int, ...]
Progress = Callable[[int, int], None]


@torch.no_grad()
def encode_once(model: VizTransformer, kwargs: dict) -> dict:
    """``forward`` keyword arguments with an encoder-decoder's ``src_tokens`` replaced by ``encoder_out`` (the
    encoder run once, here), so that every pass of a sweep reuses it; other models' kwargs are returned as given."""
    if model.encoder is None or kwargs.get("encoder_out") is not None or kwargs.get("src_tokens") is None:
        return kwargs
    rest = {k: v for k, v in kwargs.items() if k != "src_tokens"}
    return {**rest, "encoder_out": model.encode(kwargs["src_tokens"])}


@torch.no_grad()
def prefix_run(model: VizTransformer, tokens: torch.Tensor, fwd_hooks=(), **kwargs
               ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """One run of ``tokens`` (``[1, pos]``) with ``fwd_hooks`` that records every layer's input.

    Returns:
        ``(logits [1, pos, d_vocab], {layer: blocks.{layer}.hook_resid_pre [1, pos, d_model]})``: the prefixes that
        :func:`run_cells` starts its copies from.
    """
    names = [f"blocks.{layer}.hook_resid_pre" for layer in range(model.cfg.n_layers)]
    with model.hooks(fwd_hooks):
        logits, cache = model.run_with_cache(tokens, names_filter=names, **kwargs)
    return logits, {layer: cache[name] for layer, name in enumerate(names)}


@torch.no_grad()
def run_cells(model: VizTransformer, tokens: torch.Tensor, cells: Sequence[Cell],
              hooks_for: Callable[[list[tuple[int, Cell]]], list[tuple[str, Callable]]],
              reduce: Callable[[torch.Tensor], torch.Tensor], progress: Progress | None = None,
              prefix: dict[int, torch.Tensor] | None = None, **kwargs) -> torch.Tensor:
    """Run one copy of ``tokens`` (``[1, pos]``) per cell, batched, and reduce each copy's logits.

    Args:
        cells: one intervention per copy, its layer first (e.g. ``(layer, pos)``).
        hooks_for: given ``[(row in the batch, cell), ...]`` of one pass, the ``(hook name, fn)`` pairs that apply
            each cell's intervention to its own row only.
        reduce: logits ``[1, pos, d_vocab]`` of one copy -> a scalar tensor (e.g. a patching metric).
        progress: called after every batched pass with ``(cells done, len(cells))``; an exception it raises (to
            cancel) propagates, and the pass's hooks are removed.
        prefix: None: every copy runs the whole model. Else ``{layer: blocks.{layer}.hook_resid_pre}`` of the run
            without the cells' interventions (:func:`prefix_run`): a cell at layer ``l`` then runs only blocks
            ``l ..`` and the decode from that prefix (:meth:`VizTransformer.forward_from`); passes as
            :func:`plan_passes`. Exact when every intervention of a cell acts at its layer or later (hooks on earlier
            blocks do not fire: their effect must already be in the prefix).

    Returns:
        ``[len(cells)]`` float32, in the order of ``cells``.

    Raises:
        ValueError: when ``tokens`` is not one prompt ``[1, pos]``; from the model's ``forward``.
    """
    if tokens.ndim != 2 or tokens.shape[0] != 1:
        raise ValueError(f"give one prompt, [1, pos]; got shape {tuple(tokens.shape)}")
    out = torch.empty(len(cells))
    step = copies_per_pass(model, tokens.shape[1])
    if prefix is not None:
        kwargs = encode_once(model, kwargs)
    done = 0
    for layer, indices in plan_passes([int(cell[0]) for cell in cells], step, prefix is not None):
        chunk = [(row, cells[i]) for row, i in enumerate(indices)]
        extra = repeat_kwargs(kwargs, len(chunk))
        if prefix is None:
            logits = model.run_with_hooks(tokens.expand(len(chunk), -1), hooks_for(chunk), **extra)
        else:
            resid = prefix[layer].expand(len(chunk), *prefix[layer].shape[1:]).contiguous()
            with model.hooks(hooks_for(chunk)):
                logits = model.forward_from(resid, layer, logit_positions=getattr(reduce, "logit_positions", None),
                                            **extra)
        for row, i in enumerate(indices):
            out[i] = float(reduce(logits[row:row + 1]))
        done += len(chunk)
        if progress is not None:
            progress(done, len(cells))
    return out


def plan_passes(layers: Sequence[int], step: int, reuse_prefix: bool = True) -> list[tuple[int, list[int]]]:
    """The batched passes of a sweep whose cells start at ``layers`` (one per cell): ``[(start layer, [cell
    indices])]``, at most ``step`` cells a pass. With ``reuse_prefix`` a pass holds cells of one layer only and starts
    there (layers in increasing order), so that no copy runs a block it does not need; without, the passes take
    the cells in their order and start at layer 0."""
    if not reuse_prefix:
        return [(0, list(range(start, min(start + step, len(layers))))) for start in range(0, len(layers), step)]
    groups: dict[int, list[int]] = {}
    for i in sorted(range(len(layers)), key=lambda i: layers[i]):
        groups.setdefault(layers[i], []).append(i)
    return [(layer, group[start:start + step]) for layer, group in groups.items()
            for start in range(0, len(group), step)]


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
