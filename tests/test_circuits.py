"""Attribution graphs (viz_model.circuits) against independent computations.

- Edges against finite differences on a `transformers` model (eager attention) under the same freezes, computed
  with hooks on transformers' own modules (float64), for a GPT-2 and a Llama (grouped-query, rotary, RMSNorm) model.
- A target's incoming edges sum to its value minus its value with every source zeroed (forward passes, no gradient).
- circuit-tracer's 12-node toy graph (tests/test_graph.py of circuit-tracer) for influence and edge influence.
- Scores on synthetic graphs; batch sizes 1 and 64 give the same graph; a capped graph's rows are the full graph's.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from conftest import small_model
from viz_model import load_model
from viz_model.circuits import (CircuitError, Graph, attribute, compute_edge_influence, compute_node_influence,
                                edge_heads, graph_scores, prune_graph, subgraph_scores)
from viz_model.features.train import init_dictionary

transformers = pytest.importorskip("transformers")
from hf_models import build, gpt2_config, llama_config, save  # noqa: E402


def random_transcoders(model, d_sae: int = 48, k: int = 6, seed: int = 0, scale: float = 1.0) -> dict:
    """One random TopK transcoder per layer (unit decoder rows, encoder = random / sqrt(d))."""
    d = model.cfg.d_model
    out = {}
    for layer in range(model.cfg.n_layers):
        tc = init_dictionary(torch.randn(64, d), torch.randn(64, d), d_sae, f"blocks.{layer}.ln2.hook_normalized",
                             "topk", k, f"blocks.{layer}.hook_mlp_out", seed=seed + layer)
        with torch.no_grad():
            tc.W_enc.mul_(scale * 3)
            tc.b_dec.normal_(0, 0.1)
        out[layer] = tc.eval().requires_grad_(False)
    return out


# ---------------------------------------------------------------- finite differences on a transformers model

class Frozen:
    """Hooks on a `transformers` model that freeze what the replacement model freezes, written against transformers'
    modules (not ours): attention weights (a registered attention function that records, then replays them), each
    norm's scale (the norm modules replaced by ones that divide by the recorded scale) and each MLP's output
    (replaced by the recorded value plus a perturbation)."""

    def __init__(self, hf, kind: str):
        self.hf, self.kind, self.mode = hf, kind, "record"
        self.weights, self.scales, self.mlp_out = {}, {}, {}
        self.delta_mlp, self.delta_embed = {}, None
        self.reads = {}
        name = f"frozen_{id(self)}"
        transformers.AttentionInterface.register(name, self.attention)
        hf.config._attn_implementation = name
        for sub in [hf.config] + [getattr(hf.config, k) for k in ("text_config",) if hasattr(hf.config, k)]:
            sub._attn_implementation = name
        body = hf.transformer if kind == "gpt2" else hf.model
        self.layers = body.h if kind == "gpt2" else body.layers
        for i, layer in enumerate(self.layers):
            n1, n2 = ("ln_1", "ln_2") if kind == "gpt2" else ("input_layernorm", "post_attention_layernorm")
            setattr(layer, n1, self.norm(getattr(layer, n1), ("ln1", i)))
            setattr(layer, n2, self.norm(getattr(layer, n2), ("ln2", i), read=i))
            layer.mlp = self.mlp(layer.mlp, i)
        final = "ln_f" if kind == "gpt2" else "norm"
        setattr(body, final, self.norm(getattr(body, final), ("final",), read="final"))
        embed = body.wte if kind == "gpt2" else body.embed_tokens
        embed.register_forward_hook(lambda mod, inp, out: out if self.delta_embed is None else out + self.delta_embed)

    def attention(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        n_rep = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(n_rep, 1), value.repeat_interleave(n_rep, 1)
        if self.mode == "record":
            scores = query @ key.transpose(-1, -2) * scaling
            if attention_mask is not None:
                scores = scores + attention_mask[..., :key.shape[-2]]
            else:
                n = scores.shape[-1]
                scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
            self.weights[module.layer_idx] = torch.softmax(scores, dim=-1)
        w = self.weights[module.layer_idx]
        return (w @ value).transpose(1, 2), w

    def norm(self, mod, key, read=None):
        outer = self

        class FrozenNorm(torch.nn.Module):
            def forward(self, x):
                rms = outer.kind != "gpt2"
                centred = x if rms else x - x.mean(-1, keepdim=True)
                if outer.mode == "record":
                    eps = mod.variance_epsilon if rms else mod.eps
                    outer.scales[key] = (centred.pow(2).mean(-1, keepdim=True) + eps).sqrt()
                y = centred / outer.scales[key] * mod.weight + (0 if rms else mod.bias)
                if read is not None:
                    outer.reads[read] = y
                return y
        return FrozenNorm()

    def mlp(self, mod, i):
        outer = self

        class FrozenMLP(torch.nn.Module):
            def forward(self, x):
                if outer.mode == "record":
                    outer.mlp_out[i] = mod(x)
                return outer.mlp_out[i] + outer.delta_mlp.get(i, 0)
        return FrozenMLP()

    def run(self, ids):
        with torch.no_grad():
            self.hf(ids)
        return dict(self.reads)


def target_value(reads, graph, prep, logit_vecs, node):
    kind = graph.node_kind(node)
    if kind == "logit":
        return float(reads["final"][0, -1] @ logit_vecs[node - graph.logit_start].double())
    active = int(graph.selected_features[node])
    layer, pos, _ = prep.active_features[active].tolist()
    return float(reads[layer][0, pos] @ prep.encoder_vecs[active].double())


def source_delta(frozen, graph, prep, node, n_pos, d):
    kind = graph.node_kind(node)
    frozen.delta_mlp, frozen.delta_embed = {}, None
    delta = torch.zeros(1, n_pos, d, dtype=torch.float64)
    if kind == "token":
        pos = node - graph.token_start
        delta[0, pos] = prep.token_vecs[pos].double()
        frozen.delta_embed = delta
        return
    if kind == "error":
        layer, pos = graph.node_location(node)
        delta[0, pos] = prep.errors[layer, pos].double()
    else:
        active = int(graph.selected_features[node])
        layer, pos, _ = prep.active_features[active].tolist()
        delta[0, pos] = prep.decoder_vecs[active].double()
    frozen.delta_mlp = {layer: delta}


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_edges_equal_finite_differences_on_transformers(tmp_path, kind):
    if kind == "gpt2":
        ref = build("GPT2LMHeadModel", gpt2_config(n_layer=3))
    else:
        ref = build("LlamaForCausalLM", llama_config(num_hidden_layers=3))
    model, _ = load_model(save(ref, tmp_path / kind))
    tcs = random_transcoders(model, seed=3)
    ids = torch.randint(0, model.cfg.d_vocab, (9,), generator=torch.Generator().manual_seed(1))
    graph = attribute(model, ids, tcs, batch_size=16)
    ctx = graph.context
    hf = ref.double()
    frozen = Frozen(hf, kind)
    frozen.run(ids[None])  # record the clean attention weights, norm scales and MLP outputs
    frozen.mode = "frozen"
    base = frozen.run(ids[None])
    d = model.cfg.d_model
    gen = torch.Generator().manual_seed(5)
    targets = [graph.logit_start] + torch.randint(0, graph.n_features, (6,), generator=gen).tolist()
    checked = 0
    for t in targets:
        t_layer = graph.node_location(t)[0]
        row = graph.adjacency[t]
        sources = [s for s in (row != 0).nonzero().flatten().tolist()]
        sources = sources[:: max(1, len(sources) // 12)]
        # also sources that cannot reach the target: later layers or positions (the edge must be exactly 0)
        for s in sources + [graph.token_start + graph.n_pos - 1]:
            source_delta(frozen, graph, ctx.prep, s, graph.n_pos, d)
            moved = frozen.run(ids[None])
            fd = target_value(moved, graph, ctx.prep, ctx.logit_vecs, t) - target_value(base, graph, ctx.prep,
                                                                                      ctx.logit_vecs, t)
            edge = float(graph.adjacency[t, s])
            assert edge == pytest.approx(fd, rel=2e-4, abs=2e-5 * (1 + row.abs().max().item())), (kind, t, s, t_layer)
            checked += 1
    assert checked > 30


# ---------------------------------------------------------------- the sum of a target's incoming edges

def frozen_values(model, ids, graph, zero_sources: bool):
    """Every target's value in the replacement model (patterns and norm scales frozen at the clean run's), with all
    sources in place or all zeroed: embeddings 0, each MLP output replaced by what is left when its features and error
    are removed (b_dec; the clean value at zeroed positions). Forward passes only."""
    ctx = graph.context
    names = [n for n in model.hook_dict if n.endswith("hook_scale") or n.endswith("hook_pattern")]
    _, clean = model.run_with_cache(ids[None], names_filter=names)
    hooks = [(n, lambda x, hook: clean[hook.name]) for n in names]
    if zero_sources:
        hooks.append(("hook_embed", lambda x, hook: torch.zeros_like(x)))
        for layer, tc in ctx.transcoders.items():
            def fn(x, hook, tc=tc):
                out = tc.b_dec.expand_as(x).clone()
                for pos in graph.zeroed_positions:
                    out[:, pos] = x[:, pos]
                return out
            hooks.append((f"blocks.{layer}.hook_mlp_out", fn))
    reads = {}
    for layer in range(model.cfg.n_layers):
        hooks.append((f"blocks.{layer}.ln2.hook_normalized", lambda x, hook: reads.__setitem__(hook.name, x)))
    hooks.append(("ln_final.hook_normalized", lambda x, hook: reads.__setitem__("final", x)))
    with torch.no_grad():
        model.run_with_hooks(ids[None], fwd_hooks=hooks)
    values = []
    for node in list(range(graph.n_features)) + list(range(graph.logit_start, graph.n_nodes)):
        if node >= graph.logit_start:
            values.append(float(reads["final"][0, -1] @ ctx.logit_vecs[node - graph.logit_start]))
        else:
            active = int(graph.selected_features[node])
            layer, pos, _ = ctx.prep.active_features[active].tolist()
            values.append(float(reads[f"blocks.{layer}.ln2.hook_normalized"][0, pos] @ ctx.prep.encoder_vecs[active]))
    return torch.tensor(values, dtype=torch.float64)


@pytest.mark.parametrize("zero_first", [False, True])
def test_incoming_edges_sum_to_the_value_minus_the_value_without_sources(zero_first):
    model = small_model(seed=2, n_layers=3)
    tcs = random_transcoders(model, seed=7)
    ids = torch.randint(0, model.cfg.d_vocab, (11,), generator=torch.Generator().manual_seed(3))
    graph = attribute(model, ids, tcs, batch_size=32, zero_first_position=zero_first)
    full = frozen_values(model, ids, graph, zero_sources=False)
    empty = frozen_values(model, ids, graph, zero_sources=True)
    targets = list(range(graph.n_features)) + list(range(graph.logit_start, graph.n_nodes))
    sums = graph.adjacency[targets].double().sum(1)
    torch.testing.assert_close(sums, full - empty, rtol=1e-4, atol=1e-4 * float((full - empty).abs().max()))
    # the frozen run's value of a feature target is its pre-activation minus b_enc (the clean run's)
    ctx = graph.context
    active = graph.selected_features[: graph.n_features]
    layer, pos, feat = ctx.prep.active_features[active[0]].tolist()
    _, cache = model.run_with_cache(ids[None], names_filter=f"blocks.{layer}.ln2.hook_normalized")
    pre = tcs[layer].hidden_pre(cache[f"blocks.{layer}.ln2.hook_normalized"][0, pos])[feat] - tcs[layer].b_enc[feat]
    assert float(full[0]) == pytest.approx(float(pre), rel=1e-4, abs=1e-5)
    if zero_first:  # no feature or error node at position 0: their columns hold nothing
        assert not (ctx.prep.active_features[:, 1] == 0).any()
        first_errors = [graph.error_start + layer * graph.n_pos for layer in range(model.cfg.n_layers)]
        assert graph.adjacency[:, first_errors].abs().max() == 0


def test_batch_sizes_give_the_same_graph_and_a_capped_graph_keeps_the_full_rows():
    model = small_model(seed=4, n_layers=2)
    tcs = random_transcoders(model, seed=11)
    ids = torch.randint(0, model.cfg.d_vocab, (8,), generator=torch.Generator().manual_seed(6))
    one = attribute(model, ids, tcs, batch_size=1)
    many = attribute(model, ids, tcs, batch_size=64)
    assert one.n_nodes == many.n_nodes and one.n_features == len(one.active_features)
    torch.testing.assert_close(one.adjacency, many.adjacency, rtol=1e-5, atol=1e-6)
    capped = attribute(model, ids, tcs, batch_size=7, max_feature_nodes=10)
    assert capped.n_features == 10
    sel = capped.selected_features
    keep = torch.cat([sel, torch.arange(many.n_features, many.n_nodes)])
    torch.testing.assert_close(capped.adjacency, many.adjacency[keep][:, keep], rtol=1e-5, atol=1e-6)
    # the kept features are the most influential ones reached from the logits
    influence = compute_node_influence(many.adjacency, many.logit_weights())[: many.n_features]
    assert influence[sel].min() >= influence.sort(descending=True).values[20] - 1e-9
    # a feature's node index from (layer, pos, feature): its node when kept, None when the cap left it out
    for node in range(capped.n_features):
        assert capped.feature_node(*capped.feature_of(node)[:3]) == node
    left_out = [i for i in range(len(capped.active_features)) if i not in set(sel.tolist())]
    assert left_out and all(capped.feature_node(*capped.active_features[i].tolist()) is None for i in left_out)


def test_a_graph_above_the_memory_limit_keeps_fewer_features_and_says_so(monkeypatch):
    model = small_model(seed=4, n_layers=2)
    tcs = random_transcoders(model, seed=11)
    ids = torch.randint(0, model.cfg.d_vocab, (8,), generator=torch.Generator().manual_seed(6))
    full = attribute(model, ids, tcs)
    others = full.n_nodes - full.n_features
    limit_mb = 4 * (others + 20) ** 2 / 2 ** 20  # room for the non-feature nodes and about 20 features
    monkeypatch.setenv("VIZ_GRAPH_MB", str(limit_mb))
    capped = attribute(model, ids, tcs)
    assert 0 < capped.n_features < full.n_features and capped.n_nodes ** 2 * 4 <= limit_mb * 2 ** 20
    assert "memory limit" in capped.message and "VIZ_GRAPH_MB" in capped.message and full.message == ""
    for odd in ("inf", "nan", "-1", "0", "lots"):  # an unusable limit is the default's, never a crash or no room
        monkeypatch.setenv("VIZ_GRAPH_MB", odd)
        assert attribute(model, ids, tcs).n_features == full.n_features, odd


def test_edge_heads_drops_add_up_to_the_edge_in_a_one_layer_model_and_are_zero_outside_the_path():
    model = small_model(seed=5, n_layers=1)
    tcs = random_transcoders(model, seed=2)
    ids = torch.randint(0, model.cfg.d_vocab, (7,), generator=torch.Generator().manual_seed(9))
    graph = attribute(model, ids, tcs)
    # token 2 -> logit (last position): every path crosses exactly one head of layer 0, so the drops sum to the edge
    src, tgt = graph.token_start + 2, graph.logit_start
    drops = edge_heads(graph, tgt, src)
    assert drops.shape == (1, model.cfg.n_heads)
    assert float(drops.sum()) == pytest.approx(float(graph.adjacency[tgt, src]), rel=1e-4, abs=1e-6)
    two = small_model(seed=6, n_layers=3)
    g2 = attribute(two, ids, random_transcoders(two, seed=4))
    feats = [i for i in range(g2.n_features) if g2.node_location(i)[0] == 1 and g2.node_location(i)[1] == 6]
    d2 = edge_heads(g2, feats[0], g2.token_start + 1)
    assert d2[2].abs().max() == 0 and d2[:2].abs().max() > 0  # a layer-1 feature reads before layer 2's heads
    with pytest.raises(CircuitError):
        edge_heads(g2, g2.token_start, g2.logit_start)


def test_refusals_are_one_line():
    model = small_model(seed=1, n_layers=2)
    tcs = random_transcoders(model)
    with pytest.raises(CircuitError, match="missing for layer"):
        attribute(model, torch.tensor([1, 2, 3]), {0: tcs[0]})
    with pytest.raises(CircuitError, match="no token"):
        attribute(model, torch.tensor([], dtype=torch.long), tcs)
    with pytest.raises(CircuitError, match="context"):
        attribute(model, torch.zeros(model.cfg.n_ctx + 1, dtype=torch.long), tcs)
    with pytest.raises(CircuitError, match=r"must read blocks\.1"):
        attribute(model, torch.tensor([1, 2]), {0: tcs[0], 1: tcs[0]})
    post = small_model(seed=1, n_layers=2, norm_placement="post")
    with pytest.raises(CircuitError, match="post-norm"):
        attribute(post, torch.tensor([1, 2]), tcs)


# ---------------------------------------------------------------- influence, pruning, scores

def toy_graph(adjacency: torch.Tensor, n_pos: int, n_layers: int, n_features: int) -> Graph:
    return Graph(adjacency=adjacency, active_features=torch.zeros(n_features, 3, dtype=torch.long),
                 selected_features=torch.arange(n_features), activation_values=torch.ones(n_features),
                 logit_tokens=torch.tensor([0]), logit_probabilities=torch.tensor([1.0]),
                 input_tokens=torch.arange(n_pos), n_layers=n_layers)


def test_circuit_tracers_toy_graph():
    """circuit-tracer's tests/test_graph.py::test_small_graph: 12 nodes, influences worked out by hand there."""
    value = 10
    edge = torch.zeros(12, 12)
    for node in [1, 3, 6, 8]:
        edge[11, node] = 1 / 4
    for node in [0, 1, 6]:
        edge[3, node] = 1 / 12
    for node in [9, 10]:
        edge[1, node] = 1 / 6
    edge[0, 9] = 1 / 12
    adjacency = (edge > 0).float() * value
    pruned = adjacency.clone()
    pruned[0, 9] = 0
    pruned[3, 0] = 0
    expected_edges = torch.zeros(12, 12)
    for node in [1, 3, 6, 8]:
        expected_edges[11, node] = 1 / 4
    for node in [1, 6]:
        expected_edges[3, node] = 1 / 8
    for node in [9, 10]:
        expected_edges[1, node] = 3 / 16
    weights = torch.zeros(12)
    weights[-1] = 1.0
    influence = compute_node_influence(adjacency, weights)
    torch.testing.assert_close(influence, torch.tensor([1 / 12, 1 / 3, 0, 1 / 4, 0, 0, 1 / 3, 0, 1 / 4, 1 / 4, 1 / 6, 0]))
    torch.testing.assert_close(compute_edge_influence(pruned, weights), expected_edges)
    # prune_graph on the same graph (5 features, 2 layers x 2 positions of errors, 2 tokens, 1 logit): node 0 and
    # the edge 9 -> 0 fall below 0.8 of the node influence
    graph = toy_graph(adjacency, n_pos=2, n_layers=2, n_features=5)
    nodes, edges, cumulative = prune_graph(graph, 0.8, 0.98)
    assert nodes[-3:].all() and not nodes[[2, 4, 5, 7]].any()
    assert nodes[[1, 3, 6, 8]].all() and not nodes[0]
    assert not edges[0].any() and not edges[:, 0].any() and edges[11, [1, 3, 6, 8]].all()
    assert float(cumulative.min()) > 0 and float(cumulative.max()) == pytest.approx(1.0)


