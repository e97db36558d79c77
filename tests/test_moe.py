"""Mixture of experts (issue 16): the Mixtral, Qwen2-MoE and OLMoE conversions compute what `transformers` computes
(logits <= 1e-4, every attention pattern <= 1e-5, router logits <= 1e-4, eager attention and eager experts,
float32), the MoE hooks have TransformerLens' shapes, disabling an expert or forcing a token to one equals a
recomputation by hand, hostile MoE configs are refused before anything is allocated, and the MoE page shows the
running model's routing (and says when the model is dense)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from safetensors.torch import save as save_bytes

from conftest import ROOT, plotly_array, small_config, small_model
from hf_models import build, save, transformers
from test_families import assert_parity, ids_for
from viz_model import CheckpointError, VizTransformer, load_model, load_upload
from viz_model.loading.families import from_hf
from viz_model.limits import count_params, estimate_bytes
from viz_model.feed_forward import disable_experts, force_expert, load_balancing_loss, run_with_routing
from viz_model.loading.weights import build_model

SHAPES = dict(max_position_embeddings=64, num_hidden_layers=2)
SPECS = {  # awkward shapes: odd vocabularies, d_head 10 / 6 / 8, grouped-query attention, k = 2, 3, 4
    "mixtral": ("MixtralForCausalLM", lambda: transformers.MixtralConfig(
        vocab_size=97, hidden_size=40, intermediate_size=38, num_attention_heads=4, num_key_value_heads=2,
        num_local_experts=5, num_experts_per_tok=2, sliding_window=6, **SHAPES)),
    "qwen2_moe": ("Qwen2MoeForCausalLM", lambda: transformers.Qwen2MoeConfig(  # shared expert, probabilities as they are
        vocab_size=101, hidden_size=36, intermediate_size=50, moe_intermediate_size=26, shared_expert_intermediate_size=42,
        num_attention_heads=6, num_key_value_heads=3, num_experts=7, num_experts_per_tok=3, norm_topk_prob=False,
        **SHAPES)),
    "olmoe": ("OlmoeForCausalLM", lambda: transformers.OlmoeConfig(  # q/k norm over all heads, biases, renormalised
        vocab_size=89, hidden_size=40, intermediate_size=34, num_attention_heads=5, num_key_value_heads=1,
        num_experts=6, num_experts_per_tok=4, norm_topk_prob=True, attention_bias=True, pad_token_id=1,
        eos_token_id=2, clip_qkv=0.6, **SHAPES)),  # a clamp that bites: normed q and k are about 1 in size
}


@pytest.fixture(scope="module")
def moe_refs(tmp_path_factory) -> dict:
    """name -> (transformers model with eager attention and eager experts, its saved folder)."""
    root = tmp_path_factory.mktemp("moe")
    out = {}
    for seed, (name, (cls, make)) in enumerate(SPECS.items()):
        config = make()
        config._experts_implementation = "eager"  # transformers' grouped_mm needs 16-byte strides
        ref = build(cls, config, seed=seed)
        out[name] = (ref, save(ref, root / name))
    return out


@pytest.mark.parametrize("name", SPECS)
def test_moe_family_parity_and_hooks(moe_refs, name):
    ref, folder = moe_refs[name]
    model, _ = load_model(folder)
    cfg, n = model.cfg, 19
    theirs = ref.config
    assert cfg.family == name and cfg.experts_per_token == theirs.num_experts_per_tok
    assert cfg.n_experts == getattr(theirs, "num_local_experts", getattr(theirs, "num_experts", None))
    ids = ids_for(cfg.d_vocab, n=n)
    with torch.no_grad():
        out = ref(ids, output_attentions=True, output_router_logits=True)
    _, cache = assert_parity(model, out, ids)
    E, k, m = cfg.n_experts, cfg.experts_per_token, cfg.d_mlp
    for i, theirs in enumerate(out.router_logits):
        p = f"blocks.{i}.mlp."
        logits = cache[p + "hook_router_logits"]
        assert logits.shape == (1, n, E)
        assert (logits.reshape(-1, E) - theirs).abs().max().item() <= 1e-4
        probs = cache[p + "hook_expert_weights"]
        assert probs.shape == (1, n, E) and torch.allclose(probs.sum(-1), torch.ones(1, n))
        idx = cache[p + "hook_expert_indices"]
        assert idx.shape == (1, n, k) and idx.dtype == torch.int64
        assert torch.equal(idx.reshape(-1, k), torch.topk(torch.softmax(theirs, -1), k).indices)
        weights = cache[p + "hook_topk_weights"]
        if cfg.norm_topk_prob:
            assert torch.allclose(weights.sum(-1), torch.ones(1, n))
        else:  # Qwen2-MoE and OLMoE by default: the probabilities themselves
            assert torch.allclose(weights, torch.gather(probs, -1, idx))
        assert cache[p + "hook_post"].shape == (1, n, E * m)
        routed = [cache[f"{p}experts.{e}.hook_post"].shape for e in range(E) if f"{p}experts.{e}.hook_post" in cache]
        assert all(s[1] == m for s in routed) and sum(s[0] for s in routed) == n * k  # [n_routed, d_mlp]
        assert cache[f"blocks.{i}.hook_mlp_out"].shape == (1, n, cfg.d_model)
    if name == "mixtral":  # sliding window 6: the last query sees only its 6 latest keys
        assert cache["blocks.0.attn.hook_pattern"][0, :, n - 1, :n - 6].abs().max() == 0
    if name == "qwen2_moe":
        assert cfg.d_shared_mlp == 42 and cache["blocks.1.mlp.hook_shared_gate"].shape == (1, n, 1)
    if name == "olmoe":
        assert cfg.qk_norm == "all" and model.blocks[0].attn.q_norm.w.shape == (cfg.n_heads * cfg.d_head,)
        # clip_qkv: q and k clamped after their norm, v after its projection
        assert cfg.clip_qkv == 0.6 and cache["blocks.0.attn.hook_v"].abs().max() == pytest.approx(0.6)
        assert cache["blocks.0.attn.q_norm.hook_normalized"].abs().max() > 1.0


def test_transformers5_fused_expert_layout_converts_the_same(moe_refs):
    """transformers 5 keeps all experts in two 3-D tensors in memory (mlp.experts.gate_up_proj / down_proj); a state
    dict in that layout converts to the same model as the Hub's per-expert files."""
    ref, folder = moe_refs["mixtral"]
    state = ref.state_dict()
    assert "model.layers.0.mlp.experts.gate_up_proj" in state
    cfg, weights = from_hf(json.loads((folder / "config.json").read_text()), state, "fused")
    fused = build_model(cfg, weights, "fused")
    hub, _ = load_model(folder)
    ids = ids_for(cfg.d_vocab, n=11)
    torch.testing.assert_close(fused(ids), hub(ids), atol=1e-6, rtol=0)


