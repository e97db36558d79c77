"""Which attention heads carry an edge of an attribution graph.

In the replacement model the attention patterns are frozen, so an edge between two positions can only pass through
attention heads' OV circuits. ``edge_heads`` recomputes the edge once per head with that head's path cut (its
``hook_z`` detached, so no change passes through its output, at any position) and reports how much the edge drops.
The drops need not add up to the edge: a path may cross several heads, and cutting any one of them removes it.
Which key the head attends to from the target's position, and why, is the QK split
(:func:`viz_model.interventions.qk_attribution`) at (target position, source position).
"""

from __future__ import annotations

import torch

from viz_model.circuits.context import context_of, source_write, target_read
from viz_model.circuits.replacement import FrozenRun, frozen_copies, graph_budget_bytes


def edge_heads(graph, target: int, source: int, batch_size: int = 64) -> torch.Tensor:
    """``[n_layers, n_heads]`` float32: the drop of edge ``adjacency[target, source]`` when each head's path is cut
    (the edge minus the edge recomputed with that head passing no change). Heads in layers the edge cannot cross
    (before the source is written, after the target reads) are exactly 0.

    Args:
        graph: a graph made by :func:`viz_model.circuits.attribute` (it keeps its model and clean run).
        target: a feature or logit node; source: a feature, error or token node.
        batch_size: heads cut per forward pass.

    Raises:
        CircuitError: a graph read from a file, a target without inputs or a source without outputs.
        IndexError: a node index outside the graph.
    """
    ctx = context_of(graph)
    read_layer, t_pos, t_vec = target_read(graph, ctx, target)
    slot, s_pos, s_vec = source_write(graph, ctx, source)
    cfg = ctx.model.cfg
    drops = torch.zeros(cfg.n_layers, cfg.n_heads)
    first = slot  # a source written after layer l's MLP (slot l + 1) crosses heads from layer l + 1 on; tokens from 0
    last = min(read_layer, cfg.n_layers - 1)  # a feature of layer l reads after layer l's attention
    heads = [(layer, head) for layer in range(first, last + 1) for head in range(cfg.n_heads)]
    if not heads or s_pos > t_pos:
        return drops
    full = None
    per = max(1, min(batch_size, frozen_copies(ctx.model, graph.n_pos, graph_budget_bytes())) - 1)
    for start in range(0, len(heads), per):
        chunk = heads[start:start + per]
        run = FrozenRun(ctx.model, ctx.prep, len(chunk) + 1, cut={i + 1: lh for i, lh in enumerate(chunk)})
        n = len(chunk) + 1
        grads = run.grads(torch.full((n,), read_layer), torch.full((n,), t_pos), t_vec.expand(n, -1))
        g = grads[slot]
        edges = g[:, s_pos] @ s_vec.float() if g is not None else torch.zeros(n)
        full = edges[0] if full is None else full
        for i, (layer, head) in enumerate(chunk):
            drops[layer, head] = full - edges[i + 1]
    return drops


def ranked_heads(drops: torch.Tensor, min_share: float = 0.0) -> list[tuple[int, int, float]]:
    """``[(layer, head, drop), ...]`` sorted by ``|drop|``, largest first, keeping heads whose ``|drop|`` is at least
    ``min_share`` of the largest."""
    flat = drops.flatten()
    if not flat.abs().max() > 0:
        return []
    order = torch.argsort(flat.abs(), descending=True)
    top = float(flat.abs().max())
    n_heads = drops.shape[1]
    return [(int(i) // n_heads, int(i) % n_heads, float(flat[i])) for i in order
            if float(flat[i].abs()) > 0 and float(flat[i].abs()) >= min_share * top]