def test_scores_on_synthetic_graphs():
    # 1 feature, 1 layer x 2 positions of errors, 2 tokens, 1 logit: nodes [f, e0, e1, t0, t1, logit]
    adj = torch.zeros(6, 6)
    adj[5, 0] = 2.0   # feature -> logit
    adj[0, 3] = 1.0   # token 0 -> feature
    adj[5, 4] = 1.0   # token 1 -> logit
    graph = toy_graph(adj, n_pos=2, n_layers=1, n_features=1)
    assert graph_scores(graph) == (1.0, 1.0)  # no error edge: both scores are 1
    adj[0, 1] = 1.0   # an error feeds the feature as much as token 0
    replacement, completeness = graph_scores(graph)
    # influence: logit row = [2/3 f, 1/3 t1]; feature row = [1/2 e0, 1/2 t0] -> e0 gets 1/3, t0 1/3, t1 1/3
    assert replacement == pytest.approx((1 / 3 + 1 / 3) / (1 / 3 + 1 / 3 + 1 / 3))
    # completeness: feature's non-error share 1/2 (weight 2/3 influence), logit 1 (weight 1), tokens/errors 1 each
    weights = torch.tensor([2 / 3, 1 / 3, 0, 1 / 3, 1 / 3, 1.0])
    shares = torch.tensor([0.5, 1, 1, 1, 1, 1])
    assert completeness == pytest.approx(float((weights * shares).sum() / weights.sum()))
    # the subgraph without the feature counts it as an error: tokens keep only the direct path t1 -> logit
    assert subgraph_scores(graph, [])[0] == pytest.approx((1 / 3) / (1 / 3 + 2 / 3))
    assert subgraph_scores(graph, [0]) == graph_scores(graph)
