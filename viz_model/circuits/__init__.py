"""Attribution graphs (circuits): why the model produced an output, as a graph of features, errors and tokens.

circuit-tracer's semantics (Ameisen et al. 2025, "Circuit Tracing"; the open-source ``circuit-tracer`` library) on
any checkpoint this project loads, with per-layer transcoders; and, for models without transcoders, the contribution
graph of Ferrando & Voita 2024 (the LLM Transparency Tool's). Torch only.
"""

from viz_model.circuits.attribute import attribute, graph_budget_bytes, salient_logits
from viz_model.circuits.graph import Graph
from viz_model.circuits.heads import edge_heads, ranked_heads
from viz_model.circuits.influence import (PruneResult, compute_edge_influence, compute_influence,
                                          compute_node_influence, find_threshold, graph_scores, normalize_matrix,
                                          prune_graph, subgraph_scores)
from viz_model.circuits.replacement import CircuitError, check_model, check_transcoders, load_transcoders

__all__ = ["CircuitError", "Graph", "PruneResult", "attribute", "check_model", "check_transcoders",
           "compute_edge_influence", "compute_influence", "compute_node_influence", "edge_heads", "find_threshold",
           "graph_budget_bytes", "graph_scores", "load_transcoders", "normalize_matrix", "prune_graph", "ranked_heads",
           "salient_logits", "subgraph_scores"]
