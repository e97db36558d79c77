"""Bounded traces (viz_ui.analysis.trace_bounded): a long text on a large model keeps its residual stream and recomputes a
block's hooks when read. Every value read from a bounded trace must be the plain capture's, across the families
of the model, and the bytes it keeps must follow docs/memory.md's formula. Memory at 1,024 tokens on a 1.24 B model:
bench/real_size.py --only trace."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
import torch

from conftest import small_model
from viz_model.tokenizer import IdTokenizer
from viz_ui.analysis.text_trace import run_trace

FAMILIES = {
    "gpt2": dict(),
    "llama": dict(positional="rotary", norm="rmsnorm", mlp="swiglu", n_kv_heads=2, attn_window=5),
    "neox": dict(positional="rotary", rotary_dim=4, parallel_residual=True),
    "post-ln": dict(norm_placement="post"),
    "sandwich": dict(positional="rotary", norm="rmsnorm", norm_placement="sandwich", logit_softcap=30.0),
    "moe": dict(positional="rotary", norm="rmsnorm", mlp="swiglu", n_experts=4, experts_per_token=2),
    "t5": dict(positional="none", norm="rmsnorm", rel_pos_buckets=8, rel_pos_max_distance=16),
    "bert": dict(causal=False, embed_norm=True, norm_placement="post", n_token_types=2, lm_head="mlm"),
}
TEXT = " ".join(str((7 * i) % 300) for i in range(40))


def _pair(model, text=TEXT):
    tok = IdTokenizer(model.cfg.d_vocab)
    return run_trace(model, tok, text, bounded=False), run_trace(model, tok, text, bounded=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_value_of_a_bounded_trace_is_the_plain_captures(family):
    model = small_model(**FAMILIES[family])
    plain, bounded = _pair(model)
    assert bounded.arrays.layers is not None and plain.arrays.layers is None
    assert set(bounded.arrays.names()) == set(plain.arrays.names())
    assert not any(dict.__contains__(bounded.arrays, n) for n in bounded.arrays.names() if n.startswith("blocks."))
    for name in plain.arrays.names():
        if name == "hook_logits":
            continue
        want, got = plain.arrays[name], bounded.arrays[name]
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True), name
    want, got = plain.arrays["hook_logits"], bounded.arrays["hook_logits"]
    assert got.shape == want.shape
    assert np.array_equal(got[-1], want[-1]) and np.array_equal(got[len(want) - 1], want[-1])  # kept: the pass's own
    for pos in (0, 3, len(want) - 2):  # computed on read from the last residual, one position at a time
        np.testing.assert_allclose(got[pos], want[pos], rtol=1e-5, atol=1e-5 * np.abs(want[pos]).max())
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    from viz_ui.views.moe import kl_bits  # the MoE page compares every position's output
    assert np.abs(kl_bits(got, want)).max() < 1e-6


def test_a_bfloat16_models_bounded_trace_is_its_plain_capture():
    model = small_model(**FAMILIES["llama"]).to(torch.bfloat16)
    plain, bounded = _pair(model)
    for name in plain.arrays.names():
        if name != "hook_logits":
            assert np.array_equal(bounded.arrays[name], plain.arrays[name]), name
    assert bounded.arrays.layers.resid.dtype == torch.bfloat16  # the residual stream kept as the model computed it
    assert np.array_equal(bounded.arrays["hook_logits"][-1], plain.arrays["hook_logits"][-1])


def test_mask_positions_keep_their_logits_as_computed():
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {"[UNK]": 0, "[MASK]": 1, **{f"w{i}": i + 2 for i in range(100)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    model = small_model(**FAMILIES["bert"])
    text = "w1 w2 [MASK] w4 w5 [MASK] w7 w8"
    plain, bounded = run_trace(model, tok, text, bounded=False), run_trace(model, tok, text, bounded=True)
    rows = bounded.arrays["hook_logits"]
    assert sorted(rows.kept) == [2, 5, 7]
    for pos in (2, 5, 7):
        assert np.array_equal(rows[pos], plain.arrays["hook_logits"][pos])


def test_the_bytes_follow_the_formula_and_the_cache_stays_bounded(monkeypatch):
    from viz_ui.analysis.text_trace import bounded_bytes
    model = small_model(**FAMILIES["llama"])
    cfg = model.cfg
    plain, bounded = _pair(model)
    n = bounded.n_tokens
    arrays = bounded.arrays
    outer = sum(a.nbytes for name, a in plain.arrays.items() if not name.startswith("blocks.") and name != "hook_logits")
    resid, row = (cfg.n_layers + 1) * n * cfg.d_model * 4, cfg.d_vocab * 4
    assert arrays.nbytes() == resid + row + outer  # nothing recomputed yet
    parts = bounded_bytes(model, n, outer=outer)
    assert (parts["resid"], parts["logits"]) == (resid, row)
    # one block's hooks, as the plain capture holds them, less its input and output (the residual keeps them) and
    # the scores and patterns (derived from q and k, never kept)
    layer = sum(plain.arrays[name].nbytes for name in plain.arrays.names() if name.startswith("blocks.0.")
                and not name.endswith(("0.hook_resid_pre", "0.hook_resid_post", "hook_attn_scores", "hook_pattern")))
    assert parts["layer"] == layer
    for i in range(cfg.n_layers):
        arrays[f"blocks.{i}.mlp.hook_post"]
    assert arrays.layers.cached_bytes() == min(cfg.n_layers, parts["n_cached"]) * layer
    arrays["hook_logits"][0]
    assert arrays.nbytes() == resid + outer + 2 * row + min(cfg.n_layers, parts["n_cached"]) * layer
    # a budget that leaves room for one layer: the cache holds one, whatever is read
    monkeypatch.setenv("VIZ_TRACE_MB", str(2 * (resid + row + outer + layer + 1) / 2**20))
    small = run_trace(model, IdTokenizer(cfg.d_vocab), TEXT)
    assert small.arrays.layers is not None and bounded_bytes(model, n, outer=outer)["n_cached"] == 1
    for i in range(cfg.n_layers):
        small.arrays[f"blocks.{i}.attn.hook_pattern"]
    assert small.arrays.layers.cached_bytes() == layer


def test_the_app_recomputes_with_the_live_model_and_pickles_without_it():
    from viz_ui.app.state import TraceModel
    model = small_model()
    ref = TraceModel(model, "some/path")
    assert ref() is model
    again = pickle.loads(pickle.dumps(ref))
    assert again.path == "some/path" and again._ref() is None  # would load the model at the path again


def test_the_cache_keeps_the_layers_last_read(monkeypatch):
    import viz_ui.analysis.text_trace as trace_module
    monkeypatch.setattr(trace_module, "MAX_CACHED_LAYERS", 2)
    model = small_model(n_layers=4)
    calls = []
    _, bounded = _pair(model)
    arrays = bounded.arrays
    run = arrays.layers._run
    arrays.layers._run = lambda layer: calls.append(layer) or run(layer)
    for i in (0, 1, 0, 2, 0, 1):
        arrays[f"blocks.{i}.attn.hook_z"]
    assert calls == [0, 1, 2, 1]  # 0 stays (read last), 1 was dropped for 2
    assert len(arrays.layers.cache.values()) == 2


def test_a_bounded_trace_survives_a_pickle_and_exports(monkeypatch):
    from viz_ui.views.export import trace_npz
    model = small_model(**FAMILIES["gpt2"])
    plain, bounded = _pair(model)
    bounded.arrays["blocks.1.mlp.hook_post"]  # fills the cache, which a pickle leaves out
    again = pickle.loads(pickle.dumps(bounded))
    assert np.array_equal(again.arrays["blocks.1.attn.hook_pattern"], plain.arrays["blocks.1.attn.hook_pattern"])
    with np.load(io.BytesIO(trace_npz(bounded))) as npz:
        assert np.array_equal(npz["blocks.1.mlp.hook_post"], plain.arrays["blocks.1.mlp.hook_post"])
        np.testing.assert_allclose(npz["hook_logits"], plain.arrays["hook_logits"], rtol=1e-5, atol=1e-5)


def test_a_trace_is_bounded_when_its_plain_capture_would_pass_the_budget(monkeypatch):
    model = small_model()
    tok = IdTokenizer(model.cfg.d_vocab)
    assert run_trace(model, tok, TEXT).arrays.layers is None  # a few hundred KB: plain
    monkeypatch.setenv("VIZ_TRACE_MB", "0.05")
    assert run_trace(model, tok, TEXT).arrays.layers is not None


@pytest.mark.parametrize("family", ["gpt2", "sandwich", "bert"])
def test_a_plain_trace_decodes_only_the_rows_read(family):
    """A plain trace's pass unembeds only the last position (and the [MASK]s): the other rows are decoded when read,
    one row from the last block's output, or all at once for the whole array, which is then kept. Every row is the
    full forward pass's (float32 summation order apart), the final norm's hooks hold every position, and the trace
    survives a pickle round trip."""
    from viz_ui.analysis.trace_bounded import LogitRows
    model = small_model(**FAMILIES[family])
    trace = run_trace(model, IdTokenizer(model.cfg.d_vocab), TEXT, bounded=False)
    logits = trace.arrays["hook_logits"]
    ids = torch.tensor(trace.ids)[None]
    with torch.no_grad():
        want, cache = model.run_with_cache(ids)
    want = want[0].numpy()
    n = len(trace.ids)
    assert isinstance(logits, LogitRows) and set(logits.kept) == {n - 1} and logits.shape == want.shape
    assert trace.arrays["ln_final.hook_normalized"].shape[0] == n
    np.testing.assert_array_equal(trace.arrays["ln_final.hook_normalized"], cache["ln_final.hook_normalized"][0])
    scale = np.abs(want).max()
    np.testing.assert_allclose(logits[-1], want[-1], rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(logits[3], want[3], rtol=1e-5, atol=1e-5 * scale)  # one row, computed on read
    assert logits.nbytes < want.nbytes / 4  # nothing but a few rows held yet
    copy = pickle.loads(pickle.dumps(trace)).arrays["hook_logits"]
    whole = np.asarray(logits)
    np.testing.assert_allclose(whole, want, rtol=1e-5, atol=1e-5 * scale)
    assert np.array_equal(whole[-1], logits.kept[n - 1]) and logits.nbytes >= want.nbytes  # kept whole now
    assert logits[5] is not None and np.array_equal(logits[5], whole[5])
    np.testing.assert_allclose(np.asarray(copy), want, rtol=1e-5, atol=1e-5 * scale)