MIXED = {  # Qwen2-MoE with dense layers among the sparse ones, as transformers' Qwen2MoeDecoderLayer builds them
    "step2": (dict(decoder_sparse_step=2), [0, 2]),  # (i + 1) % 2 != 0: layers 0 and 2 dense
    "mlp_only": (dict(mlp_only_layers=[0, 7]), [0]),  # 7 is beyond the stack: ignored, as there
}


@pytest.fixture(scope="module")
def mixed_refs(tmp_path_factory) -> dict:
    """name -> (3-layer transformers Qwen2-MoE with some dense layers, the model load_model makes of its folder)."""
    root, out = tmp_path_factory.mktemp("mixed"), {}
    for seed, (name, (kw, _)) in enumerate(MIXED.items()):
        config = transformers.Qwen2MoeConfig(
            vocab_size=320, hidden_size=36, intermediate_size=50, moe_intermediate_size=26,
            shared_expert_intermediate_size=42, num_attention_heads=6, num_key_value_heads=3, num_experts=5,
            num_experts_per_tok=2, norm_topk_prob=False, max_position_embeddings=64, num_hidden_layers=3, **kw)
        config._experts_implementation = "eager"
        ref = build("Qwen2MoeForCausalLM", config, seed=10 + seed)
        out[name] = (ref, load_model(save(ref, root / name))[0])
    return out


