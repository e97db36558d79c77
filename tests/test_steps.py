"""The step-by-step numbers, recomputed independently from the weights with plain numpy."""

import math

import numpy as np
import pytest

from conftest import small_model
from viz_ui.analysis.head_steps import future_share, head_steps, largest_weights, unmasked_view, value_contributions
from viz_ui.views.tables import score_table
from viz_ui.analysis.text_trace import run_trace

TEXT = "Max saw a red ball. Max ran to the ball."


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_every_step_matches_a_recomputation_from_the_weights(tokenizer, placement):
    model = small_model(seed=4, norm_placement=placement)
    trace = run_trace(model, tokenizer, TEXT)
    layer, head, query = 1, 2, trace.n_tokens - 3
    s = head_steps(model, trace, layer, head, query)
    attn = model.blocks[layer].attn
    W = {n: getattr(attn, n).detach().numpy() for n in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")}

    # the input: LayerNorm of the residual stream (pre-LN), or the residual stream itself (post-LN)
    resid = trace.arrays[f"blocks.{layer}.hook_resid_pre"]
    if placement == "pre":
        ln = model.blocks[layer].ln1
        centred = resid - resid.mean(-1, keepdims=True)
        x = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5) * ln.w.detach().numpy() + ln.b.detach().numpy()
    else:
        x = resid
    np.testing.assert_allclose(s.x, x, atol=1e-5)

    q, k, v = (x @ W[f"W_{n}"][head] + W[f"b_{n}"][head] for n in "QKV")
    np.testing.assert_allclose(s.q, q, atol=1e-5)
    np.testing.assert_allclose(s.k, k, atol=1e-5)
    np.testing.assert_allclose(s.v, v, atol=1e-5)

    dots = np.array([q[query] @ k[j] for j in range(trace.n_tokens)])
    np.testing.assert_allclose(s.dots, dots, atol=1e-5)
    np.testing.assert_allclose(s.scaled, dots / math.sqrt(model.cfg.d_head), atol=1e-5)
    visible = np.arange(trace.n_tokens) <= query
    assert np.all(np.isneginf(s.scores[~visible]))
    np.testing.assert_allclose(s.scores[visible], dots[visible] / math.sqrt(model.cfg.d_head), atol=1e-5)
    e = np.exp(s.scores[visible] - s.scores[visible].max())
    np.testing.assert_allclose(s.weights[visible], e / e.sum(), atol=1e-6)
    assert np.all(s.weights[~visible] == 0)

    np.testing.assert_allclose(s.z, (s.weights[:, None] * v).sum(0), atol=1e-5)
    z_all = np.concatenate([trace.arrays[f"blocks.{layer}.attn.hook_pattern"][h, query] @
                            (x @ W["W_V"][h] + W["b_V"][h]) for h in range(model.cfg.n_heads)])
    np.testing.assert_allclose(s.z_all, z_all, atol=1e-5)
    np.testing.assert_allclose(s.head_out, s.z @ W["W_O"][head], atol=1e-5)
    attn_out = z_all @ W["W_O"].reshape(-1, model.cfg.d_model) + W["b_O"]
    np.testing.assert_allclose(s.attn_out, attn_out, atol=1e-5)
    np.testing.assert_allclose(s.resid_mid, resid[query] + attn_out, atol=1e-5)
    if placement == "pre":
        np.testing.assert_allclose(trace.arrays[f"blocks.{layer}.hook_resid_mid"][query], resid[query] + attn_out, atol=1e-5)


def test_score_table_is_checkable_by_hand():
    """The worked example: scores [2, 1, 0] -> softmax [0.665, 0.245, 0.090]; a masked key shows −∞."""
    scores = np.array([2.0, 1.0, 0.0, -np.inf])
    weights = np.array([0.66524096, 0.24472847, 0.09003057, 0.0])
    table = score_table(["a", "b", "c", "d"], scores * 4, scores, scores, weights)
    assert table["mask"].tolist() == ["0", "0", "0", "−∞"] and table["score"].iloc[3] == "−∞"
    exp = table["exp(score − max)"].to_numpy()
    np.testing.assert_allclose(exp, [1.0, math.exp(-1), math.exp(-2), 0.0])
    np.testing.assert_allclose(exp / exp.sum(), weights, atol=1e-7)
    assert [round(w, 3) for w in exp[:3] / exp.sum()] == [0.665, 0.245, 0.090]


def test_out_of_range_selection_is_refused(tokenizer):
    model = small_model()
    trace = run_trace(model, tokenizer, TEXT)
    with pytest.raises(IndexError):
        head_steps(model, trace, 0, 0, trace.n_tokens)


def test_unmasked_view_agrees_with_the_model_below_the_diagonal(tokenizer):

    model = small_model(seed=5)
    trace = run_trace(model, tokenizer, TEXT)
    raw, free = unmasked_view(trace, model.cfg, 1, 3)
    masked = trace.arrays["blocks.1.attn.hook_attn_scores"][3]
    lower = np.tril(np.ones_like(raw, dtype=bool))
    np.testing.assert_allclose(raw[lower], masked[lower], atol=1e-5)
    assert np.isfinite(raw).all()
    np.testing.assert_allclose(free.sum(-1), 1.0, atol=1e-6)
    assert (free[~lower] > 0).all()  # without the mask, later tokens get weight


def test_helpers_for_the_page(tokenizer):

    model = small_model(seed=7)
    trace = run_trace(model, tokenizer, TEXT)
    s = head_steps(model, trace, 0, 1, 6)
    order = largest_weights(s, 3)
    assert all(j <= 6 for j in order) and list(s.weights[order]) == sorted(s.weights[:7], reverse=True)[:3]
    np.testing.assert_allclose(value_contributions(s).sum(0), s.z, atol=1e-5)
    assert future_share(np.array([[0.5, 0.5], [0.2, 0.8]])) == 0.25
