"""Why long contexts are expensive: the attention of one layer timed on the loaded model's own shapes as the
sequence grows, next to the O(n² · d) formula (no Streamlit here)."""

from __future__ import annotations

import statistics
import time

import numpy as np
import pandas as pd
import torch

from viz_model import VizTransformer


@torch.no_grad()
def attention_cost(model: VizTransformer, lengths: list[int], repeats: int = 3) -> pd.DataFrame:
    """Time and memory of one layer's attention (every head: scores q k^T / sqrt(d_k), mask, softmax, weights · v)
    with random q, k, v of the model's shapes, for each sequence length ``n``.

    Columns: ``n``, ``time_ms`` (median of ``repeats``), ``scores_MB`` (the ``[n_heads, n, n]`` float32 score
    matrix, measured from the tensor), ``flops`` (2 · n² · d_head per head for q k^T and again for the weighted
    sum: 4 · n_heads · n² · d_head; Vaswani et al. 2017, table 1: O(n² · d) per self-attention layer).
    """
    attn, cfg = model.blocks[0].attn, model.cfg
    gen = torch.Generator().manual_seed(0)
    rows = []
    for n in lengths:
        q = torch.randn(1, n, cfg.n_heads, cfg.d_head, generator=gen)
        k = torch.randn(1, n, cfg.n_kv_heads, cfg.d_head, generator=gen)
        v = torch.randn(1, n, cfg.n_kv_heads, cfg.d_head, generator=gen)
        if cfg.n_rep > 1:
            v = v.repeat_interleave(cfg.n_rep, dim=2)
        times, nbytes = [], 0
        for _ in range(repeats):
            t0 = time.perf_counter()
            scores = attn.masked_scores(q, k)
            z = torch.softmax(scores, dim=-1) @ v.transpose(1, 2)
            times.append((time.perf_counter() - t0) * 1000)
            nbytes = scores.element_size() * scores.numel()
            del scores, z
        rows.append({"n": n, "time_ms": statistics.median(times), "scores_MB": nbytes / 2**20,
                     "flops": 4 * cfg.n_heads * n * n * cfg.d_head})
    return pd.DataFrame(rows)


def quadratic_fit(frame: pd.DataFrame) -> np.ndarray:
    """The least-squares ``c · flops`` through the measured times (ms), one value per row: the O(n² · d)
    curve scaled to this machine."""
    x, y = frame["flops"].to_numpy(float), frame["time_ms"].to_numpy(float)
    c = float((x * y).sum() / (x * x).sum())
    return c * x
