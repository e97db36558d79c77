"""Why long contexts are expensive: the attention of one layer timed on the loaded model's own shapes as the
sequence grows, next to the O(n² · d) formula (no Streamlit here)."""

from __future__ import annotations

import statistics
import time

import numpy as np
import pandas as pd
import torch

from viz_model import Config, VizTransformer
from viz_model.limits import attention_bytes, attn_budget_bytes, max_tokens_for_budget

STANDARD_LENGTHS = (64, 128, 256, 512, 1024, 2048)


def cost_lengths(cfg: Config, budget: int | None = None) -> tuple[list[int], str | None]:
    """The sequence lengths the "Measure" button times for a model, and a note when the memory budget stopped
    them short (else None).

    The standard points 64 … 2,048 up to ``max(256, n_ctx)``, kept only where one layer's scores and pattern
    (``2 · n_heads · n² · 4`` bytes, what :func:`attention_cost` holds at once) fit the budget
    (``VIZ_ATTN_BUDGET_MB``, default 512 MB): 512 heads stop at n = 256 instead of asking for 17 GB at 2,048.
    With fewer than three points left, the budget's own maximum and its halves are timed instead.
    """
    budget = attn_budget_bytes() if budget is None else budget
    top = min(STANDARD_LENGTHS[-1], max(256, cfg.n_ctx))
    cap = max_tokens_for_budget(cfg.n_heads, budget)
    lengths = [n for n in STANDARD_LENGTHS if n <= min(top, cap)]
    if len(lengths) < 3:
        lengths = sorted({max(1, min(top, cap) >> i) for i in range(4)})
    wanted = [n for n in STANDARD_LENGTHS if n <= top]
    if wanted[-1] <= lengths[-1]:
        return lengths, None
    need = attention_bytes(cfg.n_heads, wanted[-1], wanted[-1]) / 2**20
    return lengths, (f"Measured up to n = {lengths[-1]:,} only: at n = {wanted[-1]:,} the scores and weights of "
                     f"{cfg.n_heads} heads would take {need:,.0f} MB, over this server's attention memory budget of "
                     f"{budget / 2**20:,.0f} MB (VIZ_ATTN_BUDGET_MB).")


@torch.no_grad()
def attention_cost(model: VizTransformer, lengths: list[int], repeats: int = 3) -> pd.DataFrame:
    """Time and memory of one layer's attention (every head: scores q k^T / sqrt(d_k), mask, softmax, weights · v)
    with random q, k, v of the model's shapes, for each sequence length ``n``.

    Callers keep ``lengths`` within the memory budget (:func:`cost_lengths`); any ``n`` whose scores and pattern
    would exceed it is skipped here too.

    Columns: ``n``, ``time_ms`` (median of ``repeats``), ``scores_MB`` (the ``[n_heads, n, n]`` float32 score
    matrix, measured from the tensor), ``flops`` (2 · n² · d_head per head for q k^T and again for the weighted
    sum: 4 · n_heads · n² · d_head; Vaswani et al. 2017, table 1: O(n² · d) per self-attention layer).
    """
    attn, cfg = model.blocks[0].attn, model.cfg
    gen = torch.Generator().manual_seed(0)
    rows, budget = [], attn_budget_bytes()
    for n in lengths:
        if attention_bytes(cfg.n_heads, n, n) > budget:
            continue
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
