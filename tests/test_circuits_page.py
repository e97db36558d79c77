"""The Circuits page (AppTest): the attribution graph on the shipped model and its transcoders, the view kept in the
link (pins, supernodes, clicked node and edge), interventions, the graph file, Export as code, and the contribution
graph of a model without transcoders."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, component_data
from viz_model import load_model
from viz_model.circuits import attribute, graph_scores, load_transcoders
from viz_model.circuits.graph_json import load_graph_json, node_id
from viz_ui.app.circuit_graph import PALETTES, clean_view
from helpers import child_env, open_page

TEXT = "Once upon a time, there was a little girl named Lily. She liked to"
SHIPPED = ROOT / "assets" / "dictionaries" / "tinystories-6l"


@pytest.fixture(scope="module")
def shipped_graph():
    model, tok = load_model()
    ids = torch.tensor(tok.encode(TEXT).ids)
    return model, tok, attribute(model, ids, load_transcoders(SHIPPED))


def page(monkeypatch, query: dict | None = None, text: str = TEXT):
    monkeypatch.setenv("VIZ_GATE_SECONDS", "inf")  # compute at once: no button in the test
    return open_page("pages/circuits.py", text=text, query=query)


def metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label.startswith(label))


def test_the_page_draws_the_shipped_models_attribution_graph(monkeypatch, shipped_graph):
    model, tok, graph = shipped_graph
    at = page(monkeypatch)
    replacement, completeness = graph_scores(graph)
    assert metric(at, "Replacement score") == f"{replacement:.3f}"
    assert metric(at, "Completeness score") == f"{completeness:.3f}"
    data = component_data(at, "circuit_graph")
    payload = json.loads(data["payload"])
    assert payload["mode"] == "attribution" and payload["n_layers"] == model.cfg.n_layers
    logits = [n for n in payload["nodes"] if n["kind"] == "logit"]
    top = int(graph.logit_tokens[0])
    assert logits[0]["id"] == node_id(graph, graph.logit_start) and str(top) in logits[0]["id"]
    assert logits[0]["act"] == pytest.approx(float(graph.logit_probabilities[0]), abs=1e-4)
    # every link is an adjacency entry between nodes of the graph
    ids = {node_id(graph, i): i for i in range(graph.n_nodes)}
    for s, t, w, share in payload["links"][:300]:
        assert w == pytest.approx(float(graph.adjacency[ids[payload["nodes"][t]["id"]], ids[payload["nodes"][s]["id"]]]),
                                  rel=1e-4, abs=1e-6)
        assert 0 <= share < 1
    tokens = [n for n in payload["nodes"] if n["kind"] == "token"]
    assert len(tokens) == graph.n_pos
    assert data["state"] == clean_view(None)


def test_the_view_in_the_link_pins_clicks_and_splits_an_edge(monkeypatch, shipped_graph):
    model, tok, graph = shipped_graph
    row = graph.adjacency[graph.logit_start]
    # the top logit's strongest cross-position feature input
    feats = [i for i in row.abs().argsort(descending=True).tolist() if i < graph.n_features
             and graph.node_location(i)[1] != graph.n_pos - 1]
    src = feats[0]
    pinned = [node_id(graph, src), node_id(graph, feats[1])]
    view = {"node_t": 0.7, "edge_t": 0.95, "pinned": pinned, "supernodes": [["pair", *pinned]],
            "clicked": node_id(graph, src), "view": "pinned",
            "edge": [node_id(graph, src), node_id(graph, graph.logit_start)]}
    at = page(monkeypatch, query={"cg": json.dumps(view)})
    assert not at.exception
    assert component_data(at, "circuit_graph")["state"] == view
    assert metric(at, "Pinned subgraph (2 features)")
    # the clicked feature's card (the Features page's) and its inputs / outputs
    assert any(s.value.replace("\\", "").startswith("Feature: " + node_id(graph, src)) for s in at.subheader)
    # the edge's heads and the QK split of the first
    assert any(s.value.startswith("Edge ") for s in at.subheader)
    assert any(s.value.startswith("Why this score?") for s in at.subheader)
    # the intervention on the supernode (ablation by default) changes the next-token probabilities
    assert at.selectbox(key="cg_target").value == "supernode pair"
    assert any(m.value.startswith("**20 greedy tokens, intact:**") for m in at.markdown)


def test_hostile_links_fall_back_to_the_default_view(monkeypatch):
    for raw in ("{not json", json.dumps({"node_t": "x", "pinned": [1, {"a": 2}], "edge": ["a"], "view": "evil"}),
                json.dumps([1, 2]), "[" * 5000):
        at = page(monkeypatch, query={"cg": raw})
        assert not at.exception and not at.error
        state = component_data(at, "circuit_graph")["state"]
        assert state["view"] == "full" and state["pinned"] == [] and state["edge"] is None


def test_export_as_code_reproduces_the_scores(monkeypatch, shipped_graph, tmp_path):
    model, tok, graph = shipped_graph
    at = page(monkeypatch)
    code = next(c.value for c in at.code if "attribute(model, tokens, transcoders" in c.value)
    written = tmp_path / "graph.json"
    assert "open('graph.json', 'w')" in code
    code = code.replace("open('graph.json', 'w')", f"open({str(written)!r}, 'w')")  # not into the checkout
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env=child_env())
    assert out.returncode == 0, out.stderr
    data = load_graph_json(written.read_bytes())
    assert data["nodes"] and data["links"]
    replacement, completeness = graph_scores(graph)
    assert f"replacement score: {round(replacement, 4)}" in out.stdout
    assert f"completeness score: {round(completeness, 4)}" in out.stdout


def test_a_model_without_transcoders_gets_the_contribution_graph(monkeypatch):
    at = page(monkeypatch, query={"model": "tinystories-moe"})
    assert any("contribution graph" in i.value for i in at.info)
    payload = json.loads(component_data(at, "circuit_graph")["payload"])
    assert payload["mode"] == "contribution"
    assert any(n["id"] == f"I{payload['n_layers']}_{len(payload['tokens']) - 1}" for n in payload["nodes"])


def test_palettes_keep_text_readable():
    def luminance(hex_colour: str) -> float:
        rgb = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    def contrast(a: str, b: str) -> float:
        la, lb = sorted((luminance(a), luminance(b)), reverse=True)
        return (la + 0.05) / (lb + 0.05)

    for palette in PALETTES.values():
        for text in ("ink", "muted", "accent", "pos-text", "neg-text"):
            assert contrast(palette[text], palette["surface"]) >= 4.5, text
        for shape in ("feature", "error", "token", "logit", "pos", "neg"):
            assert contrast(palette[shape], palette["surface"]) >= 3.0, shape
