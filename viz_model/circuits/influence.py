"""Influence, pruning and scores of an attribution graph, with circuit-tracer's definitions.

Source: circuit-tracer, ``circuit_tracer/graph.py`` (``normalize_matrix``, ``compute_influence``,
``compute_node_influence``, ``compute_edge_influence``, ``find_threshold``, ``prune_graph``,
``compute_graph_scores``), after Ameisen et al. 2025, "Circuit Tracing: Revealing Computational Graphs in Language
Models" (transformer-circuits.pub/2025/attribution-graphs/methods.html), sections on pruning and graph evaluation.

- ``A_hat`` is the row-normalised ``|adjacency|``: each target's incoming weights as fractions that sum to 1.
- Influence of every node on the weighted logits: ``w^T ((I - A_hat)^-1 - I) = w^T (A_hat + A_hat^2 + ...)``, the
  total share of the logits' inputs, over every path, that the node accounts for.
- Replacement score: the tokens' influence divided by the tokens' plus the error nodes' influence (1 when no path
  from the logits ends in an error node). Completeness score: the influence-weighted mean, over all nodes, of the
  share of each node's input that does not come from error nodes (logits weighted by their probabilities).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from viz_model.circuits.graph import Graph


def normalize_matrix(matrix: torch.Tensor) -> torch.Tensor:
    """``|matrix|`` with each row divided by its sum (rows summing to 0 stay 0): ``[n, n]`` float32."""
    normalized = matrix.abs().float()
    return normalized / normalized.sum(dim=1, keepdim=True).clamp(min=1e-10)


def compute_influence(A_hat: torch.Tensor, logit_weights: torch.Tensor, max_iter: int = 1000) -> torch.Tensor:
    """``w^T ((I - A_hat)^-1 - I)``: ``[n]`` influence of every node on the nodes weighted by ``logit_weights``.

    Computed as circuit-tracer does, as the sum ``w A + w A^2 + ...`` until a product is exactly zero (an attribution
    graph is acyclic: sources sit in earlier layers or positions, so the powers of ``A_hat`` vanish after at most as
    many steps as the longest path).

    Args:
        A_hat: ``[n, n]`` row-normalised ``|adjacency|`` (see :func:`normalize_matrix`).
        logit_weights: ``[n]`` (the logit nodes' probabilities, 0 elsewhere).

    Raises:
        RuntimeError: when the series does not end within ``max_iter`` products (a cycle).
    """
    current = logit_weights.float() @ A_hat
    influence = current.clone()
    for _ in range(max_iter):
        if not current.any():
            return influence
        current = current @ A_hat
        influence += current
    raise RuntimeError(f"influence did not converge within {max_iter} iterations: the graph has a cycle")


def compute_node_influence(adjacency: torch.Tensor, logit_weights: torch.Tensor) -> torch.Tensor:
    """Each node's influence on the weighted logits, ``[n]``, from the raw adjacency."""
    return compute_influence(normalize_matrix(adjacency), logit_weights)


def compute_edge_influence(adjacency: torch.Tensor, logit_weights: torch.Tensor) -> torch.Tensor:
    """Each edge's influence ``[n, n]``: its normalised weight times its target's influence (logits count their own
    weight), as circuit-tracer's ``compute_edge_influence``."""
    normalized = normalize_matrix(adjacency)
    target_influence = compute_influence(normalized, logit_weights) + logit_weights.float()
    return normalized * target_influence[:, None]


def find_threshold(scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """The score above which the highest scores reach a ``threshold`` fraction of the total (circuit-tracer's
    ``find_threshold``): the smallest kept score. Only the positive scores are sorted (zeros add nothing to the
    cumulative sum; when the threshold is not reached before them, as at 1.0, the result is 0, as circuit-tracer's)."""
    flat = scores.flatten()
    positive = flat[flat > 0]
    if not len(positive):
        return flat.new_zeros(())
    sorted_scores = torch.sort(positive, descending=True).values
    cumulative = torch.cumsum(sorted_scores, dim=0) / torch.sum(sorted_scores)
    index = int(torch.searchsorted(cumulative, torch.tensor(threshold, dtype=cumulative.dtype)))
    if index >= len(sorted_scores):
        return flat.new_zeros(()) if len(positive) < len(flat) else sorted_scores[-1]
    return sorted_scores[index]


class PruneResult(NamedTuple):
    """What :func:`prune_graph` keeps: ``node_mask`` ``[n]`` bool, ``edge_mask`` ``[n, n]`` bool (row = target), and
    ``cumulative_scores`` ``[n]``: each node's place in the cumulative influence (0 = most influential side)."""
    node_mask: torch.Tensor
    edge_mask: torch.Tensor
    cumulative_scores: torch.Tensor


def prune_graph(graph: Graph, node_threshold: float = 0.8, edge_threshold: float = 0.98) -> PruneResult:
    """Keep the nodes that make up ``node_threshold`` of the total influence on the logits, then the edges that make up
    ``edge_threshold`` of the edge influence among them; tokens and logits are always kept, and features and errors
    left without an outgoing edge (features also without an incoming one) are dropped until nothing changes.

    Source: circuit-tracer's ``prune_graph`` (same steps, same order).

    Raises:
        ValueError: a threshold outside ``[0, 1]``.
    """
    for name, value in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be between 0 and 1, got {value}")
    n_tokens, n_logits, n_features = graph.n_pos, graph.n_logits, graph.n_features
    keep_always = n_logits + n_tokens
    logit_weights = graph.logit_weights()
    adjacency = graph.adjacency.float()

    node_influence = compute_node_influence(adjacency, logit_weights)
    node_mask = node_influence >= find_threshold(node_influence, node_threshold)
    node_mask[-keep_always:] = True

    pruned = adjacency.clone()
    pruned[~node_mask] = 0
    pruned[:, ~node_mask] = 0
    edge_scores = compute_edge_influence(pruned, logit_weights)
    edge_mask = edge_scores >= find_threshold(edge_scores, edge_threshold)

    def drop_dangling() -> None:
        node_mask[:-keep_always] &= edge_mask[:, :-keep_always].any(0)  # features and errors need an outgoing edge
        node_mask[:n_features] &= edge_mask[:n_features].any(1)  # features need an incoming edge

    old = node_mask.clone()
    drop_dangling()
    while not torch.equal(node_mask, old):
        old[:] = node_mask
        edge_mask[~node_mask] = False
        edge_mask[:, ~node_mask] = False
        drop_dangling()

    sorted_scores, order = torch.sort(node_influence, descending=True)
    cumulative = torch.zeros_like(node_influence)
    cumulative[order] = torch.cumsum(sorted_scores, dim=0) / torch.sum(sorted_scores)
    return PruneResult(node_mask, edge_mask, cumulative)


def graph_scores(graph: Graph, adjacency: torch.Tensor | None = None,
                 error_mask: torch.Tensor | None = None) -> tuple[float, float]:
    """``(replacement_score, completeness_score)`` as circuit-tracer's ``compute_graph_scores`` defines them (module
    docstring). Both lie in ``[0, 1]``; 1 means no influence reaches the logits through error nodes. A graph whose
    tokens and errors have no influence at all has a replacement score of 1 by convention (nothing is unexplained).

    Args:
        adjacency: another ``[n_nodes, n_nodes]`` matrix over the same nodes (default: ``graph.adjacency``).
        error_mask: ``[n_nodes]`` bool, the nodes counted as errors (default: the error nodes). They must be sinks
            (no incoming edges in ``adjacency``), as error nodes are.
    """
    adjacency = graph.adjacency if adjacency is None else adjacency
    if error_mask is None:
        error_mask = torch.zeros(graph.n_nodes, dtype=torch.bool)
        error_mask[graph.error_start:graph.token_start] = True
    logit_weights = graph.logit_weights()
    normalized = normalize_matrix(adjacency)
    influence = compute_influence(normalized, logit_weights)
    token_influence = influence[graph.token_start:graph.logit_start].sum()
    error_influence = influence[error_mask].sum()
    total = token_influence + error_influence
    replacement = float(token_influence / total) if total > 0 else 1.0
    non_error = 1 - normalized[:, error_mask].sum(dim=-1)
    output_influence = influence + logit_weights
    completeness = float((non_error * output_influence).sum() / output_influence.sum())
    return replacement, completeness


def subgraph_scores(graph: Graph, features: list[int] | torch.Tensor) -> tuple[float, float]:
    """The replacement and completeness scores of the subgraph that keeps only the feature nodes ``features`` (node
    indices; tokens, logits and error nodes stay): every other feature node is counted as an error node, i.e. as
    unexplained input (its incoming edges are cut, so paths end there as they end at error nodes), then
    :func:`graph_scores`. The pinned nodes of the Circuits page are scored this way; with every feature kept the
    result equals the whole graph's scores.

    Raises:
        IndexError: an index that is not a feature node.
    """
    features = torch.as_tensor(features, dtype=torch.long).flatten()
    if len(features) and (features.min() < 0 or features.max() >= graph.n_features):
        raise IndexError(f"feature node indices must lie in [0, {graph.n_features})")
    dropped = torch.zeros(graph.n_nodes, dtype=torch.bool)
    dropped[:graph.n_features] = True
    dropped[features] = False
    adjacency = graph.adjacency.clone()
    adjacency[dropped] = 0
    errors = dropped.clone()
    errors[graph.error_start:graph.token_start] = True
    return graph_scores(graph, adjacency, errors)
