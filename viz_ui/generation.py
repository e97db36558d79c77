"""What generation with a KV cache computed at each step, as numpy (no Streamlit)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from viz_model import Step


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
    """Keep the last query row of every layer's pattern from a step recorded with :func:`is_pattern`."""
    rows = np.stack([step.cache[f"blocks.{i}.attn.hook_pattern"][0, :, -1].numpy() for i in range(n_layers)])
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
