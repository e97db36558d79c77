"""The model pages' costly results, each behind :func:`viz_ui.app.gate.costly`: computed as the page opens when the
loaded model does it within :data:`viz_ui.app.gate.GATE_SECONDS`, else after a click on a button that gives the
estimated time (Streamlit glue; the computations are in :mod:`viz_ui.analysis.heads`, :mod:`viz_ui.analysis.block`, ...)."""

from __future__ import annotations

from typing import Any

import numpy as np

from viz_model.placement import weight

from viz_ui.analysis import costs
from viz_ui.analysis.block import logit_lens
from viz_ui.app.gate import costly
from viz_ui.analysis.heads import repeated_head_scores
from viz_ui.analysis.inspector import weight_stats
from viz_ui.analysis.numeric import PCA, fit_pca
from viz_ui.app.state import estimate_seconds, flop_rate, get_trace, resolve
from viz_model.feed_forward import disable_experts, force_expert, run_with_routing
from viz_model.seq2seq import translate
from viz_ui.analysis.text_trace import tokenizer_errors


def repeated_scores_gated(path: str, text: str, where: Any = None) -> dict[str, np.ndarray] | None:
    """:func:`viz_ui.analysis.heads.repeated_head_scores` of the model at ``path`` (duplicate-token and induction,
    ``[n_layers, n_heads]``; ``text``: an encoder-decoder's source), or None while its button waits."""
    model, _ = resolve(path)
    trace = get_trace(path, text)
    estimate = estimate_seconds(path, text, costs.head_scores_copies(model, trace.n_tokens))
    key = (path, text if trace.is_encoder_decoder else "")  # a decoder's scores do not depend on the text
    return costly("repeated_scores", key, estimate, lambda progress: repeated_head_scores(model, trace),
                  "Run the model on a repeated random sequence", where)


def logit_lens_gated(path: str, text: str, where: Any = None) -> tuple[np.ndarray, np.ndarray, list[str]] | None:
    """:func:`viz_ui.analysis.block.logit_lens` of the model at ``path`` on ``text``, or None while its button waits."""
    model, _ = resolve(path)
    estimate = estimate_seconds(path, text, costs.logit_lens_copies(model))
    return costly("logit_lens", (path, text), estimate,
                  lambda progress: logit_lens(model, get_trace(path, text), progress),
                  "Decode every layer and position (logit lens)", where)


def embedding_pca_gated(path: str, text: str, where: Any = None) -> tuple[PCA, np.ndarray] | None:
    """PCA (3 components) fitted on the whole token-embedding matrix W_E ``[d_vocab, d_model]`` and the
    vocabulary's coordinates ``[d_vocab, 3]``, or None while its button waits (``text``: the one whose trace
    measured the model's speed)."""
    model, _ = resolve(path)

    def compute(progress) -> tuple[PCA, np.ndarray]:
        w_e = weight(model.embed, "W_E").detach().float().cpu().numpy()  # real values also where it is offloaded
        pca = fit_pca(w_e, 3)
        return pca, pca.project(w_e)

    d_vocab, d_model = model.embed.W_E.shape
    return costly("embedding_pca", (path,), costs.pca_seconds(d_vocab, d_model, flop_rate(path, text)), compute,
                  f"Project the {d_vocab:,}-token vocabulary (PCA)", where)


def weight_stats_gated(path: str, where: Any = None):
    """:func:`viz_ui.analysis.inspector.weight_stats` of the model at ``path`` (a DataFrame), or None while its button waits."""
    model, _ = resolve(path)
    n = sum(p.numel() for block in model.blocks for module in (block.attn, block.mlp)
            for name, p in module.named_parameters() if name.startswith("W_"))  # what weight_stats reads
    return costly("weight_stats", (path,), costs.weight_stats_seconds(n),
                  lambda progress: weight_stats(model, progress), f"Compute statistics of {n:,} weights", where)


def moe_intervention_gated(path: str, text: str, kind: str, layer: int | None, expert: int, pos: int,
                           where: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The model at ``path`` run again on the trace's tokens of ``text`` with its routing changed in ``layer``
    (None: every layer): ``kind = "disable"`` takes ``expert`` out (:func:`viz_model.feed_forward.disable_experts`),
    ``"force"`` sends the token at ``pos`` to ``expert`` alone (:func:`viz_model.feed_forward.force_expert`). None while
    its button waits.

    Returns:
        ``(logits [pos, d_vocab], indices [n_moe, pos, k], weights [n_moe, pos, k])`` of that run, for the model's
        mixture-of-experts layers (``cfg.moe_layers``).

    Raises:
        ValueError: a run the model refuses (one line).
    """
    import torch


    model, _ = resolve(path)
    trace = get_trace(path, text)

    def compute(progress):
        fn = disable_experts([expert]) if kind == "disable" else force_expert(expert, [pos])
        layers = model.cfg.moe_layers if layer is None else [layer]
        logits, indices, weights = run_with_routing(model, torch.tensor(np.array([trace.ids])),
                                                    [(f"blocks.{i}.mlp.hook_router_logits", fn) for i in layers])
        return (logits[0].float().cpu().numpy(), indices[:, 0].cpu().numpy(), weights[:, 0].float().cpu().numpy())

    return costly("moe_intervention", (path, text, kind, layer, expert, pos),
                  estimate_seconds(path, text, costs.moe_copies()), compute, "Run the model with this routing", where)


def sampled_output_gated(path: str, text: str, temperature: float, seed: int, where: Any = None) -> str | None:
    """An encoder-decoder's output for ``text`` sampled at ``temperature`` with ``seed``
    (:func:`viz_model.seq2seq.translate`), or None while its button waits: a whole generation, estimated as long as
    the trace's (which generated the greedy output).

    Raises:
        ValueError: with one line, for any failure of the tokenizer (an uploaded one may raise anything or panic).
    """


    model, tokenizer = resolve(path)

    def compute(progress) -> str:
        with tokenizer_errors("the model's output cannot be computed"):
            return translate(model, tokenizer, text, temperature, seed)[0]

    return costly("sampled_output", (path, text, float(temperature), int(seed)), estimate_seconds(path, text, 1.0),
                  compute, "Sample an output", where)
