"""How much work each costly view is, in forward-equivalents (copies of the text in a batched forward pass) or
as probes scaled to the model's shapes, for :mod:`viz_ui.app.gate`'s estimates (no Streamlit here).

A forward pass over ``n`` tokens costs about ``2 · n_params · n`` multiply-adds (Kaplan et al., 2020, §2.1, leaving
out the attention's ``n²`` term); the formulas below count other work against it.
"""

from __future__ import annotations

import math
import time

from viz_model import VizTransformer
from viz_model.head_scores import default_length
from viz_model.interventions.cost import sweep_cost


GENERATE_STEP = 0.125  # one greedy step with the KV cache, in copies of a text of ~64 tokens (reads every weight)


def head_effects_copies(model: VizTransformer, n_pos: int) -> float:
    """The per-head ablation map (:func:`viz_model.interventions.cost.sweep_cost`, ``"ablation"``)."""
    return sweep_cost(model, n_pos, "ablation", logit_rows=1)


def patching_copies(model: VizTransformer, n_pos: int, site: str, method: str = "exact") -> float:
    """One patching sweep (:func:`viz_model.interventions.cost.sweep_cost`), plus the clean run whose activations are
    patched in."""
    return sweep_cost(model, n_pos, site, method, logit_rows=1) + 1


def patching_cells(model: VizTransformer, n_pos: int, site: str) -> int:
    """The cells of one patching map: ``n_layers · pos`` (``head``: ``n_layers · n_heads``)."""
    return model.cfg.n_layers * (model.cfg.n_heads if site == "head" else n_pos)


def ablation_copies(model: VizTransformer, n_generate: int) -> float:
    """The ablation view: the intact and the ablated run, a logit lens of each, and ``n_generate`` greedy steps
    of each (decoders only)."""
    return 4 + (2 * n_generate * GENERATE_STEP if model.cfg.causal else 0)


def corruption_copies(n_candidates: int) -> float:
    """The default corruption's search: the clean run and one copy per candidate text."""
    return n_candidates + 1


def head_scores_copies(model: VizTransformer, n_pos: int) -> float:
    """The head scores' run on a repeated random sequence (``2 · min(50, n_ctx // 2)`` tokens), in copies of an
    ``n_pos``-token text (linear in the length)."""
    return 2 * default_length(model.cfg.n_ctx) / max(1, n_pos)


def logit_lens_copies(model: VizTransformer) -> float:
    """Decoding every layer × position over the vocabulary: ``(n_layers + 1) · d_model · d_vocab`` multiply-adds
    per position against a forward's ``n_params``."""
    cfg = model.cfg
    return (cfg.n_layers + 1) * cfg.d_model * cfg.d_vocab / max(1, model.n_params())


def moe_copies() -> float:
    """A mixture-of-experts intervention: one run of the text with the routing changed."""
    return 1.0


_PROBES: dict[str, float] = {}


def _probe(name: str, fn) -> float:
    """Seconds of ``fn()`` (best of two), measured once per process."""
    if name not in _PROBES:
        best = math.inf
        for _ in range(2):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        _PROBES[name] = best
    return _PROBES[name]


def pca_seconds(n_rows: int, n_cols: int, flops_per_second: float) -> float:
    """The embedding PCA (:func:`viz_ui.analysis.numeric.fit_pca`: the ``[n_cols, n_cols]`` scatter matrix of an
    ``[n_rows, n_cols]`` matrix, ``2 · n_rows · n_cols²`` FLOPs, then its eigendecomposition, ``~9 n_cols³``), in
    float64, at half the model's measured float32 rate ``flops_per_second``."""
    return (2.0 * n_rows * n_cols ** 2 + 9.0 * n_cols ** 3) / max(1.0, flops_per_second / 2)


STATS_PROBE = 1 << 24  # 64 MB of float32


def weight_stats_seconds(n_weights: int) -> float:
    """Statistics of ``n_weights`` weights (mean, std, max |w|, rms: a few passes over memory): a probe of the same
    statistics over :data:`STATS_PROBE` float32 weights (more than a CPU's caches hold), scaled by the count."""
    import torch

    w = torch.ones(STATS_PROBE)
    seconds = _probe("stats", lambda: (w.mean().item(), w.std().item(), w.abs().max().item(),
                                       w.pow(2).mean().sqrt().item()))
    return seconds * n_weights / STATS_PROBE
