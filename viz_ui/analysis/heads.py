"""Scores that find known kinds of attention heads (as in TransformerLens' head detectors and
Olsson et al., 2022, "In-context Learning and Induction Heads")."""

from __future__ import annotations

import numpy as np
import torch

from viz_model import VizTransformer
from viz_model.head_scores import diagonal_score, repeated_scores

from viz_ui.analysis.numeric import grid_block, pool_blocks
from viz_ui.analysis.text_trace import Trace

SCORE_NAMES = ("previous-token", "first-token", "duplicate-token", "induction")


def overview_patterns(arrays: dict, n_layers: int) -> tuple[np.ndarray, int]:
    """What the all-heads overview draws: every layer's ``hook_pattern``, max-pooled by the overview's block size
    (:func:`viz_ui.analysis.numeric.grid_block`) one layer at a time: ``([n_layers, n_heads, q_blocks, k_blocks], block)``.
    At 1,024 tokens of GPT-2 small the unpooled float32 stack would be 600 MB; this one is under 1 MB."""
    first = arrays["blocks.0.attn.hook_pattern"]
    block = grid_block(n_layers, *first.shape)
    pooled = [pool_blocks(first, block)]
    pooled += [pool_blocks(arrays[f"blocks.{i}.attn.hook_pattern"], block) for i in range(1, n_layers)]
    return np.stack(pooled), block


def text_scores(trace: Trace, n_layers: int, n_heads: int) -> dict[str, np.ndarray]:
    """The two scores read from the text's own patterns (no run of the model), ``[n_layers, n_heads]`` in [0, 1]:

    - previous-token: mean weight on the token just before;
    - first-token: mean weight on position 0, excluding position 0 itself.

    Texts of one token give NaN.
    """
    nan = np.full((n_layers, n_heads), np.nan)
    if trace.n_tokens < 2:
        return {"previous-token": nan, "first-token": nan}
    previous, first = [], []
    for i in range(n_layers):  # one layer at a time: a long text's stacked patterns would be large
        p = trace.arrays[f"blocks.{i}.attn.hook_pattern"][None]
        previous.append(diagonal_score(p, 1, 1))
        first.append(p[:, :, 1:, 0].mean(-1))
    return {"previous-token": np.concatenate(previous), "first-token": np.concatenate(first)}


@torch.no_grad()
def repeated_head_scores(model: VizTransformer, trace: Trace, length: int | None = None,
                         seed: int = 0) -> dict[str, np.ndarray]:
    """duplicate-token and induction, ``[n_layers, n_heads]`` in [0, 1], on a random token sequence repeated twice
    (length ``length``, default ``min(50, n_ctx // 2)``): the mean weight from each token of the second copy to the
    same token in the first copy (duplicate), and to the token right after it (induction: "A B ... A -> B"), from
    :func:`viz_model.head_scores.repeated_scores` (one run of the model; an encoder-decoder's encoder reads the
    trace's text)."""
    src = torch.tensor(trace.src_ids).unsqueeze(0) if trace.is_encoder_decoder else None
    rep = repeated_scores(model, length, seed, src)
    return {"duplicate-token": rep["duplicate-token"].cpu().numpy(), "induction": rep["induction"].cpu().numpy()}


def head_scores(model: VizTransformer, trace: Trace, length: int | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """The four scores of :data:`SCORE_NAMES`: :func:`text_scores` and :func:`repeated_head_scores`."""
    return {**text_scores(trace, model.cfg.n_layers, model.cfg.n_heads),
            **repeated_head_scores(model, trace, length, seed)}


def top_heads(scores: np.ndarray, k: int = 3) -> list[tuple[int, int, float]]:
    """The ``k`` highest-scoring ``(layer, head, score)`` of ``scores`` ``[n_layers, n_heads]``; NaN scores
    (e.g. previous-token on a one-token text) are left out."""
    flat = scores.ravel()
    order = [i for i in np.argsort(-np.nan_to_num(flat, nan=-np.inf), kind="stable") if not np.isnan(flat[i])][:k]
    return [(int(i // scores.shape[1]), int(i % scores.shape[1]), float(scores.ravel()[i])) for i in order]


HEAD_THRESHOLD = 0.4  # a head is named a kind of head only when its score reaches this (stated on the page)


def heads_passing(scores: np.ndarray, threshold: float = HEAD_THRESHOLD, k: int = 3) -> tuple[list, tuple | None]:
    """The (up to ``k``) heads whose score reaches ``threshold``, best first, and the best head overall
    ``(layer, head, score)`` (None when every score is NaN). A head type is named on the page only for the
    first list; when it is empty the page says there is no head of this kind and names the best one."""
    best = top_heads(scores, k)
    return [h for h in best if h[2] >= threshold], (best[0] if best else None)


def cell_text_fits(n_heads: int, scale: float = 1.0) -> bool:
    """Whether a ``[n_layers, n_heads]`` score map can write "0.45" in each cell at the font ``scale`` on a
    full-width figure: up to 24 heads at scale 1, 16 at the lecture default 1.5."""
    return n_heads * scale <= 24


def salience(pattern: np.ndarray) -> np.ndarray:
    """How sharply each head of one layer looks at one particular other token: the mean over queries 1.. of the
    largest weight on a key that is neither the first (an attention sink) nor the query itself. The same measure
    as :func:`viz_ui.views.overview.salient_head`, one layer at a time.

    ``pattern`` ``[n_heads, query_pos, key_pos]`` -> ``[n_heads]`` in [0, 1]; zeros under three tokens."""
    if pattern.shape[-2] < 3 or pattern.shape[-1] < 3:
        return np.zeros(pattern.shape[0])
    p = np.array(pattern[:, 1:, 1:], dtype=np.float32)
    idx = np.arange(min(p.shape[-2], p.shape[-1]))
    p[:, idx, idx] = 0.0  # the query itself
    return p.max(-1).mean(-1)


def most_salient(arrays: dict, n_layers: int, layer: int | None = None) -> tuple[int, int]:
    """The ``(layer, head)`` with the highest :func:`salience` on the text (of ``layer`` only, when given): the
    default head of the views that start from one head, e.g. the head view and the generation's attention."""
    layers = range(n_layers) if layer is None else [layer]
    best = (-1.0, 0, 0)
    for i in layers:
        s = salience(arrays[f"blocks.{i}.attn.hook_pattern"])
        h = int(np.argmax(s))
        if float(s[h]) > best[0]:
            best = (float(s[h]), i, h)
    return best[1], best[2]