@pytest.mark.parametrize("name", MIXED)
def test_qwen2_moe_dense_layers_among_the_sparse_ones(mixed_refs, name):
    """Dense layers keep an MLP of width intermediate_size and no router hooks; logits, patterns and the MoE layers'
    router logits equal transformers'; count_params counts both kinds of layer exactly."""
    ref, model = mixed_refs[name]
    cfg, dense = model.cfg, MIXED[name][1]
    assert cfg.dense_layers == dense and cfg.d_dense_mlp == 50 and cfg.d_mlp == 26
    assert cfg.moe_layers == [i for i in range(3) if i not in dense]
    assert count_params(cfg) == model.n_params()
    ids = ids_for(cfg.d_vocab, n=19)
    with torch.no_grad():
        out = ref(ids, output_attentions=True, output_router_logits=True)
    _, cache = assert_parity(model, out, ids)
    assert len(out.router_logits) == len(cfg.moe_layers)
    for i, theirs in zip(cfg.moe_layers, out.router_logits):
        assert (cache[f"blocks.{i}.mlp.hook_router_logits"].reshape(-1, 5) - theirs).abs().max().item() <= 1e-4
        assert cache[f"blocks.{i}.mlp.hook_post"].shape == (1, 19, 5 * 26)
    for i in dense:
        assert not any(n.startswith(f"blocks.{i}.mlp.") and "expert" in n for n in model.hook_dict)
        assert cache[f"blocks.{i}.mlp.hook_post"].shape == (1, 19, 50)  # intermediate_size, not the experts'
    _, indices, _ = run_with_routing(model, ids)
    assert indices.shape == (len(cfg.moe_layers), 1, 19, 2)


@pytest.fixture(scope="module")
def moe_model() -> VizTransformer:
    return small_model(n_experts=5, experts_per_token=2, mlp="swiglu", d_shared_mlp=12)


