"""Temperature, top-k, top-p, and seeded generation."""

import pytest
import torch

from conftest import small_model
from viz_model import generate, next_token_probs

LOGITS = torch.tensor([2.0, 1.0, 0.0, -1.0])


def test_temperature_one_is_softmax_and_zero_is_argmax():
    torch.testing.assert_close(next_token_probs(LOGITS, 1.0), torch.softmax(LOGITS, -1))
    assert next_token_probs(LOGITS, 0.0).tolist() == [1.0, 0.0, 0.0, 0.0]
    hot = next_token_probs(LOGITS, 100.0)
    assert float(hot.max() - hot.min()) < 0.01  # very high temperature: nearly uniform
    torch.testing.assert_close(next_token_probs(LOGITS, 1e9), hot)  # clipped at the maximum


def test_worked_example_scores_2_1_0():
    probs = next_token_probs(torch.tensor([2.0, 1.0, 0.0]), 1.0)
    assert [round(p, 3) for p in probs.tolist()] == [0.665, 0.245, 0.090]


def test_top_k_and_top_p():
    p = next_token_probs(LOGITS, 1.0, top_k=2)
    full = torch.softmax(LOGITS, -1)
    torch.testing.assert_close(p, torch.tensor([full[0], full[1], 0, 0]) / (full[0] + full[1]))
    # full = [0.644, 0.237, 0.087, 0.032]: p=0.7 needs the two most likely tokens
    assert (next_token_probs(LOGITS, 1.0, top_p=0.7) > 0).tolist() == [True, True, False, False]
    assert (next_token_probs(LOGITS, 1.0, top_p=0.5) > 0).tolist() == [True, False, False, False]
    batched = next_token_probs(torch.stack([LOGITS, LOGITS.flip(0)]), 1.0, top_k=1)
    assert batched.tolist() == [[1, 0, 0, 0], [0, 0, 0, 1]]


@pytest.mark.parametrize("kwargs", [dict(temperature=-1), dict(temperature=float("nan")), dict(top_k=-2),
                                    dict(top_p=0.0), dict(top_p=1.5)])
def test_invalid_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        next_token_probs(LOGITS, **{"temperature": 1.0, **kwargs})


def test_generation_is_seeded_and_greedy_follows_the_argmax(model):
    a = generate(model, [1, 2, 3], 8, temperature=1.0, seed=7)
    assert [s.token_id for s in a] == [s.token_id for s in generate(model, [1, 2, 3], 8, temperature=1.0, seed=7)]
    assert [s.token_id for s in a] != [s.token_id for s in generate(model, [1, 2, 3], 8, temperature=1.0, seed=8)]
    ids = [1, 2, 3]
    for step in generate(model, [1, 2, 3], 5, temperature=0):
        assert step.token_id == int(model(torch.tensor([ids]))[0, -1].argmax())
        assert step.prob == 1.0
        ids.append(step.token_id)


def test_generation_stops_at_the_context(model):
    # n_ctx = 48: a 45-token prompt leaves room to read 3 more tokens, and the 4th is only predicted
    assert len(generate(model, list(range(45)), 10)) == 4
    assert len(generate(model, list(range(48)), 10)) == 1
    with pytest.raises(ValueError):
        generate(model, [], 3)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_kv_cache_logits_equal_a_full_rerun(placement):
    model = small_model(norm_placement=placement)
    ids = [5, 9, 2, 7, 7, 1, 30, 4]
    full = model(torch.tensor([ids]))
    kv = model.new_kv_cache()
    parts = [model(torch.tensor([ids[:5]]), kv_cache=kv)] + [model(torch.tensor([[t]]), kv_cache=kv) for t in ids[5:]]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-5, atol=1e-5)
    assert kv.n_pos == len(ids)
    with pytest.raises(ValueError, match="context"):
        model(torch.zeros(1, 41, dtype=torch.long), kv_cache=kv)


def test_generation_with_kv_cache_matches_generation_without(model):
    steps = generate(model, [3, 1, 4, 1, 5], 10, temperature=0.8, seed=3, record=True)
    ids = [3, 1, 4, 1, 5]
    gen = torch.Generator().manual_seed(3)
    for i, step in enumerate(steps):
        logits = model(torch.tensor([ids]))[0, -1].detach()  # a full re-run without cache
        probs = next_token_probs(logits, 0.8)
        assert step.token_id == int(torch.multinomial(probs, 1, generator=gen))
        assert step.model_prob == pytest.approx(float(torch.softmax(logits, -1)[step.token_id]), rel=1e-4)
        pattern = step.cache["blocks.1.attn.hook_pattern"]
        # only the newest position is computed after the first step; its row covers every key so far
        assert pattern.shape == ((1, 4, 5, 5) if i == 0 else (1, 4, 1, len(ids)))
        assert step.cache["blocks.0.attn.hook_q"].shape[1] == (5 if i == 0 else 1)
        ids.append(step.token_id)


def test_a_tiny_temperature_is_nearly_greedy_not_nan():
    logits = torch.tensor([2.0, 1.0, 0.0, -50.0])
    for t in (1e-40, 1e-6):
        probs = next_token_probs(logits, t)
        assert torch.isfinite(probs).all() and probs[0] == pytest.approx(1.0)
