"""The instrumented model: hook names and shapes, invariants, and the attention arithmetic."""

import io
import math

import numpy as np
import pytest
import torch

from conftest import small_config, small_model
from viz_model import Config, ConfigError, VizTransformer
from viz_model.components import sinusoidal_table

B, T = 2, 11


def tokens(seed=0, n=T, vocab=320):
    return torch.randint(0, vocab, (B, n), generator=torch.Generator().manual_seed(seed))


def expected_shapes(cfg: Config) -> dict[str, tuple]:
    d, h, k, m, v = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp, cfg.d_vocab
    shapes = {"hook_embed": (B, T, d), "hook_pos_embed": (B, T, d), "ln_final.hook_normalized": (B, T, d),
              "ln_final.hook_scale": (B, T, 1), "hook_logits": (B, T, v), "hook_probs": (B, T, v)}
    for i in range(cfg.n_layers):
        p = f"blocks.{i}."
        for name in ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out",
                     "ln1.hook_normalized", "ln2.hook_normalized"):
            shapes[p + name] = (B, T, d)
        for name in ("ln1.hook_scale", "ln2.hook_scale"):
            shapes[p + name] = (B, T, 1)
        for name in ("attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z"):
            shapes[p + name] = (B, T, h, k)
        for name in ("attn.hook_attn_scores", "attn.hook_pattern"):
            shapes[p + name] = (B, h, T, T)
        shapes[p + "mlp.hook_pre"] = shapes[p + "mlp.hook_post"] = (B, T, m)
    return shapes


def test_every_hook_of_the_design_is_recorded_with_its_shape(model):
    _, cache = model.run_with_cache(tokens())
    expected = expected_shapes(model.cfg)
    assert {name: tuple(t.shape) for name, t in cache.items()} == expected


def test_hook_names_come_from_the_module_tree(model):
    assert model.blocks[1].attn.hook_pattern.name == "blocks.1.attn.hook_pattern"
    assert model.hook_dict["blocks.0.mlp.hook_post"] is model.blocks[0].mlp.hook_post


def test_run_with_cache_returns_the_plain_forward_logits_and_removes_its_hooks(model):
    x = tokens()
    logits, cache = model.run_with_cache(x)
    assert torch.equal(logits, model(x))
    assert torch.equal(cache["hook_logits"], logits)
    assert not any(h.active for h in model.hook_dict.values())


def test_names_filter_selects_hooks(model):
    _, cache = model.run_with_cache(tokens(), names_filter=lambda n: n.endswith("hook_pattern"))
    assert sorted(cache) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    _, cache = model.run_with_cache(tokens(), names_filter="hook_embed")
    assert list(cache) == ["hook_embed"]
    with pytest.raises(KeyError):
        cache["hook_logits"]


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_invariants(placement):
    model = small_model(norm_placement=placement)
    logits, cache = model.run_with_cache(tokens())
    for i in range(model.cfg.n_layers):
        pattern = cache[f"blocks.{i}.attn.hook_pattern"]
        scores = cache[f"blocks.{i}.attn.hook_attn_scores"]
        torch.testing.assert_close(pattern.sum(-1), torch.ones(B, model.cfg.n_heads, T))
        upper = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        assert torch.all(pattern[..., upper] == 0)
        assert torch.all(scores[..., upper] == float("-inf"))
        assert torch.isfinite(scores[..., ~upper]).all()
        if i + 1 < model.cfg.n_layers:
            assert torch.equal(cache[f"blocks.{i}.hook_resid_post"], cache[f"blocks.{i + 1}.hook_resid_pre"])
    torch.testing.assert_close(cache["hook_probs"], torch.softmax(logits, -1))
    torch.testing.assert_close(cache["hook_probs"].sum(-1), torch.ones(B, T))


def test_residual_stream_adds_the_sublayers_in_pre_ln(model):
    _, c = model.run_with_cache(tokens())
    for i in range(model.cfg.n_layers):
        p = f"blocks.{i}."
        torch.testing.assert_close(c[p + "hook_resid_mid"], c[p + "hook_resid_pre"] + c[p + "hook_attn_out"])
        torch.testing.assert_close(c[p + "hook_resid_post"], c[p + "hook_resid_mid"] + c[p + "hook_mlp_out"])
    torch.testing.assert_close(c["blocks.0.hook_resid_pre"], c["hook_embed"] + c["hook_pos_embed"])


