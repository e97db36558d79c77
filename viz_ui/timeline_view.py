"""Figures of a training timeline (numpy in, ``plotly.graph_objects.Figure`` out; no Streamlit).

Steps are drawn on a log axis, where step 0 (initialisation) has no place: it is drawn at x = 0.5 and labelled
"0" (the hover always gives the real step).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .figures import _layout

ZERO_AT = 0.5  # where step 0 is drawn on the log axis
MARK = "#b3261e"  # the current step (the app's primary colour: 6.4:1 on white)
PHASE = "rgba(255, 160, 0, 0.22)"  # the phase-change band
HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                "#d62728"]
DASHES = ["solid", "dash", "dot", "dashdot"]


def step_x(steps) -> np.ndarray:
    """Where each step is drawn on the log axis: the step itself, step 0 at :data:`ZERO_AT`."""
    s = np.asarray(steps, dtype=float)
    return np.where(s > 0, s, ZERO_AT)


def _log_ticks(last: int) -> dict:
    """Ticks 0, 1, 10, 100, ... up to ``last`` on a log axis (0 at :data:`ZERO_AT`)."""
    vals, text = [ZERO_AT], ["0"]
    p = 1
    while p <= max(1, last):
        vals.append(p)
        text.append(f"{p:,}")
        p *= 10
    return dict(type="log", tickmode="array", tickvals=vals, ticktext=text)


def _marks(fig: go.Figure, step: int, phase: tuple[int, int] | None, rows: int = 1, cols: int = 1) -> None:
    """The current step as a vertical line, and the phase change as a shaded band, in every subplot."""
    x = float(step_x([step])[0])
    for r in range(1, rows + 1):
        for c in range(1, cols + 1):
            if phase:
                fig.add_vrect(x0=float(step_x([phase[0]])[0]), x1=float(step_x([phase[1]])[0]), fillcolor=PHASE,
                              line_width=0, layer="below", row=r, col=c)
            fig.add_vline(x=x, line=dict(color=MARK, width=2), row=r, col=c)


def loss_curves(steps: list[int], train: list[float] | None, valid: list[float] | None, step: int,
                phase: tuple[int, int] | None = None) -> go.Figure:
    """Train and validation loss (nats/token) of every snapshot against the step (log axis), a marker at the
    snapshot of ``step`` and a vertical line there; ``phase``: the phase change's ``(before, after)`` steps, shaded."""
    fig = go.Figure()
    x = step_x(steps)
    i = steps.index(step)
    for name, values, colour in (("train loss", train, "#1f77b4"), ("validation loss", valid, "#ff7f0e")):
        if values is None:
            continue
        fig.add_trace(go.Scatter(x=x, y=values, mode="lines+markers", name=name, customdata=steps,
                                 line=dict(color=colour), marker=dict(size=5),
                                 hovertemplate=f"step %{{customdata:,}}<br>{name} %{{y:.3f}}<extra></extra>"))
        fig.add_trace(go.Scatter(x=[x[i]], y=[values[i]], mode="markers", showlegend=False, hoverinfo="skip",
                                 marker=dict(size=13, color=colour, line=dict(color=MARK, width=3))))
    _marks(fig, step, phase)
    fig.update_xaxes(title="step (log scale)", **_log_ticks(steps[-1]))
    fig.update_yaxes(title="loss (nats/token)")
    fig.update_layout(legend=dict(orientation="h", y=-0.3))
    return _layout(fig, "Loss during training", height=420)


def score_lines(steps: list[int], scores: dict[str, np.ndarray], step: int,
                phase: tuple[int, int] | None = None) -> go.Figure:
    """Each head's score across all snapshots, one subplot per score kind: ``scores`` kind ->
    ``[n_snapshots, n_layers, n_heads]`` in [0, 1]; a vertical line at ``step``, the phase change shaded.
    Colour = head, dash = layer; legend entries ``L{layer}H{head}`` toggle a head in every subplot."""
    kinds = list(scores)
    fig = make_subplots(rows=1, cols=len(kinds), shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[f"{k} score" for k in kinds])
    x = step_x(steps)
    _, n_layers, n_heads = next(iter(scores.values())).shape
    for c, kind in enumerate(kinds, start=1):
        for layer in range(n_layers):
            for head in range(n_heads):
                name = f"L{layer}H{head}"
                fig.add_trace(go.Scatter(
                    x=x, y=scores[kind][:, layer, head], mode="lines", name=name, legendgroup=name, showlegend=c == 1,
                    customdata=steps, line=dict(color=HEAD_COLOURS[head % len(HEAD_COLOURS)],
                                                dash=DASHES[layer % len(DASHES)], width=2),
                    hovertemplate=f"{name}<br>step %{{customdata:,}}<br>{kind} %{{y:.3f}}<extra></extra>"), row=1, col=c)
        fig.update_xaxes(title="step (log scale)", row=1, col=c, **_log_ticks(steps[-1]))
    _marks(fig, step, phase, 1, len(kinds))
    fig.update_yaxes(range=[0, 1.02], row=1, col=1, title="score")
    fig.update_layout(legend=dict(orientation="h", y=-0.3, title="head"))
    return _layout(fig, "Head-type scores of every head across training", height=420 + 22 * (n_layers * n_heads // 9))
