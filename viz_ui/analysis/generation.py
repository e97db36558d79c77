"""What generation with a KV cache computed at each step, as numpy (no Streamlit)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from tokenizers import Tokenizer

from viz_model import Step, VizTransformer, iter_generate, next_token_probs

from viz_ui.analysis.numeric import entropy_bits
from viz_ui.analysis.text_trace import mask_positions, tokenizer_errors  # noqa: F401  (mask_positions: pages import it from here)


def is_pattern(name: str) -> bool:
    """Hook filter for generation: the attention patterns, plus layer 0's q to show what was computed."""
    return name.endswith("hook_pattern") or name == "blocks.0.attn.hook_q"


@dataclass
class StepRecord:
    """One generated token and the newest position's attention rows ``[n_layers, n_heads, key_pos]``."""

    token_id: int
    prob: float
    model_prob: float
    attention: np.ndarray
    n_computed: int  # positions whose q, k and v this step computed (the prompt at step 1, then 1)
    n_reused: int  # positions whose keys and values came from the KV cache


def record_step(step: Step, n_layers: int) -> StepRecord:
    """Keep the last query row of every layer's pattern from a step recorded with :func:`is_pattern`.

    Raises:
        KeyError, TypeError: when the step was generated without ``record=is_pattern``.
    """
    rows = np.stack([step.cache[f"blocks.{i}.attn.hook_pattern"][0, :, -1].cpu().numpy() for i in range(n_layers)])
    n_keys = rows.shape[-1]
    computed = step.cache["blocks.0.attn.hook_q"].shape[1]
    return StepRecord(step.token_id, step.prob, step.model_prob, rows, computed, n_keys - computed)


def attention_rows(records: list[StepRecord], layer: int, head: int | None) -> np.ndarray:
    """``[n_steps, n_keys_of_last_step]``: row s is the attention of the token that step s read last
    (the newest position) over every position; NaN past the positions it could see. ``head=None``
    averages over heads."""
    width = records[-1].attention.shape[-1]
    out = np.full((len(records), width), np.nan)
    for s, rec in enumerate(records):
        row = rec.attention[layer].mean(0) if head is None else rec.attention[layer, head]
        out[s, :len(row)] = row
    return out


def salient_head(records: list[StepRecord]) -> tuple[int, int]:
    """The ``(layer, head)`` the generation's attention view starts on: the head whose newest token puts the most
    weight on one particular other token, neither the first (an attention sink) nor itself, averaged over the
    steps (as :func:`viz_ui.views.overview.salient_head` on a text). Layer 0, head 0 when no row has such a key."""
    peaks = np.mean([r.attention[:, :, 1:-1].max(-1) if r.attention.shape[-1] > 2 else
                     np.zeros(r.attention.shape[:2]) for r in records], axis=0)  # [n_layers, n_heads]
    layer, head = np.unravel_index(int(np.argmax(peaks)), peaks.shape)
    return int(layer), int(head)


def shown_bars(probs: np.ndarray, k: int) -> np.ndarray:
    """Ids of the (at most ``k``) most likely tokens under ``probs`` that have a probability above 0, most
    likely first (ties: lower id first): top-k, top-p and T = 0 leave most tokens at exactly 0, which are not
    drawn as empty bars. At least the most likely token."""
    order = np.argsort(-probs, kind="stable")[:k]
    return order[: max(1, int((probs[order] > 0).sum()))]


def generate_records(model: VizTransformer, ids: list[int], n_new: int, temperature: float, top_k: int,
                     top_p: float, seed: int) -> Iterator[StepRecord]:
    """:func:`viz_model.iter_generate` with the KV cache, keeping each step's attention rows."""
    for step in iter_generate(model, ids, n_new, temperature, top_k, top_p, seed, record=is_pattern):
        yield record_step(step, model.cfg.n_layers)


def continuation_text(tokenizer: Tokenizer, prompt_ids: list[int], new_ids: list[int]) -> str:
    """The text the new tokens add after the prompt, special tokens (``<|endoftext|>``) included; a
    character whose bytes are not all generated yet is left out rather than shown as U+FFFD."""
    with tokenizer_errors("the generated tokens cannot be decoded"):  # an uploaded tokenizer may fail or panic
        full = tokenizer.decode(prompt_ids + new_ids, skip_special_tokens=False)
        before = tokenizer.decode(prompt_ids, skip_special_tokens=False)
    return full[len(before):].rstrip("\ufffd")


@dataclass
class NextToken:
    """The next-token distribution at one position under the sampling settings."""

    probs: np.ndarray  # [d_vocab], softmax(logits / T) after top-k / top-p
    entropy: float  # bits
    actual_rank: int | None  # rank of the text's real next token by raw logit (1 = highest)
    actual_prob: float | None  # its probability under ``probs``


def next_token_view(logits: np.ndarray, temperature: float, top_k: int, top_p: float,
                    actual: int | None = None) -> NextToken:
    """Re-apply softmax with temperature, top-k and top-p to cached logits ``[d_vocab]`` (see
    :func:`viz_model.next_token_probs`), and place the real next token ``actual`` (if any).

    Raises:
        ValueError: for invalid sampling settings.
    """
    probs = next_token_probs(torch.tensor(logits), temperature, top_k, top_p).numpy()  # a copy: traces are read-only
    rank = None if actual is None else int((logits > logits[actual]).sum()) + 1
    entropy = max(0.0, entropy_bits(probs))  # a one-hot distribution sums to -0.0: shown as "-0.00 bits"
    return NextToken(probs, entropy, rank, None if actual is None else float(probs[actual]))
