"""Attribution graphs' JSON (Neuronpedia's schema), hostile graph files, interventions and the contribution graph,
each against an independent computation."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import small_model
from test_circuits import random_transcoders
from viz_model import load_model
from viz_model.circuits import attribute
from viz_model.circuits.contribution import contribution_graph
from viz_model.circuits.graph_json import GraphFileError, load_graph_json, node_id, node_index, to_graph_json
from viz_model.circuits.intervene import feature_intervention, feature_intervention_generate
from viz_model.circuits import graph_json as graph_json_module
from viz_model.circuits import contribution as contribution_module

transformers = pytest.importorskip("transformers")
from hf_models import bert_config, build, gpt2_config, llama_config, save  # noqa: E402

NODE_FIELDS = {"node_id": str, "feature": int, "layer": str, "ctx_idx": int, "feature_type": str, "token_prob": float,
               "is_target_logit": bool, "run_idx": int, "reverse_ctx_idx": int, "jsNodeId": str, "clerp": str}


@pytest.fixture(scope="module")
def graph():
    model = small_model(seed=8, n_layers=3)
    g = attribute(model, torch.randint(0, 320, (10,), generator=torch.Generator().manual_seed(2)),
                  random_transcoders(model, seed=1), scan="test-set")
    return g


def text(i: int) -> str:
    return f"t{i}"


def test_graph_json_follows_neuronpedias_schema_and_round_trips(graph):
    data = to_graph_json(graph, text, slug="s", prompt="p", node_threshold=0.9, edge_threshold=0.99)
    assert set(data) == {"metadata", "qParams", "nodes", "links"}
    assert data["metadata"]["prompt_tokens"] == [text(int(t)) for t in graph.input_tokens]
    assert data["metadata"]["scan"] == "test-set" and data["metadata"]["schema_version"] == 1
    ids = [n["node_id"] for n in data["nodes"]]
    assert len(ids) == len(set(ids))
    for node in data["nodes"]:
        for key, kind in NODE_FIELDS.items():
            assert isinstance(node[key], kind), (key, node)
    kinds = {n["feature_type"] for n in data["nodes"]}
    assert {"embedding", "logit", "cross layer transcoder"} <= kinds
    logits = [n for n in data["nodes"] if n["feature_type"] == "logit"]
    assert sum(n["is_target_logit"] for n in logits) == 1 and len(logits) == graph.n_logits
    by_id = {n["node_id"]: n for n in data["nodes"]}
    # link weights are adjacency entries (row = target, column = source)
    index = {node_id(graph, i): i for i in range(graph.n_nodes)}
    for link in data["links"][:200]:
        assert link["weight"] == pytest.approx(float(graph.adjacency[index[link["target"]], index[link["source"]]]))
        assert link["source"] in by_id and link["target"] in by_id
    back = load_graph_json(json.dumps(data).encode())
    assert back["nodes"] == [{k: v for k, v in n.items() if k not in ("run_idx", "reverse_ctx_idx")} for n in data["nodes"]]
    assert back["links"] == data["links"] and back["metadata"]["prompt"] == "p"


def test_error_ids_never_equal_feature_ids(graph):
    # circuit-tracer issue 78: error (layer L, pos P) was "0_L_P", the id of feature L of layer 0 at P
    errors = {node_id(graph, i) for i in range(graph.error_start, graph.token_start)}
    features = {f"{layer}_{feat}_{pos}" for layer in range(3) for feat in range(48) for pos in range(graph.n_pos)}
    assert len(errors) == 3 * graph.n_pos and not errors & features
    assert all(node_id(graph, i) not in errors for i in range(graph.n_features))


def test_a_node_id_leads_back_to_its_node(graph):
    assert [node_index(graph, node_id(graph, i)) for i in range(graph.n_nodes)] == list(range(graph.n_nodes))
    odd = ["", "x", "0_1", "0_1_2_3", f"0_0_{graph.n_pos}", "0_0_-1", "99_0_0", "E_x_0", f"{graph.n_layers + 1}_-5_0",
           "-1_0_0", "E_0_0" if int(graph.input_tokens[0]) else "E_1_0"]
    assert [node_index(graph, o) for o in odd] == [None] * len(odd)


@pytest.mark.parametrize("data, message", [
    (b"\xff\xfe", "not UTF-8"),
    (b"{", "not valid JSON"),
    (b'{"metadata": {}, "nodes": [], "links": [NaN]}', "finite"),
    (b'{"metadata": {}, "nodes": [{"node_id": "a", "layer": "0", "ctx_idx": 0, "influence": 1e999}], "links": []}', "finite"),
    (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
    (b'[1, 2]', "one JSON object"),
    (b'{"metadata": {}, "nodes": []}', "no 'links'"),
    (b'{"metadata": {}, "nodes": [{"node_id": "a", "layer": "0", "ctx_idx": 0}, {"node_id": "a", "layer": "0", "ctx_idx": 0}], "links": []}',
     "share the id"),
    (b'{"metadata": {}, "nodes": [{"node_id": "a", "layer": "0", "ctx_idx": 0}], "links": [{"source": "a", "target": "b", '
     b'"weight": 1}]}', "not in the graph"),
    (b'{"metadata": {"prompt_tokens": ["x"]}, "nodes": [{"node_id": "a", "layer": "0", "ctx_idx": 3}], "links": []}',
     "beyond the prompt"),
    (b'{"metadata": {}, "nodes": [{"node_id": "a", "layer": "0", "ctx_idx": -1}], "links": []}', "ctx_idx"),
    (b'{"metadata": {}, "nodes": [{"node_id": 5, "layer": "0", "ctx_idx": 0}], "links": []}', "node_id"),
    (b'{"metadata": {}, "nodes": [{"node_id": "a", "layer": "0", "ctx_idx": 0, "feature": ' + b"9" * 5000 + b"}], \"links\": []}",
     "not valid JSON"),
    (b'{"metadata": {}, "nodes": [{"node_id": "a", "layer": "0", "ctx_idx": 0, "token_prob": 2}], "links": []}', "token_prob"),
    (b'{"metadata": {}, "nodes": [{"node_id": "a", "layer": "0", "ctx_idx": 0, "is_target_logit": "yes"}], "links": []}',
     "true or false"),
    (b'{"metadata": {}, "nodes": [], "links": [], "qParams": {"pinnedIds": "a"}}', "qParams"),
    (b'{"metadata": {"prompt_tokens": "abc"}, "nodes": [], "links": []}', "prompt_tokens"),
])
def test_hostile_graph_files_get_one_line(data, message):
    with pytest.raises(GraphFileError, match=message) as info:
        load_graph_json(data)
    assert "\n" not in str(info.value)


def test_graph_file_size_is_checked_before_decoding(monkeypatch):
    calls = []
    monkeypatch.setattr(graph_json_module.json, "loads", lambda *a, **k: calls.append(1))
    with pytest.raises(GraphFileError, match="at most 100 MB"):
        load_graph_json(b" " * (100 * 1024 * 1024 + 1))
    assert not calls


def test_graph_file_counts_are_capped(monkeypatch):
    monkeypatch.setattr(graph_json_module, "MAX_NODES", 3)
    nodes = [{"node_id": str(i), "ctx_idx": 0} for i in range(4)]
    with pytest.raises(GraphFileError, match="at most 3"):
        load_graph_json(json.dumps({"metadata": {}, "nodes": nodes, "links": []}).encode())


# ---------------------------------------------------------------- interventions

def test_feature_intervention_at_the_last_layer_matches_the_unembedding_of_the_changed_stream():
    model = small_model(seed=3, n_layers=2)
    with torch.no_grad():  # sharp attention, so that a change of the stream moves the live patterns
        for block in model.blocks:
            block.attn.W_Q.mul_(20)
            block.attn.W_K.mul_(20)
    tcs = random_transcoders(model, seed=5)
    ids = torch.randint(0, 320, (6,), generator=torch.Generator().manual_seed(4))
    logits, acts = feature_intervention(model, ids, tcs, [])
    with torch.no_grad():
        clean_logits, cache = model.run_with_cache(ids[None], names_filter=["blocks.1.hook_resid_post",
                                                                           "blocks.1.ln2.hook_normalized"])
    torch.testing.assert_close(logits, clean_logits[0], rtol=1e-5, atol=1e-5)
    f = tcs[1].encode(cache["blocks.1.ln2.hook_normalized"][0])
    torch.testing.assert_close(acts[1], f)
    feat = int(f[5].argmax())
    for freeze in (True, False):
        changed, acts2 = feature_intervention(model, ids, tcs, [(1, 5, feat, 0.0)], freeze_attention=freeze)
        stream = cache["blocks.1.hook_resid_post"][0, 5] - f[5, feat] * tcs[1].W_dec[feat]
        with torch.no_grad():
            expected = model.decode(stream[None])[0]
        torch.testing.assert_close(changed[5], expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(changed[:5], clean_logits[0, :5], rtol=1e-5, atol=1e-5)
        assert float(acts2[1, 5, feat]) == 0.0
    # an earlier layer's change reaches later positions only through attention: frozen patterns differ from live ones
    frozen, _ = feature_intervention(model, ids, tcs, [(0, 2, int(acts[0, 2].argmax()), 20.0)], freeze_attention=True)
    live, _ = feature_intervention(model, ids, tcs, [(0, 2, int(acts[0, 2].argmax()), 20.0)], freeze_attention=False)
    torch.testing.assert_close(frozen[:2], clean_logits[0, :2], rtol=1e-5, atol=1e-5)
    assert (frozen[3:] - live[3:]).abs().max() > 1e-4


def test_generation_without_interventions_is_greedy_decoding():
    model = small_model(seed=9, n_layers=2)
    tcs = random_transcoders(model, seed=2)
    ids = torch.randint(0, 320, (5,), generator=torch.Generator().manual_seed(8))
    new, first = feature_intervention_generate(model, ids, tcs, [], max_new_tokens=8)
    seq = ids.clone()
    for _ in range(8):
        with torch.no_grad():
            seq = torch.cat([seq, model(seq[None])[0, -1].argmax()[None]])
    assert new.tolist() == seq[5:].tolist()
    ablated, first2 = feature_intervention_generate(model, ids, tcs, [(1, 4, 0, 50.0)], max_new_tokens=8)
    assert not torch.equal(first, first2)


# ---------------------------------------------------------------- the contribution graph

def reference_importances(hf, ids, kind: str, p: int = 1):
    """Ferrando & Voita's proximity importances computed from `transformers`' own modules, whole tensors, float64."""
    hf = hf.double()
    with torch.no_grad():
        out = hf(ids[None], output_attentions=True, output_hidden_states=True)
    n = len(ids)
    norm = (lambda t: t.abs().sum(-1)) if p == 1 else (lambda t: t.pow(2).sum(-1).sqrt())
    attn_all, resid_all, mlp_all, mlp_resid_all = [], [], [], []
    layers = hf.transformer.h if kind == "gpt2" else (hf.model.layers if kind == "llama" else hf.bert.encoder.layer)
    x = out.hidden_states[0][0]
    for i, block in enumerate(layers):
        A = out.attentions[i][0]  # [H, q, k]
        H = A.shape[0]
        with torch.no_grad():
            if kind == "gpt2":
                d = x.shape[-1]
                v = block.attn.c_attn(block.ln_1(x))[:, 2 * d:].view(n, H, -1)
                W_O = block.attn.c_proj.weight.view(H, -1, d)
                parts = torch.einsum("hqk,khe,hed->qkhd", A, v, W_O)
                mid = x + parts.sum((1, 2)) + block.attn.c_proj.bias
                resid_part = x
                mlp_out = block.mlp(block.ln_2(mid))
                post = mid + mlp_out
                mlp_part, mid_part = mlp_out, mid
            elif kind == "llama":
                attn = block.self_attn
                d = x.shape[-1]
                h = block.input_layernorm(x)
                kv = attn.config.num_key_value_heads
                v = attn.v_proj(h).view(n, kv, -1).repeat_interleave(H // kv, 1)
                W_O = attn.o_proj.weight.T.reshape(H, -1, d)
                parts = torch.einsum("hqk,khe,hed->qkhd", A, v, W_O)
                mid = x + parts.sum((1, 2))
                resid_part = x
                mlp_out = block.mlp(block.post_attention_layernorm(mid))
                post = mid + mlp_out
                mlp_part, mid_part = mlp_out, mid
            else:  # BERT, post-LN: mid = LN1(x + attn), post = LN2(mid + mlp); parts through the frozen LN
                sa = block.attention
                d = x.shape[-1]
                v = sa.self.value(x).view(n, H, -1)
                W_O = sa.output.dense.weight.T.reshape(H, -1, d)
                raw = torch.einsum("hqk,khe,hed->qkhd", A, v, W_O)
                s1 = x + raw.sum((1, 2)) + sa.output.dense.bias
                ln1 = sa.output.LayerNorm
                scale1 = (s1.var(-1, unbiased=False, keepdim=True) + ln1.eps).sqrt()
                centre = lambda t: t - t.mean(-1, keepdim=True)
                parts = centre(raw) / scale1[:, None, None] * ln1.weight
                resid_part = centre(x) / scale1 * ln1.weight
                mid = ln1(s1)
                inter = block.intermediate(mid)
                mlp_raw = block.output.dense(inter)
                s2 = mid + mlp_raw
                ln2 = block.output.LayerNorm
                scale2 = (s2.var(-1, unbiased=False, keepdim=True) + ln2.eps).sqrt()
                post = ln2(s2)
                mlp_part, mid_part = centre(mlp_raw) / scale2 * ln2.weight, centre(mid) / scale2 * ln2.weight
        imp = (norm(mid)[:, None, None] - norm(mid[:, None, None] - parts)).clamp(min=0)
        ir = (norm(mid) - norm(mid - resid_part)).clamp(min=0)
        tot = imp.sum((1, 2)) + ir
        attn_all.append(imp / tot[:, None, None])
        resid_all.append(ir / tot)
        im, imr = (norm(post) - norm(post - mlp_part)).clamp(min=0), (norm(post) - norm(post - mid_part)).clamp(min=0)
        mlp_all.append(im / (im + imr))
        mlp_resid_all.append(imr / (im + imr))
        x = post
    return [torch.stack(t).float() for t in (attn_all, resid_all, mlp_all, mlp_resid_all)]


@pytest.mark.parametrize("kind, p", [("gpt2", 1), ("gpt2", 2), ("llama", 1), ("bert", 1)])
def test_contribution_graph_matches_a_direct_computation_on_transformers(tmp_path, kind, p, monkeypatch):
    if kind == "gpt2":
        ref = build("GPT2LMHeadModel", gpt2_config(n_layer=3))
    elif kind == "llama":
        ref = build("LlamaForCausalLM", llama_config(num_hidden_layers=2))
    else:
        ref = build("BertForMaskedLM", bert_config())
    model, _ = load_model(save(ref, tmp_path / kind))
    ids = torch.randint(0, model.cfg.d_vocab, (12,), generator=torch.Generator().manual_seed(3))
    monkeypatch.setattr(contribution_module, "BLOCK_BYTES", 3 * 12 * model.cfg.n_heads * model.cfg.d_model * 4)
    got = contribution_graph(model, ids, p=p)
    attn, resid, mlp, mlp_resid = reference_importances(ref, ids, kind, p)
    torch.testing.assert_close(got.attn, attn, rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(got.attn_resid, resid, rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(got.mlp, mlp, rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(got.mlp_resid, mlp_resid, rtol=1e-3, atol=1e-5)
    if kind != "bert":
        assert got.attn[:, 2, 3:].abs().max() == 0  # causal: no importance from later keys


def test_contribution_edges_lead_to_the_output():
    model = small_model(seed=3, n_layers=2)
    g = contribution_graph(model, torch.arange(6))
    edges = g.edges(threshold=0.04)
    assert edges and all(w >= 0.04 for _, _, w, _ in edges)
    # every kept node reaches I2_5 (the output at the last position) through kept edges
    nxt = {}
    for s, t, _, _ in edges:
        nxt.setdefault(s, set()).add(t)
    def reaches(node, seen=()):
        return node == "I2_5" or any(reaches(t, seen + (node,)) for t in nxt.get(node, ()) if t not in seen)
    assert all(reaches(s) for s, _, _, _ in edges)
    assert g.edges(threshold=1.01) == []


# ---------------------------------------------------------------- what the page sends the browser

@pytest.mark.parametrize("threshold", [0.3, 0.6, 0.8, 0.9])
def test_the_browsers_node_filter_keeps_what_find_threshold_keeps(graph, threshold):
    from viz_model.circuits import compute_node_influence, find_threshold
    from viz_ui.analysis.circuits import graph_payload
    labels = [f"t{i}" for i in range(graph.n_pos)]
    payload = graph_payload(graph, labels, [f"v{i}" for i in range(320)])
    influence = compute_node_influence(graph.adjacency, graph.logit_weights())
    cut = find_threshold(influence, threshold)
    by_id = {node_id(graph, i): i for i in range(graph.n_nodes)}
    for node in payload["nodes"]:
        if node["kind"] in ("feature", "error"):
            assert (node["share"] < threshold) == bool(influence[by_id[node["id"]]] >= cut), node["id"]
    # the logit nodes' labels are their tokens, and every token position is there
    assert [n["label"] for n in payload["nodes"] if n["kind"] == "logit"] == [f"v{int(t)}" for t in graph.logit_tokens]
    assert sorted(n["pos"] for n in payload["nodes"] if n["kind"] == "token") == list(range(graph.n_pos))
