"""What the Circuits page draws, computed from an attribution graph or a contribution graph (no Streamlit, no Plotly).

Every text of a payload (token labels, node labels, a card's tokens and contexts) is escaped for Plotly
(:func:`viz_ui.analysis.text.plotly_text`): the browser draws it in Plotly as it is and turns it back into the text for
the page's own elements (``textContent``); no string from a model or a file reaches the page as markup.

The page sends the browser one *payload* per graph: the nodes and links of the graph pruned generously
(:data:`NODE_MAX`, :data:`EDGE_MAX`), each node with its share of the influence on the logits and each link with its
share of the edge influence, so that the node- and edge-threshold sliders filter in the browser (as Neuronpedia's
pruning slider filters the graph it was sent) without a round trip to the server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from viz_model.circuits.contribution import ContributionGraph
from viz_model.circuits.graph import Graph
from viz_model.circuits.graph_json import FEATURE_TYPES, node_id
from viz_model.circuits.influence import compute_edge_influence, compute_node_influence
from viz_ui.analysis.text import plotly_text

NODE_MAX = 0.95  # the payload holds the nodes making up this much of the influence (the node slider's top)
EDGE_MAX = 0.995  # and the edges making up this much of the edge influence among them (the edge slider's top)
MAX_NODES = 1200  # at most this many nodes are sent (the most influential), however spread the influence is
MAX_LINKS = 12_000
MAX_PROMPT = 64  # the page attributes at most this many tokens


@dataclass
class NodeCard:
    """What a hover shows of a feature node without asking the server: its top promoted tokens and contexts."""
    promoted: list[str]
    contexts: list[str]


def _shares_before(scores: torch.Tensor) -> torch.Tensor:
    """For each score, the fraction of the total held by the scores ranked above it: a node is kept at threshold
    ``t`` when this is below ``t`` (the node that crosses ``t`` is kept, as :func:`find_threshold` keeps it)."""
    total = float(scores.sum())
    if total <= 0:
        return torch.zeros_like(scores)
    order = torch.argsort(scores, descending=True)
    before = torch.zeros_like(scores)
    before[order] = (torch.cumsum(scores[order], 0) - scores[order]) / total
    return before


def graph_payload(graph: Graph, labels: Sequence[str], vocab: Sequence[str], *,
                  cards: Callable[[list[tuple[int, int]]], dict[tuple[int, int], NodeCard]] | None = None) -> dict:
    """The browser's view of an attribution graph (module docstring). ``labels``: each position's token as shown;
    ``vocab``: every token id's (for the logit nodes); ``cards([(layer, feature), ...])``: what a hover shows of
    each feature sent, asked once for all of them.

    Returns:
        ``{"mode": "attribution", "tokens": labels, "n_layers", "nodes": [...], "links": [[s, t, weight, share],
        ...], "node_max", "edge_max"}``; each node ``{"id" (the JSON node id), "kind", "layer", "pos", "feature",
        "act", "share" (its share of the influence before it in rank order), "infl", "label", "card"}``; links index
        into ``nodes``, ``share`` is the edge-influence share before it in rank order.
    """
    weights = graph.logit_weights()
    influence = compute_node_influence(graph.adjacency, weights)
    before = _shares_before(influence)
    keep = before < NODE_MAX
    keep[graph.token_start:] = True
    ranked = torch.argsort(influence, descending=True)
    kept_features = [int(i) for i in ranked if keep[i] and i < graph.token_start][:MAX_NODES]
    nodes_idx = sorted(kept_features) + list(range(graph.token_start, graph.n_nodes))
    sub = graph.adjacency[nodes_idx][:, nodes_idx]
    local_weights = weights[nodes_idx]
    edge_scores = compute_edge_influence(sub, local_weights)
    flat = edge_scores.flatten()
    nz = (flat > 0).nonzero().flatten()
    shares = _shares_before(flat[nz])
    order = torch.argsort(shares)
    chosen = nz[order][shares[order] < EDGE_MAX][:MAX_LINKS]
    dst, src = chosen // len(nodes_idx), chosen % len(nodes_idx)
    share_of = dict(zip(chosen.tolist(), shares[order][: len(chosen)].tolist()))
    wanted = sorted({(layer, feat) for layer, _, feat, _ in
                     (graph.feature_of(i) for i in nodes_idx if graph.node_kind(i) == "feature")})
    card_of = cards(wanted) if cards is not None else {}
    nodes = []
    for i in nodes_idx:
        kind = graph.node_kind(i)
        layer, pos = graph.node_location(i)
        item = {"id": node_id(graph, i), "kind": kind, "layer": layer, "pos": pos, "feature": -1, "act": None,
                "share": round(float(before[i]), 5), "infl": round(float(influence[i]), 6), "label": "", "card": None}
        if kind == "feature":
            _, _, feat, act = graph.feature_of(i)
            item.update(feature=feat, act=round(act, 4),
                        label=f"L{layer} #{feat}")
            card = card_of.get((layer, feat))
            if card is not None:
                item["card"] = {"promoted": [plotly_text(t) for t in card.promoted],
                                "contexts": [plotly_text(c) for c in card.contexts]}
        elif kind == "error":
            item["label"] = f"L{layer} error"
        elif kind == "token":
            item["label"] = plotly_text(labels[pos])
        else:
            k = i - graph.logit_start
            item.update(label=plotly_text(vocab[int(graph.logit_tokens[k])]),
                        act=round(float(graph.logit_probabilities[k]), 4))
        nodes.append(item)
    links = [[int(s), int(t), round(float(sub[t, s]), 6), round(share_of[int(c)], 5)]
             for s, t, c in zip(src.tolist(), dst.tolist(), chosen.tolist())]
    return {"mode": "attribution", "tokens": [plotly_text(t) for t in labels], "n_layers": graph.n_layers,
            "nodes": nodes, "links": links, "node_max": NODE_MAX, "edge_max": EDGE_MAX}


def contribution_payload(cg: ContributionGraph, labels: Sequence[str], n_layers: int) -> dict:
    """The browser's view of a contribution graph: nodes ``I{l}_{pos}`` (the stream entering block ``l``),
    ``A{l}_{pos}`` (after its attention) and ``F{l}_{pos}`` (its MLP), every edge at or above 0.01 that leads to the
    last position's output, with its importance; the browser's slider keeps edges above its threshold that still
    lead there (the LLM Transparency Tool's graph)."""
    edges = cg.edges(threshold=0.01)
    names = sorted({s for s, _, _, _ in edges} | {t for _, t, _, _ in edges} |
                   {f"I{n_layers}_{len(labels) - 1}"} | {f"I0_{p}" for p in range(len(labels))},
                   key=lambda n: (int(n[1:].split("_")[0]), "IAF".index(n[0]), int(n.split("_")[1])))
    index = {n: i for i, n in enumerate(names)}
    nodes = []
    for name in names:
        kind, rest = name[0], name[1:]
        layer, pos = (int(x) for x in rest.split("_"))
        label = labels[pos] if kind == "I" and layer == 0 else (
            "output" if kind == "I" and layer == n_layers else {"I": "stream", "A": "after attention", "F": "MLP"}[kind])
        nodes.append({"id": name, "kind": {"I": "resid", "A": "attn", "F": "mlp"}[kind], "layer": layer, "pos": pos,
                      "label": plotly_text(label)})
    links = [[index[s], index[t], round(w, 5), kind] for s, t, w, kind in edges]
    heads = cg.attn  # [layer, q, k, head]: the strongest heads of each attention edge, for its hover
    top = {}
    for s, t, _, kind in edges:
        if kind == "attn":
            layer, q = (int(x) for x in t[1:].split("_"))
            k = int(s.split("_")[1])
            vals = heads[layer, q, k]
            best = torch.argsort(vals, descending=True)[:3]
            top[f"{s}>{t}"] = [[int(h), round(float(vals[h]), 4)] for h in best if float(vals[h]) > 0]
    return {"mode": "contribution", "tokens": [plotly_text(t) for t in labels], "n_layers": n_layers, "nodes": nodes,
            "links": links, "heads": top, "threshold": cg.threshold}


def node_edges(graph: Graph, index: int, n: int = 10) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """``(inputs, outputs)`` of node ``index``: the ``n`` largest edges into it and out of it by ``|weight|``, each
    ``(other node, weight)``, largest first."""
    row, col = graph.adjacency[index], graph.adjacency[:, index]
    ins = torch.argsort(row.abs(), descending=True)[:n]
    outs = torch.argsort(col.abs(), descending=True)[:n]
    return ([(int(i), float(row[i])) for i in ins if float(row[i]) != 0],
            [(int(i), float(col[i])) for i in outs if float(col[i]) != 0])


KINDS = dict(zip(FEATURE_TYPES, ("feature", "error", "token", "logit")))  # a graph file's node types, as drawn


def json_payload(data: dict) -> dict:
    """The browser's view of a graph read from a file (:func:`viz_model.circuits.graph_json.load_graph_json`'s
    output): its nodes and links as they are. A node's share of the influence is its ``influence`` field (the
    cumulative influence circuit-tracer writes; 0 when absent), a link's share its rank by ``|weight|`` among the
    file's links (the file holds no edge influence). Node kinds other than the four of circuit-tracer are drawn as
    features."""
    tokens = list(data["metadata"]["prompt_tokens"])
    n_layers = max([int(n["layer"]) for n in data["nodes"] if n["layer"].isdigit() and KINDS.get(n["feature_type"])
                    != "logit"] + [0]) + 1
    index = {n["node_id"]: i for i, n in enumerate(data["nodes"])}
    nodes = []
    for n in data["nodes"]:
        kind = KINDS.get(n["feature_type"], "feature")
        layer = -1 if kind == "token" else (n_layers if kind == "logit" else int(n["layer"]) if n["layer"].isdigit() else 0)
        infl = n["influence"] or 0.0
        label = n["clerp"] or (f"L{layer} #{n.get('feature_index', n['feature'])}" if kind == "feature" else
                               f"L{layer} error" if kind == "error" else tokens[n["ctx_idx"]] if kind == "token"
                               and n["ctx_idx"] < len(tokens) else n["node_id"])
        nodes.append({"id": plotly_text(n["node_id"]), "kind": kind, "layer": layer, "pos": n["ctx_idx"],
                      "feature": n.get("feature_index", n["feature"]), "act": n["activation"] if kind != "logit"
                      else n["token_prob"], "share": float(infl) if kind in ("feature", "error") else 0.0,
                      "infl": 1.0 - float(infl), "label": plotly_text(label), "card": None})
    weights = torch.tensor([abs(link["weight"]) for link in data["links"]], dtype=torch.float64)
    shares = _shares_before(weights).tolist() if len(weights) else []
    links = [[index[link["source"]], index[link["target"]], link["weight"], round(share, 5)]
             for link, share in zip(data["links"], shares)]
    if not tokens:
        tokens = [str(i) for i in range(max([n["pos"] for n in nodes] + [0]) + 1)]
    return {"mode": "attribution", "tokens": [plotly_text(t) for t in tokens], "n_layers": n_layers, "nodes": nodes, "links": links,
            "node_max": 1.0, "edge_max": 1.0}