def test_post_ln_normalises_the_residual_stream():
    model = small_model(norm_placement="post")
    _, c = model.run_with_cache(tokens())
    ln = model.blocks[0].ln1
    x = c["blocks.0.hook_resid_pre"] + c["blocks.0.hook_attn_out"]
    expected = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5) * ln.w + ln.b
    torch.testing.assert_close(c["blocks.0.hook_resid_mid"], expected)


@torch.no_grad()
def test_attention_arithmetic_recomputed_from_the_weights(model):
    """q, k, v, scores, softmax, z and the output, one head and one query at a time with plain loops."""
    x_tokens = tokens()
    _, c = model.run_with_cache(x_tokens)
    attn, cfg = model.blocks[1].attn, model.cfg
    x = c["blocks.1.ln1.hook_normalized"][0]  # [pos, d_model]
    out = torch.zeros(T, cfg.d_model)
    for h in range(cfg.n_heads):
        q = x @ attn.W_Q[h] + attn.b_Q[h]
        k = x @ attn.W_K[h] + attn.b_K[h]
        v = x @ attn.W_V[h] + attn.b_V[h]
        torch.testing.assert_close(c["blocks.1.attn.hook_q"][0, :, h], q)
        for qi in range(T):
            s = torch.tensor([float(q[qi] @ k[j]) / math.sqrt(cfg.d_head) for j in range(qi + 1)])
            w = torch.exp(s - s.max()) / torch.exp(s - s.max()).sum()
            torch.testing.assert_close(c["blocks.1.attn.hook_attn_scores"][0, h, qi, :qi + 1], s)
            torch.testing.assert_close(c["blocks.1.attn.hook_pattern"][0, h, qi, :qi + 1], w)
            z = sum(w[j] * v[j] for j in range(qi + 1))
            torch.testing.assert_close(c["blocks.1.attn.hook_z"][0, qi, h], z)
            out[qi] += z @ attn.W_O[h]
    torch.testing.assert_close(c["blocks.1.hook_attn_out"][0], out + attn.b_O)


def test_causal_model_does_not_look_ahead(model):
    a, b = tokens(1), tokens(1).clone()
    b[:, 7:] = (b[:, 7:] + 1) % 320
    la, lb = model(a), model(b)
    torch.testing.assert_close(la[:, :7], lb[:, :7])
    assert not torch.allclose(la[:, 7:], lb[:, 7:])


