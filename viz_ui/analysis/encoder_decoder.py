"""Encoder-decoder views: cross-attention patterns and outputs from a trace (no Streamlit here)."""

from __future__ import annotations

import numpy as np

from viz_ui.analysis.text_trace import Trace, tokenizer_errors


def cross_patterns(trace: Trace, n_layers: int) -> np.ndarray:
    """Every decoder layer's cross-attention ``[n_layers, n_heads, target_pos, source_pos]``."""
    return np.stack([trace.arrays[f"blocks.{i}.cross_attn.hook_pattern"] for i in range(n_layers)])


def output_text(tokenizer, out_ids: list[int], end_id: int) -> str:
    """The decoded output up to (not including) the end token."""
    ids = out_ids[:out_ids.index(end_id)] if end_id in out_ids else out_ids
    with tokenizer_errors("the output cannot be decoded"):  # an uploaded tokenizer may fail or panic
        return tokenizer.decode(ids)

