"""Small numeric helpers for the views: exact functions of the model's own values."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class PCA:
    """A principal-component projection fitted on a matrix ``[n, d]``."""

    mean: np.ndarray  # [d]
    components: np.ndarray  # [k, d], unit rows, by decreasing variance
    explained: np.ndarray  # [k], fraction of the total variance per component

    def project(self, x: np.ndarray) -> np.ndarray:
        """Coordinates ``[n, k]`` of rows ``x`` ``[n, d]``."""
        return (x - self.mean) @ self.components.T


def fit_pca(matrix: np.ndarray, k: int = 3) -> PCA:
    """PCA (Pearson, 1901) as the eigendecomposition of the centred matrix's scatter matrix ``Xᵀ X`` ``[d, d]``, in
    float64 with torch (``torch.linalg.eigh``): the same axes and variances as an SVD of ``X`` (its right singular
    vectors and squared singular values), for ``2 n d²`` multiply-adds instead of an SVD's ``~4 n d²``, with no
    ``[n, d]`` factor kept (128,256 × 2,048 embeddings: seconds instead of minutes on a CPU).

    Raises:
        ValueError: when ``matrix`` is not 2-D or has fewer than 2 rows.
    """
    import torch

    if matrix.ndim != 2 or matrix.shape[0] < 2:
        raise ValueError("PCA needs a 2-D matrix with at least 2 rows")
    x = torch.from_numpy(np.asarray(matrix, dtype=np.float64))
    mean = x.mean(0)
    centred = x - mean
    var, vecs = torch.linalg.eigh(centred.T @ centred)  # ascending
    var, vt = var.flip(0).clamp_min(0).numpy(), vecs.flip(1).T.numpy()
    k = min(k, vt.shape[0])
    signs = np.sign(vt[:k].sum(1, keepdims=True))  # fix the arbitrary sign of each axis
    signs[signs == 0] = 1
    return PCA(mean=mean.numpy(), components=vt[:k] * signs, explained=var[:k] / var.sum())


def cosine_similarity(x: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarity ``x_i . x_j / (|x_i| |x_j|)`` of the rows of ``x`` ``[n, d]`` -> ``[n, n]``.

    A zero row has similarity 0 with everything.
    """
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit = np.divide(x, norms, out=np.zeros_like(x, dtype=np.float64), where=norms > 0)
    return unit @ unit.T


def entropy_bits(probs: np.ndarray) -> float:
    """Shannon entropy ``-sum p log2 p`` of a distribution ``[d_vocab]``, in bits."""
    p = probs[probs > 0].astype(np.float64)
    return float(-(p * np.log2(p)).sum())


def pearson(a: np.ndarray, b: np.ndarray) -> float | None:
    """Pearson's correlation of two maps' cells (finite pairs only); None when either is constant or has fewer than
    3 cells."""
    x, y = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 3 or x.std() == 0 or y.std() == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def grid_block(n_layers: int, n_heads: int, n_q: int, n_k: int, max_tile: int = 48, max_cells: int = 250_000) -> int:
    """The block size :func:`viz_ui.views.figures.attention_grid` max-pools ``[query_pos, key_pos]`` maps by: tiles at most ``max_tile``
    cells across, and smaller when needed to keep the whole figure under ``max_cells`` cells (1 = no pooling)."""
    max_tile = max(4, min(max_tile, int(math.sqrt(max_cells / (n_layers * n_heads)))))
    return max(1, math.ceil(max(n_q, n_k) / max_tile))


def pool_blocks(matrices: np.ndarray, block: int) -> np.ndarray:
    """The maximum over every ``block × block`` square of the last two axes (zero-padded at the end):
    ``[..., n_q, n_k]`` -> ``[..., ceil(n_q / block), ceil(n_k / block)]``."""
    if block == 1:
        return matrices
    *lead, n_q, n_k = matrices.shape
    pad = [(0, 0)] * len(lead) + [(0, block * math.ceil(n_q / block) - n_q), (0, block * math.ceil(n_k / block) - n_k)]
    p = np.pad(matrices, pad)
    mq, mk = p.shape[-2] // block, p.shape[-1] // block
    return p.reshape(*lead, mq, block, mk, block).max(axis=(-3, -1))
