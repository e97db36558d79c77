"""Sparse dictionaries: SAELens's formulas on hand-written files, save/load, hostile files, readouts, training."""

import json

import pytest
import torch
from safetensors.torch import save_file

from conftest import small_model
from viz_model.features import DictionaryError, SparseDictionary, load_dictionary, save_dictionary, train_dictionary
from viz_model.features.index import build_index, load_index, save_corpus, save_index
from viz_model.features.readout import (activation_histogram, feature_acts, head_contributions, logit_effects,
                                        promoted_tokens, reconstruction, top_features)

D_IN, D_SAE = 6, 10


def write(folder, cfg, tensors):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cfg.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    save_file(tensors, str(folder / "sae_weights.safetensors"))
    return folder


def tensors(d_in=D_IN, d_sae=D_SAE, d_out=None, threshold=False, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    d_out = d_in if d_out is None else d_out
    t = {"W_enc": torch.randn(d_in, d_sae, generator=g), "b_enc": torch.randn(d_sae, generator=g) * 0.5,
         "W_dec": torch.randn(d_sae, d_out, generator=g), "b_dec": torch.randn(d_out, generator=g)}
    if threshold:
        t["threshold"] = torch.rand(d_sae, generator=g)
    return {k: v.to(dtype) for k, v in t.items()}


def test_encode_decode_equal_saelens_formulas_on_hand_written_files(tmp_path):
    x = torch.randn(3, 5, D_IN, generator=torch.Generator().manual_seed(9))
    f_in = torch.rand(3, 5, D_SAE)
    # standard: relu((x - b_dec) W_enc + b_enc); decode f W_dec + b_dec
    t = tensors()
    d = load_dictionary(write(tmp_path / "std", {"architecture": "standard", "d_in": D_IN, "d_sae": D_SAE,
                                                 "hook_name": "blocks.0.hook_resid_post", "apply_b_dec_to_input": True}, t))
    pre = (x - t["b_dec"]) @ t["W_enc"] + t["b_enc"]
    assert torch.allclose(d.encode(x), torch.clamp(pre, min=0), atol=1e-6)
    assert torch.allclose(d.decode(f_in), f_in @ t["W_dec"] + t["b_dec"], atol=1e-6)
    assert d.kind == "sae" and d.out_hook == "blocks.0.hook_resid_post"
    # jumprelu, without b_dec on the input, SAELens 6 keeping hook_name in metadata
    t = tensors(threshold=True, seed=1)
    d = load_dictionary(write(tmp_path / "jr", {"architecture": "jumprelu", "d_in": D_IN, "d_sae": D_SAE,
                                                "apply_b_dec_to_input": False,
                                                "metadata": {"hook_name": "blocks.1.hook_resid_pre"}}, t))
    pre = x @ t["W_enc"] + t["b_enc"]
    want = torch.where(pre > t["threshold"], torch.clamp(pre, min=0), torch.zeros(()))
    assert torch.allclose(d.encode(x), want, atol=1e-6) and d.hook_name == "blocks.1.hook_resid_pre"
    assert 0 < int((want > 0).sum()) < int((pre > 0).sum())  # the threshold really removed some
    # topk: the k largest pre-activations, relu'd, the rest 0
    t = tensors(seed=2)
    d = load_dictionary(write(tmp_path / "tk", {"architecture": "topk", "k": 3, "d_in": D_IN, "d_sae": D_SAE,
                                                "hook_name": "blocks.0.hook_resid_mid"}, t))  # apply_b_dec default: true
    pre = (x - t["b_dec"]) @ t["W_enc"] + t["b_enc"]
    kth = pre.sort(-1, descending=True).values[..., 2:3]
    want = torch.where(pre >= kth, torch.clamp(pre, min=0), torch.zeros(()))
    got = d.encode(x)
    assert torch.allclose(got, want, atol=1e-6) and int((got > 0).sum(-1).max()) <= 3
    # a ReLU transcoder (SAELens "transcoder"): b_dec is in d_out and never subtracted from the input
    t = tensors(d_out=4, seed=3)
    d = load_dictionary(write(tmp_path / "tc", {"architecture": "transcoder", "d_in": D_IN, "d_sae": D_SAE, "d_out": 4,
                                                "hook_name": "blocks.0.ln2.hook_normalized",
                                                "hook_name_out": "blocks.0.hook_mlp_out"}, t))
    assert d.kind == "transcoder" and d.out_hook == "blocks.0.hook_mlp_out"
    want = torch.clamp(x @ t["W_enc"] + t["b_enc"], min=0) @ t["W_dec"] + t["b_dec"]
    assert torch.allclose(d(x), want, atol=1e-5) and d(x).shape == (3, 5, 4)
    # float16 and bfloat16 files are computed in float32
    t = tensors(seed=4, dtype=torch.float16)
    d = load_dictionary(write(tmp_path / "h", {"architecture": "standard", "d_in": D_IN, "d_sae": D_SAE,
                                               "hook_name": "h"}, t))
    assert d.W_enc.dtype == torch.float32 and torch.equal(d.W_enc, t["W_enc"].float())


def test_save_and_load_round_trip(tmp_path):
    for arch, k, out in (("topk", 4, None), ("jumprelu", None, None), ("standard", None, "blocks.0.hook_mlp_out")):
        d = SparseDictionary(D_IN, D_SAE, "blocks.0.ln2.hook_normalized" if out else "blocks.0.hook_resid_post", arch, k,
                             hook_name_out=out, d_out=5 if out else None, apply_b_dec_to_input=out is None)
        with torch.no_grad():
            for p in d.parameters():
                p.copy_(torch.rand(p.shape))
        save_dictionary(d, tmp_path / arch, model_name="test")
        cfg = json.loads((tmp_path / arch / "cfg.json").read_text())
        assert cfg["architecture"] == arch and cfg["d_sae"] == D_SAE and cfg["model_name"] == "test"
        back = load_dictionary(tmp_path / arch)
        assert all(torch.equal(a, b) for a, b in zip(d.state_dict().values(), back.state_dict().values()))
        assert (back.k, back.hook_name_out, back.d_out) == (d.k, d.hook_name_out, d.d_out)
        x = torch.randn(7, D_IN)
        assert torch.equal(back(x), d(x))
        save_dictionary(d, tmp_path / (arch + "16"), torch.float16)
        assert (tmp_path / (arch + "16") / "sae_weights.safetensors").stat().st_size < \
            (tmp_path / arch / "sae_weights.safetensors").stat().st_size


GOOD = {"architecture": "standard", "d_in": D_IN, "d_sae": D_SAE, "hook_name": "blocks.0.hook_resid_post"}


@pytest.mark.parametrize("case, cfg, weights, needle", [
    ("huge", {**GOOD, "d_in": 1 << 20, "d_sae": 1 << 20}, None, "cap"),
    ("not json", "{architecture: standard", tensors(), "not valid JSON"),
    ("list", "[1, 2]", tensors(), "JSON object"),
    ("arch", {**GOOD, "architecture": "gated"}, tensors(), "not supported"),
    ("no k", {**GOOD, "architecture": "topk"}, tensors(), "k"),
    ("k too big", {**GOOD, "architecture": "topk", "k": D_SAE + 1}, tensors(), "k"),
    ("no hook", {k: v for k, v in GOOD.items() if k != "hook_name"}, tensors(), "hook_name"),
    ("width type", {**GOOD, "d_sae": "10"}, tensors(), "d_sae"),
    ("negative", {**GOOD, "d_in": -3}, tensors(), "d_in"),
    ("normalised", {**GOOD, "normalize_activations": "expected_average_only_in"}, tensors(), "normalize_activations"),
    ("shape", GOOD, tensors(d_sae=D_SAE + 1), "shape"),
    ("missing", GOOD, {k: v for k, v in tensors().items() if k != "b_enc"}, "lacks b_enc"),
    ("extra", GOOD, {**tensors(), "W_skip": torch.zeros(2)}, "unexpected"),
    ("no threshold", {**GOOD, "architecture": "jumprelu"}, tensors(), "threshold"),
    ("nan", GOOD, {**tensors(), "W_dec": torch.full((D_SAE, D_IN), float("nan"))}, "NaN"),
    ("inf", GOOD, {**tensors(), "b_dec": torch.full((D_IN,), float("inf"))}, "NaN or infinite"),
    ("int", GOOD, {**tensors(), "W_enc": torch.zeros(D_IN, D_SAE, dtype=torch.int32)}, "dtype"),
    ("float64", GOOD, {**tensors(), "W_enc": torch.zeros(D_IN, D_SAE, dtype=torch.float64)}, "dtype"),
])
def test_hostile_dictionaries_are_refused_in_one_line(tmp_path, case, cfg, weights, needle):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "cfg.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    if weights is not None:
        save_file(weights, str(folder / "sae_weights.safetensors"))
    with pytest.raises(DictionaryError) as err:
        load_dictionary(folder)
    msg = str(err.value)
    assert needle in msg and "\n" not in msg and len(msg) <= 300 and "Traceback" not in msg


def test_hostile_files_not_dictionaries(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DictionaryError, match="no cfg.json"):
        load_dictionary(tmp_path / "empty")
    d = write(tmp_path / "junk", GOOD, tensors())
    (d / "sae_weights.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(DictionaryError, match="cannot be read"):
        load_dictionary(d)
    (d / "cfg.json").write_bytes(b"{" + b" " * (2 << 20) + b"}")
    with pytest.raises(DictionaryError, match="above the 1 MB"):
        load_dictionary(d)


def test_huge_cfg_is_refused_before_any_allocation(tmp_path, monkeypatch):
    """A cfg promising 2^24 x 2^24 weights is refused from cfg.json alone: no tensor is built."""
    folder = tmp_path / "huge"
    folder.mkdir()
    (folder / "cfg.json").write_text(json.dumps({**GOOD, "d_in": 1 << 24, "d_sae": 1 << 24}))
    monkeypatch.setattr(torch, "empty", lambda *a, **k: pytest.fail("allocated"))
    with pytest.raises(DictionaryError, match="cap"):
        load_dictionary(folder)


def random_dictionary(d_model, hook, d_sae=16, arch="topk", k=4, seed=0, **kw):
    d = SparseDictionary(d_model, d_sae, hook, arch, k if arch == "topk" else None, **kw)
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        for p in d.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        d.requires_grad_(False)
        if d.threshold is not None:
            d.threshold.abs_()
    return d.eval()


def test_feature_acts_and_reconstruction_on_a_model():
    model = small_model()
    tokens = torch.arange(3, 15)
    d = random_dictionary(32, "blocks.1.hook_resid_post")
    _, cache = model.run_with_cache(tokens[None])
    x = cache["blocks.1.hook_resid_post"][0]
    acts = feature_acts(model, tokens, d)
    assert acts.shape == (12, 16) and torch.equal(acts, d.encode(x))
    rec = reconstruction(model, tokens, d)
    manual = d.decode(d.encode(x))
    assert torch.allclose(rec.recon, manual) and torch.allclose(rec.recon + rec.error, x, atol=1e-6)
    want = float(((x - manual) ** 2).sum() / ((x - x.mean(0)) ** 2).sum())
    assert rec.fvu == pytest.approx(want, rel=1e-5) and torch.equal(rec.l0, (acts > 0).sum(-1))
    idx, vals = top_features(acts, 3)
    assert torch.equal(vals[:, 0], acts.max(-1).values) and (vals[:, :-1] >= vals[:, 1:]).all()
    counts, edges = activation_histogram(acts[:, int(idx[0, 0])])
    assert int(counts.sum()) == int((acts[:, int(idx[0, 0])] > 0).sum()) and len(edges) == len(counts) + 1


def test_logit_effects_are_the_direction_read_through_the_final_norm_and_unembedding():
    model = small_model()
    d = random_dictionary(32, "blocks.1.hook_resid_post")
    direction = d.W_dec[5]
    eff = logit_effects(model, d, 5)
    # LayerNorm: for a large multiple t of the direction, decode(t d) - decode(0) -> effects / std(d)
    centred = direction - direction.mean()
    std = centred.pow(2).mean().sqrt()
    with torch.no_grad():
        diff = model.decode(1e4 * direction) - model.decode(torch.zeros(32))
    assert torch.allclose(eff / std, diff, atol=1e-3)
    (up, up_v), (down, down_v) = promoted_tokens(model, d, 5, n=4)
    assert torch.equal(up, eff.argsort(descending=True)[:4]) and torch.equal(down, eff.argsort()[:4])
    assert (up_v > 0).all() and (down_v < 0).all()


def test_head_contributions_equal_the_change_when_the_head_is_zeroed():
    model = small_model()
    tokens = torch.arange(5, 17)[None]
    d = random_dictionary(32, "blocks.0.hook_resid_mid", arch="standard")
    contrib = head_contributions(model, tokens, d, feature=3, position=7)
    assert contrib.shape == (2, 4) and (contrib[1] == 0).all()
    _, cache = model.run_with_cache(tokens, names_filter=["blocks.0.hook_resid_mid"])
    base = d.hidden_pre(cache["blocks.0.hook_resid_mid"][0, 7])[3]
    for head in range(4):
        def zero(z, hook, head=head):
            z = z.clone()
            z[:, :, head] = 0
            return z
        seen = {}
        model.run_with_hooks(tokens, [("blocks.0.attn.hook_z", zero),
                                      ("blocks.0.hook_resid_mid", lambda x, h: seen.setdefault("x", x))])
        assert float((base - d.hidden_pre(seen["x"][0, 7])[3]).detach()) == pytest.approx(float(contrib[0, head]), abs=1e-4)
    # a transcoder on ln2.hook_normalized: frozen scale; refusals in one line
    t = random_dictionary(32, "blocks.1.ln2.hook_normalized", hook_name_out="blocks.1.hook_mlp_out", d_out=32)
    assert head_contributions(model, tokens, t, 0, 3).shape == (2, 4)
    with pytest.raises(ValueError, match="hook_resid"):
        head_contributions(model, tokens, random_dictionary(8, "blocks.0.attn.hook_z"), 0, 0)


def test_index_finds_the_strongest_window_per_feature(tmp_path):
    g = torch.Generator().manual_seed(0)
    acts = torch.rand(10, 30, 4, generator=g) * (torch.rand(10, 30, 4, generator=g) > 0.7)
    acts[:, :, 3] = 0  # a dead feature
    acts[6, 25, 0] = 9.0
    acts[2, 3, 0] = 8.0
    index = build_index(acts, n_top=3, context=8, bins=5, lead=5)
    corpus = torch.arange(300).view(10, 30)
    (tmp_path / "d").mkdir()
    save_corpus(corpus, tmp_path)
    save_index(index, tmp_path / "d")
    fi = load_index(tmp_path / "d")
    ctx = fi.contexts(0)
    assert [c.value for c in ctx[:2]] == [9.0, 8.0]
    assert ctx[0].tokens == list(range(6 * 30 + 20, 6 * 30 + 28)) and ctx[0].tokens[ctx[0].peak] == 6 * 30 + 25
    assert ctx[1].tokens == list(range(2 * 30, 2 * 30 + 8)) and ctx[1].acts[ctx[1].peak] == 8.0
    assert fi.contexts(3) == [] and fi.frequency(3) == 0
    counts, edges = fi.histogram(1)
    assert int(counts.sum()) == int((acts[..., 1] > 0).sum()) and float(edges[-1]) == pytest.approx(float(acts[..., 1].max()))


def test_train_dictionary_reduces_fvu_on_a_tiny_model(tokenizer, corpus):
    model = small_model()
    texts = corpus.split("\n\n")[:40]
    hook = "blocks.1.hook_resid_post"
    start, _ = train_dictionary(model, hook, texts, 64, tokenizer=tokenizer, k=4, window=32, steps=0)
    seen = []
    trained, res = train_dictionary(model, hook, texts, 64, tokenizer=tokenizer, k=4, window=32, steps=150,
                                    batch_size=512, progress=lambda f, m: seen.append(f))
    probe = tokenizer.encode(corpus[-400:]).ids[:40]
    before, after = reconstruction(model, probe, start).fvu, reconstruction(model, probe, trained).fvu
    assert after < 0.5 * before and after < 0.5, (before, after)
    assert seen[-1] == 1.0 and res.steps == 150 and not res.cancelled
    assert int((feature_acts(model, probe, trained) > 0).sum(-1).max()) <= 4


def test_train_transcoder_and_cancel(tokenizer, corpus):
    import threading
    model = small_model()
    texts = corpus.split("\n\n")[:20]
    fvus = []
    for steps in (0, 150):
        tc, _ = train_dictionary(model, "blocks.0.ln2.hook_normalized", texts, 32, tokenizer=tokenizer, k=4, window=32,
                                 transcoder=True, steps=steps, batch_size=256)
        fvus.append(reconstruction(model, tokenizer.encode(corpus[-400:]).ids[:40], tc).fvu)
    assert tc.kind == "transcoder" and tc.out_hook == "blocks.0.hook_mlp_out"
    assert fvus[1] < 0.6 * fvus[0] and fvus[1] < 0.8, fvus
    stop = threading.Event()
    stop.set()
    _, res = train_dictionary(model, "blocks.0.hook_resid_post", texts, 32, tokenizer=tokenizer, k=4, window=32,
                              steps=100, cancel=stop)
    assert res.cancelled and res.steps == 0
    with pytest.raises(ValueError, match="ln2.hook_normalized"):
        train_dictionary(model, "blocks.0.hook_resid_post", texts, 32, tokenizer=tokenizer, transcoder=True)


def test_shipped_dictionaries_meet_the_stated_quality_on_held_out_text():
    """The shipped SAEs and transcoders of tinystories-6l, measured here on a held-out slice of the TinyStories
    validation split (tests/data/dictionary_heldout.txt: never seen by the model or the dictionaries): FVU <= 0.25 (of
    the SAE's input, of the transcoder's target hook_mlp_out) and mean L0 <= 32 per layer; dead features (never active
    on the 102,400 held-out tokens of the shipped corpus) <= 10 %, read from the index, which must agree with the
    card's table. Transcoder files <= 30 MB, the whole folder <= 40 MB; the card's median replacement score >= 0.6,
    and the graphs of held-out prompts here score as much."""
    import statistics

    from safetensors import safe_open

    from conftest import DATA, ROOT
    from viz_model import load_model
    from viz_model.circuits import attribute, graph_scores, load_transcoders
    from viz_model.features import load_index, shipped_dictionaries
    from viz_model.features.readout import fvu
    folders = shipped_dictionaries("tinystories-6l")
    saes = [f"blocks.{layer}.hook_resid_post" for layer in range(6)]
    transcoders = [f"blocks.{layer}.ln2.hook_normalized" for layer in range(6)]
    assert list(folders) == [name for layer in range(6) for name in (saes[layer], transcoders[layer])]
    base = ROOT / "assets" / "dictionaries" / "tinystories-6l"
    assert sum(p.stat().st_size for p in base.rglob("*") if p.is_file()) <= 40 * 2**20
    assert sum(p.stat().st_size for t in transcoders for p in (base / t).rglob("*") if p.is_file()) <= 30 * 2**20
    rows = json.loads((base / "quality.json").read_text())
    quality = {row["hook"]: row for row in rows if "hook" in row}
    card = (base / "README.md").read_text()
    model, tok = load_model()
    ids = tok.encode((DATA / "dictionary_heldout.txt").read_text(encoding="utf-8")).ids
    windows = torch.tensor(ids[: len(ids) // 128 * 128]).view(-1, 128)
    assert windows.numel() >= 2000
    outs = [f"blocks.{layer}.hook_mlp_out" for layer in range(6)]
    _, cache = model.run_with_cache(windows, names_filter=saes + transcoders + outs)
    for name, folder in folders.items():
        with safe_open(str(folder / "sae_weights.safetensors"), framework="pt") as f:
            assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F16"}
        d = load_dictionary(folder)
        x = cache[name].reshape(-1, 256).float()
        target = x if d.kind == "sae" else cache[d.out_hook].reshape(-1, 256).float()
        acts = d.encode(x)
        assert fvu(target, d.decode(acts)) <= 0.25, name
        assert float((acts > 0).sum(-1).float().mean()) <= 32, name
        dead = float((load_index(folder).index["freq"] == 0).float().mean())
        assert dead <= 0.10 and dead == pytest.approx(quality[name]["dead_fraction"], abs=1e-4), name
        assert f"{quality[name]['fvu']:.3f}" in card
    graphs = next(row for row in rows if row.get("kind") == "graphs")
    assert graphs["median_replacement_score"] >= 0.6
    assert f"{graphs['median_replacement_score']:.3f}" in card
    tcs = load_transcoders(base)
    eot = tok.token_to_id("<|endoftext|>")
    scores = [graph_scores(attribute(model, torch.tensor([eot] + ids[start:start + 23]), tcs,
                                     zero_first_position=True))[0] for start in range(0, 2000, 400)]
    assert statistics.median(scores) >= 0.6, scores


def test_gemma_scope_params_npz_converts_and_runs_the_jumprelu_formula(tmp_path):
    import numpy as np

    from viz_model.features.gemma_scope import convert_gemma_scope
    g = np.random.default_rng(0)
    arrays = {"W_enc": g.normal(size=(D_IN, D_SAE)).astype(np.float32), "W_dec": g.normal(size=(D_SAE, D_IN)).astype(np.float32),
              "b_enc": g.normal(size=D_SAE).astype(np.float32), "b_dec": g.normal(size=D_IN).astype(np.float32),
              "threshold": g.uniform(size=D_SAE).astype(np.float32)}
    np.savez(tmp_path / "params.npz", **arrays)
    d = convert_gemma_scope(tmp_path / "params.npz", tmp_path / "out", "blocks.3.hook_resid_post")
    x = torch.randn(4, D_IN)
    pre = x @ torch.from_numpy(arrays["W_enc"]) + torch.from_numpy(arrays["b_enc"])  # Gemma Scope: no b_dec on input
    want = torch.where(pre > torch.from_numpy(arrays["threshold"]), pre, torch.zeros(()))
    assert torch.allclose(d.encode(x), want, atol=1e-5) and (tmp_path / "out" / "cfg.json").is_file()
    np.savez(tmp_path / "bad.npz", **{**arrays, "W_dec": np.array([object()] * 3)})
    with pytest.raises(DictionaryError, match="dtype"):
        convert_gemma_scope(tmp_path / "bad.npz", tmp_path / "o2", "h")
    np.savez(tmp_path / "shape.npz", **{**arrays, "b_dec": arrays["b_dec"][:2]})
    with pytest.raises(DictionaryError, match="shape"):
        convert_gemma_scope(tmp_path / "shape.npz", tmp_path / "o3", "h")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DictionaryError, match="readable"):
        convert_gemma_scope(tmp_path / "junk.npz", tmp_path / "o4", "h")