def test_sinusoidal_positions_follow_the_paper():
    table = sinusoidal_table(50, 16)
    for pos in (0, 3, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    model = small_model()
    _, c = model.run_with_cache(tokens())
    torch.testing.assert_close(c["hook_pos_embed"][0], sinusoidal_table(48, 32)[:T])


def test_learned_positions_and_untied_unembedding():
    model = small_model(positional="learned", tied_embeddings=False)
    _, c = model.run_with_cache(tokens())
    torch.testing.assert_close(c["hook_pos_embed"][1], model.pos_embed.W_pos[:T])
    assert model.W_U is not None and model.W_unembed is model.W_U
    tied = small_model()
    assert "W_U" not in dict(tied.named_parameters()) and tied.W_unembed.data_ptr() == tied.embed.W_E.data_ptr()


@pytest.mark.parametrize("bad, message", [
    (dict(n_layers=0), "n_layers"), (dict(positional="alibi"), "positional"), (dict(lm_head="pooler"), "lm_head"),
    (dict(positional="rotary", d_head=7, d_model=28), "even d_head"), (dict(n_kv_heads=5), "multiple"),
    (dict(n_kv_heads=3), "multiple"), (dict(d_model=33, d_head=8), "even d_model")])
def test_invalid_configs_are_refused_with_a_message(bad, message):
    with pytest.raises(ConfigError, match=message):
        VizTransformer(small_config(**bad))


def test_inputs_beyond_the_context_or_vocabulary_are_refused(model):
    with pytest.raises(ValueError, match="context"):
        model(torch.zeros(1, 49, dtype=torch.long))
    with pytest.raises(ValueError, match="token ids"):
        model(torch.tensor([[1, 320]]))


@pytest.mark.parametrize("overrides", [dict(), dict(positional="rotary", norm="rmsnorm", mlp="swiglu", n_kv_heads=2,
                                                    attn_window=5),
                                       dict(n_encoder_layers=2, decoder_start_id=1, decoder_end_id=2),
                                       dict(mlp="geglu", n_experts=4, experts_per_token=2)])
def test_scores_and_probs_read_from_the_cache_equal_what_the_forward_pass_computed(overrides):
    """run_with_cache computes hook_attn_scores, hook_pattern, hook_probs and a dense MLP's hook_post on first read
    (not stored during the pass); they must be bit-identical to what flows through the hook points."""
    model = small_model(**overrides)
    ids = tokens()
    kwargs = {"src_tokens": tokens()[:, :7]} if model.cfg.is_encoder_decoder else {}
    seen = {}
    names = [n for n in model.hook_dict if n.endswith(("hook_attn_scores", "hook_pattern", "hook_probs", "hook_post"))]
    with model.hooks((n, lambda x, h: seen.__setitem__(h.name, x.clone())) for n in names):
        model(ids, **kwargs)
    _, cache = model.run_with_cache(ids, **kwargs)
    if model.cfg.n_experts:  # an expert no token was routed to never runs: its hooks are in neither
        names = [n for n in names if n in seen]
    assert set(names) == set(seen) and set(names) <= set(cache)
    lazy_posts = {n for n in cache._lazy if n.endswith("hook_post")}  # before any read
    # a block's dense MLP; not a mixture of experts (its experts run on the tokens routed to them)
    assert lazy_posts == (set() if model.cfg.n_experts else {n for n in names if n.endswith("mlp.hook_post")})
    for n in names:
        assert torch.equal(cache[n], seen[n]), n
    _, posts = model.run_with_cache(ids, names_filter=lambda n: n.endswith("mlp.hook_post"), **kwargs)
    assert not posts._lazy  # asked alone, hook_post is recorded as it passes: its inputs would hold more
    _, only = model.run_with_cache(ids, names_filter=lambda n: n.endswith("attn.hook_attn_scores"), **kwargs)
    assert set(only) == {n for n in names if n.endswith("attn.hook_attn_scores")}  # q and k stay private


def test_the_cache_records_what_a_callers_hook_returned_for_scores_patterns_and_probs():
    """Under a hook that changes a layer's scores, its pattern, the output probabilities or an MLP's hidden
    activations (TransformerLens' ``model.hooks(...)`` around ``run_with_cache``), the cache holds the values the
    forward pass really used, not a recomputation (which knows nothing of the hook); a hook on an input of a
    recomputed value (``hook_pre``) is seen by the recomputation; unhooked values stay computed on first read."""
    model = small_model(positional="rotary", norm="rmsnorm", mlp="swiglu", n_kv_heads=2)
    ids = tokens()
    flip = lambda x, hook: x.flip(-1)  # noqa: E731  (another pattern: each row reversed)
    halve = lambda x, hook: x / 2  # noqa: E731
    seen = {}
    record = [(n, lambda x, h: seen.__setitem__(h.name, x.clone()))
              for n in ("blocks.0.attn.hook_pattern", "blocks.1.attn.hook_attn_scores", "blocks.1.attn.hook_pattern",
                        "hook_probs", "blocks.0.mlp.hook_post", "blocks.1.mlp.hook_post")]
    changes = [("blocks.0.attn.hook_pattern", flip), ("blocks.1.attn.hook_attn_scores", halve), ("hook_probs", halve),
               ("blocks.0.mlp.hook_post", halve), ("blocks.1.mlp.hook_pre", halve)]
    with model.hooks(changes + record):  # the recorders run after the changes: they see what the model used
        expected = model(ids)
    with model.hooks(changes):
        logits, cache = model.run_with_cache(ids)
    assert "blocks.1.mlp.hook_post" in cache._lazy  # a hook on its input: computed on read, from what passed it
    torch.testing.assert_close(logits, expected, atol=0, rtol=0)
    for name, value in seen.items():
        assert torch.equal(cache[name], value), name
    _, plain = model.run_with_cache(ids)
    assert set(seen) <= set(plain._lazy)  # without hooks: computed on first read, as before
    for name in seen:
        assert not torch.equal(plain[name], cache[name]), name  # the hooks changed each of them


def test_large_traces_store_float16_at_any_length(monkeypatch):
    """A short text whose blocks' hooks would hold more than HALF_ABOVE_MB in float32 (a 1 B model's) is stored
    like a long one: float16, the attention derived exactly from the float32 q and k."""
    from viz_model.tokenizer import IdTokenizer
    import viz_ui.analysis.text_trace as text_trace
    model = small_model(positional="rotary", n_kv_heads=2)
    text = " ".join(str(i % 300) for i in range(20))
    name = "blocks.0.hook_resid_post"
    plain = text_trace.run_trace(model, IdTokenizer(model.cfg.d_vocab), text)
    assert dict.__getitem__(plain.arrays, name).dtype == np.float32  # this small model's trace is far below 128 MB
    monkeypatch.setattr(text_trace, "HALF_ABOVE_MB", 0.01)
    trace = text_trace.run_trace(model, IdTokenizer(model.cfg.d_vocab), text)
    assert dict.__getitem__(trace.arrays, name).dtype == np.float16
    np.testing.assert_allclose(trace.arrays[name], plain.arrays[name], rtol=2e-3, atol=2e-3)
    for kind in ("hook_attn_scores", "hook_pattern"):
        hook = f"blocks.1.attn.{kind}"
        assert not dict.__contains__(trace.arrays, hook)
        assert np.array_equal(trace.arrays[hook], plain.arrays[hook]), hook
    np.testing.assert_array_equal(np.asarray(trace.arrays["hook_logits"])[-1], np.asarray(plain.arrays["hook_logits"])[-1])


@pytest.mark.parametrize("overrides", [dict(), dict(positional="rotary", n_kv_heads=2, attn_window=30)])
def test_long_traces_store_float16_and_derive_the_attention_exactly(overrides):
    import pickle

    from viz_model.tokenizer import IdTokenizer
    from viz_ui.views.export import trace_npz
    from viz_ui.analysis.text_trace import LONG_INPUT, run_trace
    model = small_model(n_ctx=LONG_INPUT + 40, **overrides)
    n = LONG_INPUT + 20
    text = " ".join(str(i % 300) for i in range(n))
    trace = run_trace(model, IdTokenizer(model.cfg.d_vocab), text)
    raw = dict.__getitem__(trace.arrays, "blocks.0.hook_resid_post")
    assert raw.dtype == np.float16 and trace.arrays["blocks.0.hook_resid_post"].dtype == np.float32
    # logits stay exact: the rows decoded in the pass are float32, and the others are decoded on read from the last
    # block's output, which is kept in float32 for that
    assert dict.__getitem__(trace.arrays, "blocks.1.hook_resid_post").dtype == np.float32
    assert dict.__getitem__(trace.arrays, "hook_logits").dtype == np.float32
    np.testing.assert_allclose(np.asarray(trace.arrays["hook_logits"]), model(torch.tensor(trace.ids)[None])[0].detach(),
                               rtol=1e-5, atol=1e-5)
    _, cache = model.run_with_cache(torch.tensor(trace.ids).unsqueeze(0))
    np.testing.assert_allclose(trace.arrays["blocks.1.hook_resid_post"], cache["blocks.1.hook_resid_post"][0],
                               rtol=2e-3, atol=2e-3)
    # scores and patterns are not stored but recomputed from the recorded float32 q and k: the model's very
    # numbers, also after a pickle round trip (a trace must stay serialisable) and in the .npz export (float16)
    trace = pickle.loads(pickle.dumps(trace))
    for kind in ("hook_attn_scores", "hook_pattern"):
        name = f"blocks.1.attn.{kind}"
        assert not dict.__contains__(trace.arrays, name) and name in trace.arrays
        assert np.array_equal(trace.arrays[name], cache[name][0].numpy()), name
    assert np.isneginf(trace.arrays["blocks.1.attn.hook_attn_scores"][0, 0, 1:]).all()
    with np.load(io.BytesIO(trace_npz(trace))) as npz:
        pattern = npz["blocks.0.attn.hook_pattern"]
        assert pattern.dtype == np.float16
        np.testing.assert_allclose(pattern, cache["blocks.0.attn.hook_pattern"][0], atol=1e-3)