"""What a graph keeps of the run it came from, so that an edge can be recomputed (heads) and nodes intervened on."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from viz_model.circuits.replacement import CircuitError, Prepared


@dataclass
class GraphContext:
    """The model, the transcoders ``{layer: SparseDictionary}``, the clean run (:class:`Prepared`) and the logit
    nodes' demeaned unembedding columns ``[n_logits, d_model]`` of one attribution graph."""
    model: object
    transcoders: dict
    prep: Prepared
    logit_vecs: torch.Tensor


def context_of(graph) -> GraphContext:
    """The graph's :class:`GraphContext`.

    Raises:
        CircuitError: a graph read from a file (it has no model attached).
    """
    ctx = getattr(graph, "context", None)
    if not isinstance(ctx, GraphContext):
        raise CircuitError("this graph was read from a file: recompute it with the model to trace its edges")
    return ctx


def target_read(graph, ctx: GraphContext, node: int) -> tuple[int, int, torch.Tensor]:
    """``(read layer, position, vector [d_model])`` of a target node: a feature reads its encoder column at its
    transcoder's input (read layer = its layer), a logit its demeaned unembedding column at the unembedding's input
    (read layer = n_layers).

    Raises:
        CircuitError: an error or token node (they have no inputs).
    """
    kind = graph.node_kind(node)
    if kind == "feature":
        active = int(graph.selected_features[node])
        layer, pos, _ = ctx.prep.active_features[active].tolist()
        return int(layer), int(pos), ctx.prep.encoder_vecs[active]
    if kind == "logit":
        return graph.n_layers, graph.n_pos - 1, ctx.logit_vecs[node - graph.logit_start]
    raise CircuitError(f"a {kind} node has no incoming edges: pick a feature or logit node as the target")


def source_write(graph, ctx: GraphContext, node: int) -> tuple[int, int, torch.Tensor]:
    """``(leaf slot, position, vector [d_model])`` of a source node: slot 0 is the embedding, slot ``l + 1`` layer
    ``l``'s ``hook_mlp_out`` (see :class:`viz_model.circuits.replacement.FrozenRun`).

    Raises:
        CircuitError: a logit node (it has no outgoing edges).
    """
    kind = graph.node_kind(node)
    if kind == "feature":
        active = int(graph.selected_features[node])
        layer, pos, _ = ctx.prep.active_features[active].tolist()
        return int(layer) + 1, int(pos), ctx.prep.decoder_vecs[active]
    if kind == "error":
        layer, pos = graph.node_location(node)
        return layer + 1, pos, ctx.prep.errors[layer, pos]
    if kind == "token":
        pos = node - graph.token_start
        return 0, pos, ctx.prep.token_vecs[pos]
    raise CircuitError("a logit node has no outgoing edges: pick a feature, error or token node as the source")
