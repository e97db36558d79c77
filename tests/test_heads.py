"""Head-type scores on hand-made patterns and on a model run."""

import numpy as np
import pytest
import torch

from conftest import small_model
from viz_ui.views.figures import layer_head_heatmap
from viz_ui.analysis.heads import diagonal_score, head_scores, top_heads
from viz_ui.analysis.text_trace import run_trace


def test_diagonal_score_on_hand_made_patterns():
    n = 6
    prev = np.eye(n, k=-1)
    prev[0, 0] = 1
    first = np.zeros((n, n))
    first[:, 0] = 1
    patterns = np.stack([np.stack([prev, first])])  # [1 layer, 2 heads, n, n]
    np.testing.assert_allclose(diagonal_score(patterns, 1, 1), [[1.0, 0.2]])  # first-token head hits i-1 only at i=1


def test_induction_and_duplicate_scores_on_the_repeated_sequence(tokenizer):
    model = small_model(seed=1)
    trace = run_trace(model, tokenizer, "Tim built a tower. Tim built it again.")
    scores = head_scores(model, trace, length=10, seed=3)
    for name, s in scores.items():
        assert s.shape == (2, 4) and np.all((s >= 0) & (s <= 1)), name
    # recompute by hand: the same random sequence, repeated, through the model
    half = torch.randint(0, 320, (1, 10), generator=torch.Generator().manual_seed(3))
    _, cache = model.run_with_cache(torch.cat([half, half], 1))
    pat = cache["blocks.1.attn.hook_pattern"][0, 2].numpy()
    assert scores["induction"][1, 2] == pytest.approx(np.mean([pat[i, i - 9] for i in range(10, 20)]), rel=1e-5)
    assert scores["duplicate-token"][1, 2] == pytest.approx(np.mean([pat[i, i - 10] for i in range(10, 20)]), rel=1e-5)
    text_pat = trace.arrays["blocks.0.attn.hook_pattern"][1]
    n = trace.n_tokens
    assert scores["previous-token"][0, 1] == pytest.approx(np.mean([text_pat[i, i - 1] for i in range(1, n)]), rel=1e-5)
    assert scores["first-token"][0, 1] == pytest.approx(np.mean([text_pat[i, 0] for i in range(1, n)]), rel=1e-5)


def test_a_one_token_text_has_no_text_scores(tokenizer):
    model = small_model()
    scores = head_scores(model, run_trace(model, tokenizer, "M"), length=5)
    assert np.isnan(scores["previous-token"]).all() and not np.isnan(scores["induction"]).any()


def test_top_heads_and_heatmap():
    s = np.array([[0.1, np.nan], [0.9, 0.5]])
    assert top_heads(s, 2) == [(1, 0, 0.9), (1, 1, 0.5)]
    assert top_heads(s, 5) == [(1, 0, 0.9), (1, 1, 0.5), (0, 0, 0.1)]
    fig = layer_head_heatmap(s, "t")
    assert fig.data[0].texttemplate == "%{z:.2f}" and list(fig.layout.xaxis.tickvals) == [0, 1]
