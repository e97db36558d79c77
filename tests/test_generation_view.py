"""Attention while generating: the rows recorded with the KV cache equal those of a full re-run."""

import numpy as np
import torch

from conftest import small_model
from viz_model import generate
from viz_ui.analysis.generation import attention_rows, continuation_text, is_pattern, next_token_view, record_step


def test_rows_from_the_kv_cache_equal_a_full_rerun():
    model = small_model(seed=6)
    prompt = [4, 8, 15, 16, 23]
    records = [record_step(s, model.cfg.n_layers)
               for s in generate(model, prompt, 6, temperature=1.0, seed=1, record=is_pattern)]
    ids = prompt + [r.token_id for r in records]
    _, cache = model.run_with_cache(torch.tensor([ids[:-1]]))  # every position that was a query
    full = cache["blocks.1.attn.hook_pattern"][0].numpy()  # [head, q, k]
    rows = attention_rows(records, 1, 3)
    for s in range(len(records)):
        q = len(prompt) - 1 + s
        np.testing.assert_allclose(rows[s, :q + 1], full[3, q, :q + 1], atol=1e-5)
        assert np.isnan(rows[s, q + 1:]).all()
    np.testing.assert_allclose(attention_rows(records, 0, None)[2, :7], full_mean(cache, 0, len(prompt) + 1), atol=1e-5)
    assert [r.n_computed for r in records] == [5, 1, 1, 1, 1, 1]
    assert [r.n_reused for r in records] == [0, 5, 6, 7, 8, 9]


def full_mean(cache, layer, q):
    return cache[f"blocks.{layer}.attn.hook_pattern"][0, :, q, :q + 1].mean(0).numpy()


def test_next_token_view_ranks_by_logit_and_keeps_special_tokens(tokenizer):

    logits = np.array([3.0, 1.0, 2.0, 0.0])
    greedy = next_token_view(logits, 0.0, 0, 1.0, actual=2)
    assert greedy.actual_rank == 2 and greedy.actual_prob == 0.0 and greedy.entropy == 0.0
    cut = next_token_view(logits, 1.0, 1, 1.0, actual=3)
    assert cut.actual_rank == 4  # rank by the model's logits, not by the cut distribution
    eot = tokenizer.token_to_id("<|endoftext|>")
    prompt = tokenizer.encode("Max ran.").ids
    assert continuation_text(tokenizer, prompt, [eot] + tokenizer.encode("Tim").ids) == "<|endoftext|>Tim"
    emoji = tokenizer.encode(" 🐶").ids
    assert continuation_text(tokenizer, prompt, emoji[:-1]) == " "  # half an emoji is not shown as U+FFFD
