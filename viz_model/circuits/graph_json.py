"""Attribution graphs as the graph JSON that Neuronpedia and circuit-tracer's local server read.

Format (circuit-tracer, ``circuit_tracer/frontend/graph_models.py`` and ``utils/create_graph_files.py``; schema
version 1): ``{"metadata": {...}, "qParams": {...}, "nodes": [...], "links": [...]}``.

- ``metadata``: ``slug``, ``scan`` (the transcoder set), ``transcoder_list``, ``prompt_tokens`` (one string per
  position), ``prompt``, ``node_threshold``, ``schema_version``.
- ``qParams``: the view's state: ``pinnedIds``, ``supernodes`` (lists ``[name, node id, ...]``), ``linkType``,
  ``clickedId``, ``sg_pos``.
- ``nodes``: ``node_id``, ``feature``, ``layer`` (a string: a block number, ``"E"`` for tokens, ``n_layers + 1`` for
  logits), ``ctx_idx`` (position), ``feature_type`` (``"cross layer transcoder"``, ``"mlp reconstruction error"``,
  ``"embedding"``, ``"logit"``), ``jsNodeId``, ``influence`` (the node's cumulative influence), ``activation``,
  ``token_prob`` and ``is_target_logit`` (logits), ``clerp`` (a label).
- ``links``: ``source``, ``target`` (node ids), ``weight`` (the adjacency entry ``adjacency[target, source]``).

Node ids: features ``{layer}_{feature}_{pos}``; error nodes ``{layer}_-1_{pos}`` (never equal to a feature's: a
feature index is never -1; circuit-tracer issue 78, fixed by its pull request 102 in the same way); tokens
``E_{token id}_{pos}``; logits ``{n_layers + 1}_{token id}_{pos}``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from viz_model.circuits.graph import Graph
from viz_model.circuits.influence import prune_graph

MAX_GRAPH_BYTES = 100 * 1024 * 1024  # Neuronpedia's upload cap for a graph file
MAX_NODES = 200_000
MAX_LINKS = 5_000_000
MAX_STRING = 10_000
FEATURE_TYPES = ("cross layer transcoder", "mlp reconstruction error", "embedding", "logit")


class GraphFileError(ValueError):
    """A graph file that cannot be read; one line saying why."""


def _cantor(x: int, y: int) -> int:
    return (x + y) * (x + y + 1) // 2 + y


def node_id(graph: Graph, index: int) -> str:
    """The JSON id of node ``index`` (module docstring)."""
    kind = graph.node_kind(index)
    if kind == "feature":
        layer, pos, feat, _ = graph.feature_of(index)
        return f"{layer}_{feat}_{pos}"
    if kind == "error":
        layer, pos = graph.node_location(index)
        return f"{layer}_-1_{pos}"
    if kind == "token":
        pos = index - graph.token_start
        return f"E_{int(graph.input_tokens[pos])}_{pos}"
    return f"{graph.n_layers + 1}_{int(graph.logit_tokens[index - graph.logit_start])}_{graph.n_pos - 1}"


def node_index(graph: Graph, ident: str) -> int | None:
    """The node whose :func:`node_id` is ``ident``, or None (no such node, or not an id): read from the id's fields,
    without a pass over the nodes."""
    parts = str(ident).split("_")
    if len(parts) != 3 or not all(p.lstrip("-").isdigit() for p in parts[1:]):
        return None
    head, (key, pos) = parts[0], (int(parts[1]), int(parts[2]))
    if not 0 <= pos < graph.n_pos:
        return None
    if head == "E":
        index = graph.token_start + pos
    elif not head.isdigit():
        return None
    elif int(head) == graph.n_layers + 1:
        hits = (graph.logit_tokens == key).nonzero().flatten()
        index = graph.logit_start + int(hits[0]) if len(hits) else None
    elif int(head) >= graph.n_layers:
        return None
    elif key == -1:
        index = graph.error_start + int(head) * graph.n_pos + pos
    else:
        index = graph.feature_node(int(head), pos, key)
    return index if index is not None and node_id(graph, index) == ident else None


def node_json(graph: Graph, index: int, influence: float | None, token_text: Callable[[int], str],
              clerp: str = "") -> dict:
    """One node's JSON object (circuit-tracer's ``Node.*_node`` constructors, error ids made collision-free)."""
    kind = graph.node_kind(index)
    nid = node_id(graph, index)
    base = dict(node_id=nid, run_idx=0, reverse_ctx_idx=0, token_prob=0.0, is_target_logit=False, clerp=clerp,
                influence=influence, activation=None)
    if kind == "feature":
        layer, pos, feat, act = graph.feature_of(index)
        return {**base, "feature": _cantor(layer, feat), "layer": str(layer), "ctx_idx": pos,
                "feature_type": "cross layer transcoder", "jsNodeId": f"{layer}_{feat}-0", "activation": act,
                "feature_index": feat}
    if kind == "error":
        layer, pos = graph.node_location(index)
        return {**base, "feature": -1, "layer": str(layer), "ctx_idx": pos, "feature_type": "mlp reconstruction error",
                "jsNodeId": f"{layer}_-1_{pos}-0"}
    if kind == "token":
        pos = index - graph.token_start
        tid = int(graph.input_tokens[pos])
        return {**base, "feature": pos, "layer": "E", "ctx_idx": pos, "feature_type": "embedding",
                "jsNodeId": f"E_{tid}-{pos}", "clerp": clerp or token_text(tid)}
    k = index - graph.logit_start
    tid, prob = int(graph.logit_tokens[k]), float(graph.logit_probabilities[k])
    return {**base, "feature": tid, "layer": str(graph.n_layers + 1), "ctx_idx": graph.n_pos - 1,
            "feature_type": "logit", "token_prob": prob, "is_target_logit": k == 0, "jsNodeId": f"L_{tid}-{graph.n_pos - 1}",
            "clerp": clerp or f'Output "{token_text(tid)}" (p={prob:.3f})', "influence": influence}


def to_graph_json(graph: Graph, token_text: Callable[[int], str], *, slug: str = "graph", prompt: str = "",
                  node_threshold: float = 0.8, edge_threshold: float = 0.98, q_params: dict | None = None,
                  clerps: dict[str, str] | None = None) -> dict:
    """The graph pruned at ``node_threshold`` / ``edge_threshold`` (:func:`viz_model.circuits.prune_graph`) as
    Neuronpedia's graph JSON (module docstring): kept nodes that have a kept edge (tokens and logits always), kept
    edges with their adjacency weight, each node's ``influence`` its cumulative influence score.

    Args:
        token_text: the text of a token id (e.g. ``lambda i: tokenizer.decode([i])``).
        prompt: the prompt's text; q_params: the view's state (default: nothing pinned); clerps: labels by node id.

    Raises:
        ValueError: thresholds outside ``[0, 1]``.
    """
    nodes, edges, cumulative = prune_graph(graph, node_threshold, edge_threshold)
    clerps = clerps or {}
    kept = nodes.nonzero().flatten().tolist()
    ids = {i: node_id(graph, i) for i in kept}
    dst, src = edges.nonzero(as_tuple=True)
    weights = graph.adjacency[dst, src].tolist()
    links = [{"source": ids[s], "target": ids[t], "weight": w}
             for s, t, w in zip(src.tolist(), dst.tolist(), weights) if s in ids and t in ids]
    linked = {link["source"] for link in links} | {link["target"] for link in links}
    out_nodes = [node_json(graph, i, float(cumulative[i]), token_text, clerps.get(ids[i], "")) for i in kept
                 if ids[i] in linked or graph.node_kind(i) in ("token", "logit")]
    q = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""}
    q.update(q_params or {})
    meta = {"slug": slug, "scan": graph.scan or "custom", "transcoder_list": [],
            "prompt_tokens": [token_text(int(t)) for t in graph.input_tokens], "prompt": prompt,
            "node_threshold": node_threshold, "schema_version": 1}
    return {"metadata": meta, "qParams": q, "nodes": out_nodes, "links": links}


# ---------------------------------------------------------------- reading an uploaded file

def _fail(message: str):
    raise GraphFileError(message)


def _reject_constant(name: str):
    _fail(f"the file holds {name}, which is not a finite number")


def _string(value, what: str, limit: int = MAX_STRING) -> str:
    if not isinstance(value, str) or len(value) > limit:
        _fail(f"{what} must be a string of at most {limit:,} characters")
    return value


def _number(value, what: str, allow_none: bool = True) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        _fail(f"{what} must be a finite number")
    return float(value)


def _int(value, what: str, low: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
        _fail(f"{what} must be an integer{'' if low is None else f' >= {low}'}")
    return value


def _bool(value, what: str) -> bool:
    if not isinstance(value, bool):
        _fail(f"{what} must be true or false")
    return value


def load_graph_json(data: bytes) -> dict:
    """A graph JSON file (Neuronpedia's format, module docstring), checked as every upload is; returns the parsed,
    normalised dict (only the known fields, with their types).

    Checks, in order: the size (at most 100 MB, Neuronpedia's cap) before anything is decoded; UTF-8; JSON (no NaN or
    Infinity, no nesting deep enough to exhaust the parser); the top-level fields and their types; counts (at most
    200,000 nodes and 5,000,000 links); every node id a unique string, every number finite, every position within
    the prompt; every link between existing nodes.

    Raises:
        GraphFileError: one line naming the first problem found.
    """
    if not isinstance(data, (bytes, bytearray)):
        _fail("a graph file must be bytes")
    if len(data) > MAX_GRAPH_BYTES:
        _fail(f"the file is {len(data) / 2 ** 20:,.1f} MB; a graph file may be at most {MAX_GRAPH_BYTES >> 20} MB")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        _fail("the file is not UTF-8 text")
    try:
        raw = json.loads(text, parse_constant=_reject_constant)
    except GraphFileError:
        raise
    except RecursionError:
        _fail("the file nests too deeply to be a graph")
    except ValueError as exc:  # JSONDecodeError, and integers longer than Python's digit limit
        _fail(f"the file is not valid JSON ({str(exc).splitlines()[0][:120]})")
    if not isinstance(raw, dict):
        _fail("a graph file holds one JSON object with metadata, nodes and links")
    for key in ("metadata", "nodes", "links"):
        if key not in raw:
            _fail(f"the graph has no {key!r}")
    meta_in, nodes_in, links_in = raw["metadata"], raw["nodes"], raw["links"]
    if not isinstance(meta_in, dict) or not isinstance(nodes_in, list) or not isinstance(links_in, list):
        _fail("metadata must be an object, nodes and links lists")
    if len(nodes_in) > MAX_NODES or len(links_in) > MAX_LINKS:
        _fail(f"the graph has {len(nodes_in):,} nodes and {len(links_in):,} links; at most {MAX_NODES:,} and "
              f"{MAX_LINKS:,} are read")
    tokens = meta_in.get("prompt_tokens", [])
    if not isinstance(tokens, list) or len(tokens) > MAX_NODES:
        _fail("metadata.prompt_tokens must be a list of strings")
    transcoders = meta_in.get("transcoder_list") or []
    if not isinstance(transcoders, list) or len(transcoders) > 10_000:
        _fail("metadata.transcoder_list must be a list of strings")
    meta = {"slug": _string(meta_in.get("slug", "graph"), "metadata.slug", 500),
            "scan": _string(meta_in.get("scan", ""), "metadata.scan", 500),
            "transcoder_list": [_string(t, "metadata.transcoder_list", 500) for t in transcoders],
            "prompt_tokens": [_string(t, "a prompt token", 1000) for t in tokens],
            "prompt": _string(meta_in.get("prompt", ""), "metadata.prompt", 1_000_000),
            "node_threshold": _number(meta_in.get("node_threshold"), "metadata.node_threshold"),
            "schema_version": _int(meta_in.get("schema_version", 1), "metadata.schema_version", 0)}
    n_pos = len(meta["prompt_tokens"])
    nodes, seen = [], set()
    for i, node in enumerate(nodes_in):
        if not isinstance(node, dict):
            _fail(f"node {i} is not an object")
        nid = _string(node.get("node_id"), f"node {i}'s node_id", 200)
        if nid in seen:
            _fail(f"two nodes share the id {nid[:60]!r}")
        seen.add(nid)
        ctx = _int(node.get("ctx_idx"), f"node {nid[:60]!r}'s ctx_idx", 0)
        if n_pos and ctx >= n_pos:
            _fail(f"node {nid[:60]!r} sits at position {ctx}, beyond the prompt's {n_pos} tokens")
        ftype = _string(node.get("feature_type", ""), f"node {nid[:60]!r}'s feature_type", 100)
        layer = node.get("layer")
        layer = str(_int(layer, "a node's layer")) if isinstance(layer, int) else _string(layer, "a node's layer", 20)
        prob = _number(node.get("token_prob", 0.0), f"node {nid[:60]!r}'s token_prob", allow_none=False)
        if not 0.0 <= prob <= 1.0:
            _fail(f"node {nid[:60]!r}'s token_prob must lie in [0, 1]")
        item = {"node_id": nid, "feature": _int(node.get("feature", 0), f"node {nid[:60]!r}'s feature"),
                "layer": layer, "ctx_idx": ctx, "feature_type": ftype,
                "jsNodeId": _string(node.get("jsNodeId", nid), f"node {nid[:60]!r}'s jsNodeId", 200),
                "clerp": _string(node.get("clerp", "") or "", f"node {nid[:60]!r}'s clerp"),
                "influence": _number(node.get("influence"), f"node {nid[:60]!r}'s influence"),
                "activation": _number(node.get("activation"), f"node {nid[:60]!r}'s activation"),
                "token_prob": prob, "is_target_logit": _bool(node.get("is_target_logit", False), "is_target_logit")}
        if "feature_index" in node:
            item["feature_index"] = _int(node["feature_index"], f"node {nid[:60]!r}'s feature_index", 0)
        nodes.append(item)
    links = []
    for i, link in enumerate(links_in):
        if not isinstance(link, dict):
            _fail(f"link {i} is not an object")
        s = _string(link.get("source"), f"link {i}'s source", 200)
        t = _string(link.get("target"), f"link {i}'s target", 200)
        if s not in seen or t not in seen:
            _fail(f"link {i} joins a node that is not in the graph ({(s if s not in seen else t)[:60]!r})")
        links.append({"source": s, "target": t, "weight": _number(link.get("weight"), f"link {i}'s weight", False)})
    q_in = raw.get("qParams") or {}
    if not isinstance(q_in, dict):
        _fail("qParams must be an object")
    pinned = q_in.get("pinnedIds", [])
    supernodes = q_in.get("supernodes", [])
    if not isinstance(pinned, list) or not isinstance(supernodes, list) or len(pinned) > MAX_NODES \
            or len(supernodes) > 10_000:
        _fail("qParams.pinnedIds and qParams.supernodes must be lists")
    q = {"pinnedIds": [_string(p, "a pinned id", 200) for p in pinned],
         "supernodes": [[_string(x, "a supernode entry", 200) for x in group] if isinstance(group, list)
                        and len(group) <= 10_000 else _fail("each supernode must be a list of strings")
                        for group in supernodes],
         "linkType": _string(q_in.get("linkType", "both"), "qParams.linkType", 20),
         "clickedId": _string(q_in.get("clickedId", ""), "qParams.clickedId", 200),
         "sg_pos": _string(q_in.get("sg_pos", ""), "qParams.sg_pos", 10_000)}
    return {"metadata": meta, "qParams": q, "nodes": nodes, "links": links}
