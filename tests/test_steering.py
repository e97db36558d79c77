"""Steering and feature ablation: the identities the issue asks for, checked against independent computations."""

import pytest
import torch

from conftest import small_model
from viz_model.features import SparseDictionary
from viz_model.interventions.steering import (ablate_features, contrastive_direction, greedy_continuation, steer,
                                              steered_continuations)

TOKENS = torch.arange(3, 17)[None]


def record(model, tokens, hook_name, fwd_hooks=()):
    seen = {}
    hooks = list(fwd_hooks) + [(hook_name, lambda x, h: seen.setdefault("x", x.clone()))]
    logits = model.run_with_hooks(tokens, hooks)
    return logits, seen["x"]


def test_alpha_zero_gives_the_unsteered_logits_exactly():
    model = small_model()
    direction = torch.randn(32)
    with torch.no_grad():
        clean = model(TOKENS)
    assert torch.equal(steer(model, TOKENS, "blocks.0.hook_resid_mid", direction, 0.0), clean)
    assert torch.equal(steer(model, TOKENS[0], "blocks.1.hook_resid_post", direction, 0.0, positions=[2, -1]), clean)


@pytest.mark.parametrize("positions", [None, [0, 5, -1]])
def test_the_activation_changes_by_exactly_alpha_times_direction(positions):
    model = small_model()
    direction = torch.randn(32, generator=torch.Generator().manual_seed(3))
    alpha = 2.5
    hook = "blocks.0.hook_resid_post"
    with torch.no_grad():
        _, clean = record(model, TOKENS, hook)
        from viz_model.interventions.steering import steering_hook
        _, steered = record(model, TOKENS, hook, [(hook, steering_hook(direction, alpha,
                                                                       None if positions is None else [0, 5, 13]))])
    want = clean.clone()
    rows = list(range(14)) if positions is None else [0, 5, 13]
    want[:, rows] = clean[:, rows] + alpha * direction
    assert torch.equal(steered, want)
    others = [p for p in range(14) if p not in rows]
    assert torch.equal(steered[:, others], clean[:, others])


def test_steering_the_last_residual_equals_decoding_the_moved_residual():
    """Adding alpha * d to the last block's output moves the logits to decode(resid + alpha * d)."""
    model = small_model()
    direction = torch.randn(32)
    _, cache = model.run_with_cache(TOKENS, names_filter=["blocks.1.hook_resid_post"])
    with torch.no_grad():
        want = model.decode(cache["blocks.1.hook_resid_post"] + 3.0 * direction)
    got = steer(model, TOKENS, "blocks.1.hook_resid_post", direction, 3.0)
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, steer(model, TOKENS, "blocks.1.hook_resid_post", direction, 0.0), atol=1e-2)


def test_steering_refusals():
    model = small_model()
    with pytest.raises(KeyError):
        steer(model, TOKENS, "blocks.9.hook_resid_post", torch.zeros(32), 1.0)
    with pytest.raises(ValueError, match="NaN"):
        steer(model, TOKENS, "blocks.0.hook_resid_post", torch.full((32,), float("nan")), 1.0)
    with pytest.raises(ValueError, match="positions"):
        steer(model, TOKENS, "blocks.0.hook_resid_post", torch.zeros(32), 1.0, positions=[14])


def test_contrastive_direction_is_the_difference_of_mean_activations():
    model = small_model()
    a, b = torch.arange(5, 12), torch.arange(20, 40)
    hook = "blocks.1.hook_resid_mid"
    with torch.no_grad():
        _, xa = record(model, a[None], hook)
        _, xb = record(model, b[None], hook)
    want = xa[0].sum(0) / 7 - xb[0].sum(0) / 20
    assert torch.allclose(contrastive_direction(model, a, b, hook), want, atol=1e-5)


def dictionary(hook, d_model=32, d_sae=24, out=None, seed=0):
    d = SparseDictionary(d_model, d_sae, hook, "topk", 6, hook_name_out=out, d_out=d_model if out else None,
                         apply_b_dec_to_input=out is None)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in d.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return d.requires_grad_(False).eval()


def test_ablating_no_feature_gives_the_intact_logits():
    model = small_model()
    with torch.no_grad():
        clean = model(TOKENS)
    sae = dictionary("blocks.0.hook_resid_post")
    tc = dictionary("blocks.1.ln2.hook_normalized", out="blocks.1.hook_mlp_out")
    assert torch.equal(ablate_features(model, TOKENS, sae, []), clean)
    assert torch.equal(ablate_features(model, TOKENS, tc, []), clean)


def test_ablating_features_replaces_the_value_by_the_reconstruction_without_them_plus_the_error():
    model = small_model()
    hook = "blocks.1.hook_resid_post"
    sae = dictionary(hook)
    _, cache = model.run_with_cache(TOKENS, names_filter=[hook])
    x = cache[hook]
    # written from the definition, with the SAELens TopK formula computed here
    pre = (x - sae.b_dec) @ sae.W_enc + sae.b_enc
    top = pre.topk(6, dim=-1)
    f = torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values))
    error = x - (f @ sae.W_dec + sae.b_dec)
    active = [int(i) for i in (f[0] > 0).any(0).nonzero()[:3, 0]]
    f_off = f.clone()
    f_off[..., active] = 0
    with torch.no_grad():
        want = model.decode(f_off @ sae.W_dec + sae.b_dec + error)
    got = ablate_features(model, TOKENS, sae, active)
    assert torch.allclose(got, want, atol=1e-4)
    assert (got - model.decode(x)).abs().max() > 1e-3  # the ablated features did something
    # a transcoder: the MLP's output loses exactly those features' decoder rows
    tc = dictionary("blocks.0.ln2.hook_normalized", out="blocks.0.hook_mlp_out", seed=1)
    _, cache = model.run_with_cache(TOKENS, names_filter=["blocks.0.ln2.hook_normalized", "blocks.0.hook_mlp_out"])
    ftc = tc.encode(cache["blocks.0.ln2.hook_normalized"])
    feats = [int(i) for i in (ftc[0] > 0).any(0).nonzero()[:2, 0]]
    want_mlp = cache["blocks.0.hook_mlp_out"] - ftc[..., feats] @ tc.W_dec[feats]
    _, seen = record(model, TOKENS, "blocks.0.hook_mlp_out",
                     __import__("viz_model.interventions.steering", fromlist=["x"]).feature_ablation_hooks(tc, feats))
    assert torch.allclose(seen, want_mlp, atol=1e-6)
    with pytest.raises(ValueError, match="features"):
        ablate_features(model, TOKENS, sae, [24])


def test_steered_continuation_with_kv_cache_equals_recomputing_every_step():
    model = small_model()
    ids = list(range(3, 10))
    direction = torch.randn(32, generator=torch.Generator().manual_seed(5)) * 3
    hook = "blocks.0.hook_resid_post"
    intact, same = steered_continuations(model, ids, hook, direction, 0.0, n_new=8)
    assert intact == same == greedy_continuation(model, ids, 8)
    results = []
    for positions in (None, [1, 4]):
        _, steered = steered_continuations(model, ids, hook, direction, 2.0, n_new=8, positions=positions)
        seq = list(ids)
        for _ in range(8):  # no cache: steer the whole sequence, take the argmax of the last position
            pos = None if positions is None else positions
            seq.append(int(steer(model, torch.tensor(seq), hook, direction, 2.0, positions=pos)[0, -1].argmax()))
        assert steered == seq[len(ids):]
        results.append(steered)
    assert results[0] != intact  # steering every position changed the continuation
