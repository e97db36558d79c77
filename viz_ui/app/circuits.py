"""Streamlit glue of the Circuits page: which transcoder sets this session may use for the loaded model, attribution
and contribution graphs computed behind the gate (:func:`viz_ui.app.gate.costly`) and kept once per server, and the
per-edge head splits and interventions the page asks for.

Graphs are kept by :func:`_graphs` (``st.cache_resource``: one object shared by every session, never copied: an
attribution graph's dense matrix is tens of megabytes), the gate's own cache holds only a receipt.
"""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st
import torch

from viz_model.circuits import CircuitError, Graph, attribute, check_model, edge_heads
from viz_model.circuits.contribution import ContributionGraph, contribution_graph
from viz_model.circuits.graph_json import load_graph_json
from viz_model.circuits.intervene import feature_intervention_generate
from viz_model.features.dictionary import TRANSCODER_IN
from viz_model.features.index import FeatureIndex
from viz_model.features.readout import top_promoted
from viz_ui.analysis.circuits import NodeCard, contribution_payload, graph_payload, json_payload
from viz_ui.app.features import dictionary, dictionary_sets, get_index
from viz_ui.app.gate import NotComputed, costly
from viz_ui.app.state import estimate_seconds, resolve

def transcoder_sets(model_path: str, n_layers: int) -> dict[str, tuple[str, ...]]:
    """The dictionary sets (:func:`viz_ui.app.features.dictionary_sets`) that hold one transcoder per layer of the
    model (folders ``blocks.{l}.ln2.hook_normalized``), as ``{label: folders ordered by layer}``."""
    out = {}
    for label, folders in dictionary_sets(model_path).items():
        by_layer = {}
        for folder in folders:
            m = TRANSCODER_IN.match(Path(folder).name)
            if m:
                by_layer[int(m.group(1))] = folder
        if sorted(by_layer) == list(range(n_layers)):
            out[label] = tuple(by_layer[layer] for layer in range(n_layers))
    return out


def supported(model) -> str | None:
    """Why attribution graphs cannot be built for ``model`` (one line), or None when they can."""
    try:
        check_model(model)
    except CircuitError as exc:
        return str(exc)
    return None


@st.cache_resource(max_entries=8, show_spinner=False)
def _graphs(key: tuple, _value=None):
    if _value is None:
        raise NotComputed(key)  # not cached: Streamlit keeps no value for a call that raises
    return _value


def _kept(key: tuple):
    try:
        return _graphs(key)
    except NotComputed:
        return None


def attribution_seconds(path: str, text: str, n_tokens: int, n_layers: int, k: int) -> float:
    """An estimate of :func:`viz_model.circuits.attribute`'s time in forward-equivalents of the text (the gate's
    unit): about 0.12 per row (a row's share of a batched backward pass through the attention and norms only, over a
    prefix of the prompt; measured on the shipped model: 4,600 rows at 32 tokens in 1.1 s, one copy's forward pass
    2.3 ms, bench/circuits.py) and 20 for the clean and frozen passes; rows ≈ ``n_layers · n_tokens · k``."""
    rows = n_layers * n_tokens * k + 10
    return estimate_seconds(path, text, 0.12 * rows + 20)


def attribution_graph(path: str, text: str, ids: tuple[int, ...], folders: tuple[str, ...], zero_first: bool,
                      where=None) -> Graph | None:
    """The attribution graph of ``ids`` through the transcoders in ``folders``, or None while the gate's button waits.

    Raises:
        CircuitError, CheckpointError: a model or transcoder set that cannot be used (one line).
    """
    key = ("attribution", path, ids, folders, zero_first)
    found = _kept(key)
    if found is not None:
        return found
    model, _ = resolve(path)
    tcs = {layer: dictionary(folder) for layer, folder in enumerate(folders)}
    k = max(tc.k or 32 for tc in tcs.values())

    def compute(progress):
        report = None if progress is None else (lambda f, m: progress(int(1000 * f), 1000))
        return attribute(model, torch.tensor(ids), tcs, zero_first_position=zero_first, progress=report,
                         scan=f"{len(folders)} transcoders")

    return _gated("circuit_graph", key, attribution_seconds(path, text, len(ids), model.cfg.n_layers, k), compute,
                  "Compute the attribution graph", where)


def contribution(path: str, text: str, ids: tuple[int, ...], where=None) -> ContributionGraph | None:
    """The contribution graph of ``ids`` (one forward pass), or None while the gate's button waits."""
    key = ("contribution", path, ids)
    found = _kept(key)
    if found is not None:
        return found
    model, _ = resolve(path)
    return _gated("contribution_graph", key, estimate_seconds(path, text, 3.0),
                  lambda progress: contribution_graph(model, torch.tensor(ids)), "Compute the contribution graph", where)