def _manual_moe(model: VizTransformer, layer: int, resid_mid: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Block ``layer``'s feed-forward output recomputed by hand: every expert on every token, the router's softmax
    with ``mask`` (True = logit -inf), top-k renormalised, and the gated shared expert."""
    block = model.blocks[layer]
    x = block.ln2(resid_mid)
    mlp = block.mlp
    logits = (x @ mlp.W_router).masked_fill(mask, float("-inf"))
    top, idx = torch.topk(torch.softmax(logits, -1), model.cfg.experts_per_token)
    gates = top / top.sum(-1, keepdim=True)
    silu = torch.nn.functional.silu
    every = torch.stack([(silu(x @ e.W_gate + e.b_gate) * (x @ e.W_in + e.b_in)) @ e.W_out + e.b_out
                         for e in mlp.experts], dim=-2)  # SwiGLU of every expert: [batch, pos, n_experts, d_model]
    chosen = torch.gather(every, -2, idx[..., None].expand(*idx.shape, every.shape[-1]))
    out = (gates[..., None] * chosen).sum(-2)
    return out + torch.sigmoid(x @ mlp.W_shared_gate) * mlp.shared_expert(x)


@torch.no_grad()
def test_interventions_equal_a_manual_recomputation(moe_model):
    model, E = moe_model, moe_model.cfg.n_experts
    ids = torch.randint(0, 320, (1, 23), generator=torch.Generator().manual_seed(4))
    _, intact = model.run_with_cache(ids)
    busiest = int(torch.bincount(intact["blocks.1.mlp.hook_expert_indices"].flatten(), minlength=E).argmax())
    hook = [("blocks.1.mlp.hook_router_logits", disable_experts([busiest]))]
    with model.hooks(hook):
        _, cache = model.run_with_cache(ids)
    mask = torch.arange(E) == busiest
    torch.testing.assert_close(cache["blocks.1.hook_mlp_out"],
                               _manual_moe(model, 1, cache["blocks.1.hook_resid_mid"], mask), atol=1e-5, rtol=0)
    assert busiest not in cache["blocks.1.mlp.hook_expert_indices"]
    logits, indices, weights = run_with_routing(model, ids, hook)
    assert indices.shape == (2, 1, 23, 2) and busiest not in indices[1] and busiest in indices[0]
    torch.testing.assert_close(logits, model.run_with_hooks(ids, fwd_hooks=hook))
    assert not torch.allclose(logits, intact["hook_logits"])  # the busiest expert mattered

    pos, expert = 7, (busiest + 1) % E
    with model.hooks([("blocks.0.mlp.hook_router_logits", force_expert(expert, [pos]))]):
        _, forced = model.run_with_cache(ids)
    keep = torch.arange(E) != expert  # only the forced expert is left for this token: weight 1
    mask = torch.zeros(1, 23, E, dtype=torch.bool)
    mask[0, pos] = keep
    manual = _manual_moe(model, 0, forced["blocks.0.hook_resid_mid"], mask)
    torch.testing.assert_close(forced["blocks.0.hook_mlp_out"], manual, atol=1e-5, rtol=0)
    assert forced["blocks.0.mlp.hook_expert_indices"][0, pos, 0] == expert
    assert forced["blocks.0.mlp.hook_topk_weights"][0, pos].tolist() == [1.0, 0.0]
    others = torch.arange(23) != pos  # layer 0's other tokens are routed as before
    torch.testing.assert_close(forced["blocks.0.hook_mlp_out"][0, others], intact["blocks.0.hook_mlp_out"][0, others])


def test_hook_post_puts_every_expert_side_by_side_and_drives_the_output(moe_model):
    model = moe_model
    ids = torch.randint(0, 320, (2, 9), generator=torch.Generator().manual_seed(5))
    _, cache = model.run_with_cache(ids)
    post = cache["blocks.0.mlp.hook_post"].reshape(2, 9, 5, -1)
    idx = cache["blocks.0.mlp.hook_expert_indices"]
    used = torch.zeros(2, 9, 5, dtype=torch.bool).scatter_(-1, idx, True)
    assert (post[~used] == 0).all() and (post[used].abs().sum(-1) > 0).all()
    for e in range(5):  # expert e's own hook_post: the rows of the tokens routed to it, in (batch, pos) order
        rows, name = used[..., e], f"blocks.0.mlp.experts.{e}.hook_post"
        if rows.any():
            torch.testing.assert_close(cache[name], post[rows][:, e])
        else:  # an expert that receives no token does not run
            assert name not in cache
    # a hook that zeroes every expert's units leaves the experts' output biases and the shared expert
    with model.hooks([("blocks.0.mlp.hook_post", lambda t, hook: t * 0)]):
        _, zeroed = model.run_with_cache(ids, names_filter=["blocks.0.hook_mlp_out", "blocks.0.hook_resid_mid",
                                                            "blocks.0.mlp.hook_topk_weights"])
    mlp = model.blocks[0].mlp
    x = model.blocks[0].ln2(zeroed["blocks.0.hook_resid_mid"])
    b_out = torch.stack([e.b_out for e in mlp.experts])[idx]  # [batch, pos, k, d_model]
    expected = (zeroed["blocks.0.mlp.hook_topk_weights"][..., None] * b_out).sum(-2) \
        + torch.sigmoid(x @ mlp.W_shared_gate) * mlp.shared_expert(x)
    torch.testing.assert_close(zeroed["blocks.0.hook_mlp_out"], expected, atol=1e-6, rtol=0)
    assert not torch.allclose(zeroed["blocks.0.hook_mlp_out"], cache["blocks.0.hook_mlp_out"])


def test_load_balancing_loss_is_one_when_balanced_and_n_experts_when_collapsed():
    uniform = torch.zeros(1, 8, 4)  # every probability 1/4: 4 * sum_e f_e / 4 = 1 whichever experts topk picks
    assert load_balancing_loss([uniform], 2).item() == pytest.approx(1.0)
    collapsed = torch.full((1, 8, 4), -1e4)
    collapsed[..., 0] = 1e4
    assert load_balancing_loss([collapsed], 1).item() == pytest.approx(4.0)
    rotating = torch.full((1, 8, 4), -1e4)
    rotating[0, torch.arange(8), torch.arange(8) % 4] = 1e4  # each expert takes a quarter of the tokens
    assert load_balancing_loss([rotating], 1).item() == pytest.approx(1.0)


@pytest.mark.parametrize("overrides", [dict(n_experts=4, experts_per_token=2, mlp="swiglu"),
                                       dict(n_experts=3, experts_per_token=3, d_shared_mlp=20, mlp_bias=False),
                                       dict(n_experts=6, experts_per_token=1, mlp="gelu", causal=False, lm_head="mlm"),
                                       dict(n_experts=3, experts_per_token=2, d_shared_mlp=20, mlp="swiglu",
                                            n_layers=3, dense_layers=[0, 2], d_dense_mlp=90)])
def test_count_params_and_the_estimate_count_every_expert(overrides):
    cfg = small_config(**overrides)
    with torch.device("meta"):
        model = VizTransformer(cfg)
    assert count_params(cfg) == model.n_params()
    dense = small_config(**{k: v for k, v in overrides.items() if k not in ("n_experts", "experts_per_token",
                                                                            "d_shared_mlp", "dense_layers",
                                                                            "d_dense_mlp")})
    assert estimate_bytes(cfg) > estimate_bytes(dense)


def _native(tokenizer, changes: dict) -> bytes:
    model = small_model()
    cfg = {**json.loads(model.cfg.to_json()), **changes}
    return save_bytes({k: v.clone() for k, v in model.state_dict().items()},
                      metadata={"format": "viz-transformer", "format_version": "1", "config": json.dumps(cfg),
                                "tokenizer": tokenizer.to_str()})


@pytest.mark.parametrize("changes, words", [
    ({"n_experts": 10**9}, ("n_experts", "1,024")),
    ({"n_experts": True}, ("n_experts",)),
    ({"n_experts": 4, "experts_per_token": 5}, ("experts_per_token", "n_experts")),
    ({"n_experts": 4, "experts_per_token": 0}, ("experts_per_token",)),
    ({"norm_topk_prob": "yes"}, ("norm_topk_prob",)),
    ({"d_shared_mlp": 16}, ("d_shared_mlp",)),
    ({"n_experts": 4, "n_encoder_layers": 2}, ("encoder-decoder",)),
    ({"n_experts": 4, "dense_layers": [0, 0]}, ("dense_layers",)),
    ({"n_experts": 4, "dense_layers": [2]}, ("dense_layers",)),
    ({"n_experts": 4, "dense_layers": "0"}, ("dense_layers",)),
    ({"n_experts": 4, "dense_layers": list(range(10**5))}, ("dense_layers",)),
    ({"n_experts": 4, "dense_layers": [0, 1]}, ("dense_layers", "every layer")),
    ({"dense_layers": [0]}, ("dense_layers", "n_experts")),
    ({"n_experts": 4, "dense_layers": [0], "d_dense_mlp": 10**6}, ("d_dense_mlp",)),
    ({"n_experts": 1024, "d_mlp": 262_144, "d_model": 4096, "d_head": 1024}, ("VIZ_MAX_MODEL_MB",)),
])
def test_hostile_moe_configs_are_refused_before_allocating(tokenizer, changes, words):
    data = _native(tokenizer, changes)
    start = time.perf_counter()
    with pytest.raises(CheckpointError) as info:
        load_upload("hostile.safetensors", data)
    assert time.perf_counter() - start < 2.0
    message = str(info.value)
    assert "\n" not in message and all(w.lower() in message.lower() for w in words), message


@pytest.mark.parametrize("name, changes, words", [
    ("mixtral", {"num_local_experts": "8"}, ("num_local_experts",)),
    ("mixtral", {"num_local_experts": 10**9}, ("n_experts",)),
    ("qwen2_moe", {"decoder_sparse_step": 0}, ("decoder_sparse_step",)),
    ("qwen2_moe", {"mlp_only_layers": "0"}, ("mlp_only_layers",)),
    ("qwen2_moe", {"mlp_only_layers": [0.5]}, ("mlp_only_layers",)),
    ("qwen2_moe", {"norm_topk_prob": "no"}, ("norm_topk_prob",)),
    ("olmoe", {"clip_qkv": -8.0}, ("clip_qkv",)),
    ("olmoe", {"clip_qkv": "8"}, ("clip_qkv",)),
    ("olmoe", {"num_experts_per_tok": 9}, ("experts_per_token",)),
])
def test_hostile_hf_moe_configs(moe_refs, tmp_path, name, changes, words):
    folder = moe_refs[name][1]
    bad = tmp_path / name
    bad.mkdir()
    for f in folder.iterdir():
        (bad / f.name).symlink_to(f)
    (bad / "config.json").unlink()
    (bad / "config.json").write_text(json.dumps({**json.loads((folder / "config.json").read_text()), **changes}))
    with pytest.raises(CheckpointError) as info:
        load_model(bad)
    assert "\n" not in str(info.value) and all(w in str(info.value) for w in words), str(info.value)


# ----------------------------------------------------------------------------------------------- the page

MOE_MODEL = ROOT / "assets" / "models" / "tinystories-moe.safetensors"


def open_moe_page(model: str | None = None, **query):
    from helpers import open_page

    state = {"_text": "Tom had a big red ball. He gave the ball to", **({"_model": model} if model else {})}
    return open_page("pages/moe.py", query=query, session=state, errors=False)


def test_moe_page_on_a_dense_model_says_so_and_names_the_moe_models():
    at = open_moe_page()
    message = " ".join(i.value for i in at.info).replace("\\", "")  # model names are escaped Markdown
    assert "dense" in message and MOE_MODEL.stem in message


def test_moe_page_shows_the_models_routing_and_the_intervention_effect():
    from viz_model.loading.checkpoint import load_checkpoint
    from helpers import figure_titled

    model, tok = load_checkpoint(MOE_MODEL)
    at = open_moe_page(MOE_MODEL.stem, query="3", moe_expert="1")
    ids = torch.tensor([tok.encode("Tom had a big red ball. He gave the ball to").ids])
    _, cache = model.run_with_cache(ids)
    first = torch.stack([cache[f"blocks.{i}.mlp.hook_expert_indices"][0, :, 0] for i in range(model.cfg.n_layers)])
    shown = figure_titled(at, "Top-2 experts per token and layer")
    np.testing.assert_array_equal(plotly_array(shown["data"][0]["z"]), first.numpy())
    probs = figure_titled(at, "Router probabilities of 3")
    np.testing.assert_allclose(plotly_array(probs["data"][0]["z"]),
                               torch.stack([cache[f"blocks.{i}.mlp.hook_expert_weights"][0, 3]
                                            for i in range(model.cfg.n_layers)]).numpy(), atol=1e-6)
    # disabling E1 everywhere, recomputed here with a hook of our own: the page's "after" bars are those numbers
    def no_e1(logits, hook):
        return logits.index_fill(-1, torch.tensor([1]), float("-inf"))

    after = model.run_with_hooks(ids, fwd_hooks=[(lambda n: n.endswith("hook_router_logits"), no_e1)])
    bars = figure_titled(at, "Output after 3")
    p_after = torch.softmax(after[0, 3], -1).detach().numpy()
    shown_after = plotly_array(bars["data"][1]["x"])
    np.testing.assert_allclose(np.sort(shown_after)[::-1][:3], np.sort(p_after)[::-1][:3], atol=1e-5)
    at.radio(key="moe_do").set_value("force").run()
    assert not at.exception and not at.error
    # token 3 keeps one expert instead of two in each of the 4 layers; later tokens may be rerouted too
    assert int(at.metric[0].value.split()[0]) >= model.cfg.n_layers


def test_moe_page_on_a_model_with_dense_layers_shows_only_its_moe_layers(mixed_refs, tokenizer):
    """decoder_sparse_step 2 over 3 layers: the map, load and router views hold layer 1 only (labelled L1, with the
    numbers the model computed there), and the page names layers 0 and 2 as dense; the link's layer 0 (dense) falls
    back to layer 1."""
    from helpers import figure_titled, open_with_model

    model = mixed_refs["step2"][1]
    text = "The cat sat on the mat. The cat"
    at = open_with_model({"mixed": (model, tokenizer)}, "mixed", "pages/moe.py", text, head=(0, 0), errors=False)
    words = " ".join(m.value for m in at.markdown)
    assert "2 of the 3 layers" not in words and "1 of the 3 layers (L1)" in words
    assert "layers 0 and 2 are dense (one MLP of 50 units, no router)" in words
    _, cache = model.run_with_cache(torch.tensor([tokenizer.encode(text).ids]))
    shown = figure_titled(at, "Top-2 experts per token and layer")
    assert shown["layout"]["yaxis"]["ticktext"] == ["L1"]
    np.testing.assert_array_equal(plotly_array(shown["data"][0]["z"]),
                                  cache["blocks.1.mlp.hook_expert_indices"][0, :, :1].T.numpy())
    assert figure_titled(at, "Layer 1: expert weights per token")
    assert at.selectbox(key="layer").options == ["layer 1"]
    assert at.selectbox(key="moe_layer").options == ["every MoE layer", "layer 1"]
    assert int(at.metric[0].value.split()[-1]) == cache["blocks.1.mlp.hook_expert_indices"].shape[1]  # "n of pos"
