"""Export as code for the Circuits page: the Python that computes the same graph with the project's public API
(``viz_model.load_model`` and ``viz_model.circuits``), prints its scores, its pruned size and its strongest inputs of
the top logit, and writes the graph JSON Neuronpedia reads. ``tests/test_circuits_page.py`` runs the string."""

from __future__ import annotations

from viz_ui.views.code_features import _folder
from viz_ui.views.code_interventions import _load


def circuits_code(model_path: str, ids: list[int], folders: tuple[str, ...], zero_first: bool, node_threshold: float,
                  edge_threshold: float, load_args: str = "") -> str:
    """A script that rebuilds the attribution graph of the token ids ``ids`` with the transcoders in ``folders``."""
    load, = _load(_folder(model_path), load_args)
    tcs = ",\n".join(f"    {layer}: load_dictionary({_folder(f)!r})" for layer, f in enumerate(folders))
    return "\n".join([
        '"""The attribution graph of a prompt, as the Circuits page computes it (circuit-tracer\'s semantics)."""',
        "import json",
        "import torch",
        "from viz_model import load_model",
        "from viz_model.circuits import attribute, graph_scores, prune_graph",
        "from viz_model.circuits.graph_json import to_graph_json",
        "from viz_model.features import load_dictionary",
        "",
        load,
        "transcoders = {",
        tcs,
        "}",
        f"tokens = torch.tensor({list(map(int, ids))})  # the page's prompt, as token ids",
        f"graph = attribute(model, tokens, transcoders, zero_first_position={bool(zero_first)})",
        "replacement, completeness = graph_scores(graph)",
        "print('nodes:', graph.n_nodes, 'features:', graph.n_features, 'logits:', graph.logit_tokens.tolist())",
        "print('replacement score:', round(replacement, 4), 'completeness score:', round(completeness, 4))",
        f"nodes, edges, _ = prune_graph(graph, node_threshold={node_threshold}, edge_threshold={edge_threshold})",
        "print('pruned:', int(nodes.sum()), 'nodes,', int(edges.sum()), 'edges')",
        "row = graph.adjacency[graph.logit_start]  # the top logit's inputs",
        "for i in row.abs().topk(5).indices.tolist():",
        "    print(graph.node_kind(i), graph.node_location(i), round(float(row[i]), 4))",
        "text = lambda i: tokenizer.decode([i]) if hasattr(tokenizer, 'decode') else str(i)",
        f"data = to_graph_json(graph, text, node_threshold={node_threshold}, edge_threshold={edge_threshold})",
        "with open('graph.json', 'w') as f:",
        "    json.dump(data, f)",
        ""])


def contribution_code(model_path: str, ids: list[int], threshold: float, load_args: str = "") -> str:
    """A script that computes the contribution graph of the token ids ``ids`` and prints its edges to the output."""
    load, = _load(_folder(model_path), load_args)
    return "\n".join([
        '"""The contribution graph of a prompt (Ferrando & Voita 2024), as the Circuits page computes it."""',
        "import torch",
        "from viz_model import load_model",
        "from viz_model.circuits.contribution import contribution_graph",
        "",
        load,
        f"tokens = torch.tensor({list(map(int, ids))})  # the page's prompt, as token ids",
        "graph = contribution_graph(model, tokens)  # importances: attn [n_layers, pos, key_pos, n_heads], mlp [n_layers, pos]",
        f"edges = graph.edges(threshold={threshold})  # (source, target, importance, kind) on paths to the last output",
        "print(len(edges), 'edges')",
        "for source, target, importance, kind in sorted(edges, key=lambda e: -e[2])[:10]:",
        "    print(kind, source, '->', target, round(importance, 4))",
        ""])
