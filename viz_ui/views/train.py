"""The "Train your own" page's figures and words (no Streamlit): the live loss curve, the status line, the probe's
attention from a training job's newest weights, and the name the trained model gets in the model list."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from tokenizers import Tokenizer

from viz_model import VizTransformer
from viz_model.limits import count_params
from viz_model.training.live import Progress, TrainSettings, setting, train_bytes

from viz_ui.views.figures import _layout
from viz_ui.analysis.text_trace import run_trace

STATUS_WORDS = {"preparing": "Training the tokenizer…", "training": "Training", "done": "Done",
                "cancelled": "Cancelled", "timed out": "Stopped at the time limit", "failed": "Failed"}


def loss_figure(p: Progress, title: str = "Loss while training") -> go.Figure:
    """The loss of every step's batch (``p.losses``, nats/token, x = step 1 … ``p.step``) as a line over the
    whole run (x from 0 to ``p.steps`` while it runs, to the last step done once it has ended), and the held-out
    loss at each snapshot as markers."""
    steps = np.arange(1, len(p.losses) + 1)
    fig = go.Figure(go.Scatter(x=steps, y=np.array(p.losses, dtype=float), mode="lines", name="training batch",
                               line=dict(width=1.5, color="#1f77b4"),
                               hovertemplate="step %{x}<br>batch loss %{y:.3f}<extra></extra>"))
    if p.snapshot_steps:
        fig.add_trace(go.Scatter(x=p.snapshot_steps, y=p.valid_losses, mode="markers+lines", name="held-out text",
                                 marker=dict(size=8, color="#d62728"), line=dict(width=1, dash="dot", color="#d62728"),
                                 hovertemplate="step %{x}<br>held-out loss %{y:.3f}<extra></extra>"))
    fig.update_xaxes(title="step", range=[0, max(p.steps if p.running else p.step, 1)])  # stopped early: its steps
    fig.update_yaxes(title="cross-entropy (nats/token)", rangemode="tozero")
    fig.update_layout(legend=dict(orientation="h", yanchor="bottom", y=1.0, x=1, xanchor="right"))
    return _layout(fig, title, height=380)


def status_text(p: Progress) -> str:
    """One line: what the job is doing, the step, the last batch loss and the time."""
    words = STATUS_WORDS.get(p.status, p.status)
    if p.status == "preparing":
        return f"{words} ({p.elapsed:.0f} s)"
    loss = f" · loss {p.losses[-1]:.3f}" if p.losses else ""
    return f"{words}: step {p.step:,} of {p.steps:,}{loss} · {p.elapsed:.0f} s"


def size_text(settings: TrainSettings) -> str:
    """The model's size and the training's memory estimate against the cap, in words (vocabulary at its largest)."""
    params = count_params(settings.config(settings.vocab_size))
    return (f"{params:,} parameters at most (d_head {settings.d_model // settings.n_heads}, d_mlp "
            f"{4 * settings.d_model}, learned positions); about {train_bytes(settings) / 2**20:,.0f} MB to train "
            f"(this server allows {setting('VIZ_MAX_TRAIN_MB'):,.0f} MB)")


def probe_pattern(model: VizTransformer, tokenizer: Tokenizer, text: str, layer: int, head: int) -> tuple[np.ndarray, list[str]]:
    """The ``[query_pos, key_pos]`` attention weights of ``layer``, ``head`` on ``text`` (its first ``n_ctx``
    tokens) and the token labels, from one run of ``model``.

    Raises:
        ValueError: when the text has no tokens.
    """
    trace = run_trace(model, tokenizer, text)
    return trace.arrays[f"blocks.{layer}.attn.hook_pattern"][head], trace.labels


def model_name(source: str, settings: TrainSettings, step: int) -> str:
    """The trained model's name in the model list, e.g. ``trained: shipped stories, 2×4 d128, 500 steps``."""
    return f"trained: {source[:40]}, {settings.n_layers}×{settings.n_heads} d{settings.d_model}, {step:,} steps"