def _gated(name: str, key: tuple, seconds: float, compute, label: str, where):
    """``compute(progress)``'s graph through the gate (:func:`viz_ui.app.gate.costly`: a button above the time
    limit), kept under ``key``; None while the button waits."""
    def keep(progress):
        _graphs(key, compute(progress))
        return True

    if costly(name, key, seconds, keep, label, where) is None:
        return None
    found = _kept(key)
    if found is None:  # the receipt outlived the graph (evicted): compute it again, now
        keep(None)
        found = _kept(key)
    return found


@st.cache_resource(max_entries=16, show_spinner=False)
def _payload(key: tuple, _graph, _labels: tuple[str, ...], _vocab: list[str], _folders: tuple[str, ...] = ()) -> str:
    """The browser's JSON of a graph, written once per server (``key`` names the graph)."""
    model, _ = resolve(key[1])
    if isinstance(_graph, ContributionGraph):
        return json.dumps(contribution_payload(_graph, list(_labels), model.cfg.n_layers), separators=(",", ":"))
    vocab = _vocab
    indexes: dict[int, FeatureIndex | None] = {layer: get_index(f, model.cfg.d_vocab) for layer, f in enumerate(_folders)}
    dicts = {layer: dictionary(f) for layer, f in enumerate(_folders)}

    def cards(wanted: list[tuple[int, int]]) -> dict[tuple[int, int], NodeCard]:
        out = {}
        for layer in sorted({lf[0] for lf in wanted}):
            feats = [f for l, f in wanted if l == layer]
            promoted = top_promoted(model, dicts[layer], feats, n=5)
            index = indexes.get(layer)
            for feature, up in zip(feats, promoted.tolist()):
                contexts = []
                for c in (index.contexts(feature)[:3] if index is not None else []):
                    peak = c.peak
                    contexts.append("".join(vocab[t] for t in c.tokens[max(0, peak - 8):peak]) + " [" + vocab[c.tokens[peak]]
                                    + "] " + "".join(vocab[t] for t in c.tokens[peak + 1:peak + 4]))
                out[(layer, feature)] = NodeCard([vocab[int(i)] for i in up], contexts)
        return out

    payload = graph_payload(_graph, list(_labels), vocab, cards=cards)
    return json.dumps(payload, separators=(",", ":"))


@st.cache_resource(max_entries=4, show_spinner=False)
def uploaded_graph(file_id: str, _data: bytes) -> tuple[dict, str]:
    """An uploaded graph file (``file_id``: the upload's id; ``_data`` its bytes) read and checked
    (:func:`viz_model.circuits.graph_json.load_graph_json`) with the browser's JSON of it: once per upload, not at
    every rerun (a file may hold 100 MB).

    Raises:
        GraphFileError: a file that is not a graph this page can draw (one line)."""
    data = load_graph_json(_data)
    return data, json.dumps(json_payload(data), separators=(",", ":"))


def payload_json(key: tuple, graph, labels: list[str], vocab: list[str], folders: tuple[str, ...] = ()) -> str:
    """:func:`_payload` for ``graph`` (``key``: the graph's key, ``(kind, model path, ...)``)."""
    return _payload(key, graph, tuple(labels), vocab, folders)


@st.cache_data(max_entries=64, show_spinner=False)
def head_split(path: str, ids: tuple[int, ...], folders: tuple[str, ...], zero_first: bool, target: int,
               source: int) -> list[list[float]]:
    """:func:`viz_model.circuits.edge_heads` of one edge of the kept graph, ``[n_layers][n_heads]``.

    Raises:
        CircuitError: the graph is no longer kept, or the nodes cannot be an edge's ends.
    """
    graph = _kept(("attribution", path, ids, folders, zero_first))
    if graph is None:
        raise CircuitError("the graph is no longer kept on this server: compute it again")
    return edge_heads(graph, target, source).tolist()


@st.cache_data(max_entries=32, show_spinner=False)
def intervention_runs(path: str, ids: tuple[int, ...], folders: tuple[str, ...],
                      interventions: tuple[tuple[int, int, int, float], ...],
                      error_scales: tuple[tuple[int, int, float], ...], n_new: int, stop: tuple[int, ...]
                      ) -> tuple[list[int], list[float], list[int], list[float]]:
    """``(intact tokens, intact first-step probabilities, changed tokens, changed probabilities)``: greedy
    continuations of ``ids`` without and with the interventions (attention frozen at the prompt's clean patterns)."""
    model, _ = resolve(path)
    tcs = {layer: dictionary(folder) for layer, folder in enumerate(folders)}
    intact, first = feature_intervention_generate(model, torch.tensor(ids), tcs, [], n_new, stop_ids=stop)
    changed, first2 = feature_intervention_generate(model, torch.tensor(ids), tcs, list(interventions), n_new,
                                                    error_scales=list(error_scales), stop_ids=stop)
    return (intact.tolist(), torch.softmax(first, -1).tolist(), changed.tolist(), torch.softmax(first2, -1).tolist())
