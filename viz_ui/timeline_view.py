"""Figures of a training timeline (numpy in, ``plotly.graph_objects.Figure`` out; no Streamlit).

Steps are drawn on a log axis, where step 0 (initialisation) has no place: it is drawn at x = 0.5 and labelled
"0" (the hover always gives the real step).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .figures import FONT

ZERO_AT = 0.5  # where step 0 is drawn on the log axis
MARK = "#b3261e"  # the current step (the app's primary colour: 6.4:1 on white)
PHASE = "rgba(255, 160, 0, 0.3)"  # the phase-change band
PHASE_EDGE = "#b35c00"  # its dotted edges
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


def _marks(step: int, phase: tuple[int, int] | None, axes: list[str]) -> list[dict]:
    """Shapes for the current step (a vertical line) and the phase change (a shaded band) on each x axis of
    ``axes`` (``"x"``, ``"x2"``, …), as plain dicts: ``fig.add_vline`` validates a whole shape per call (tens of ms
    for a figure redrawn at every step)."""
    x = float(step_x([step])[0])
    shapes = []
    for axis in axes:
        if phase:
            shapes.append(dict(type="rect", xref=axis, yref="paper", x0=float(step_x([phase[0]])[0]),
                               x1=float(step_x([phase[1]])[0]), y0=0, y1=1, fillcolor=PHASE,
                               line=dict(color=PHASE_EDGE, width=1, dash="dot"), layer="below",
                               label=dict(text="phase change ", textposition="top left", xanchor="right")))  # text colour
        shapes.append(dict(type="line", xref=axis, yref="paper", x0=x, x1=x, y0=0, y1=1,
                           line=dict(color=MARK, width=2)))
    return shapes


def _figure(traces: list, title: str, height: int, **layout) -> go.Figure:
    """A figure built with its whole layout at once (each later ``update_layout`` validates the layout again: tens
    of ms, paid at every step change); title, font, height and margins as :func:`viz_ui.figures._layout`."""
    return go.Figure(traces, dict(title=dict(text=title, x=0), font=FONT, height=height,
                                  margin=dict(l=10, r=10, t=60, b=10), **layout))


def training_curves(steps: list[int], train: list[float] | None, valid: list[float] | None,
                    scores: dict[str, np.ndarray], step: int, phase: tuple[int, int] | None = None) -> go.Figure:
    """One figure, side by side: the train and validation loss (nats/token) of every snapshot (when recorded), with a
    marker at the snapshot of ``step``; then one panel per head-type score (``scores`` kind ->
    ``[n_snapshots, n_layers, n_heads]`` in [0, 1]) with a line per head (colour = head, dash = layer; a legend entry
    ``L{layer}H{head}`` toggles the head in every panel). Every panel: step on a log axis, a vertical line at
    ``step``, the phase change's ``(before, after)`` steps shaded. One figure rather than two: the browser draws
    each figure anew at every step change, and a figure's fixed cost is most of a small one's."""
    x = step_x(steps)
    i = steps.index(step)
    kinds = list(scores)
    has_loss = train is not None or valid is not None
    widths = ([0.8] if has_loss else []) + [1.0] * len(kinds)
    gap = 0.06
    unit = (1 - gap * (len(widths) - 1)) / sum(widths)
    domains, left = [], 0.0
    for w in widths:
        domains.append([left, min(1.0, left + w * unit)])
        left += w * unit + gap
    traces, layout, notes = [], {}, []
    axes = ["x" if k == 0 else f"x{k + 1}" for k in range(len(widths))]
    ticks = _log_ticks(steps[-1])
    for k, axis in enumerate(axes):
        layout["xaxis" if k == 0 else f"xaxis{k + 1}"] = dict(domain=domains[k], title="step (log scale)",
                                                              anchor="y" if has_loss and k == 0 else "y2", **ticks)
    if has_loss:
        for name, values, colour in (("train loss", train, "#1f77b4"), ("validation loss", valid, "#ff7f0e")):
            if values is None:
                continue
            traces.append(go.Scatter(x=x, y=values, mode="lines+markers", name=name, customdata=steps,
                                     line=dict(color=colour), marker=dict(size=5), xaxis="x", yaxis="y",
                                     hovertemplate=f"step %{{customdata:,}}<br>{name} %{{y:.3f}}<extra></extra>"))
            traces.append(go.Scatter(x=[x[i]], y=[values[i]], mode="markers", showlegend=False, hoverinfo="skip",
                                     xaxis="x", yaxis="y",
                                     marker=dict(size=13, color=colour, line=dict(color=MARK, width=3))))
        layout["yaxis"] = dict(title="loss (nats/token)", anchor="x")
        notes.append(("loss", domains[0]))
    score_axes = axes[1:] if has_loss else axes
    _, n_layers, n_heads = next(iter(scores.values())).shape
    for c, (kind, axis) in enumerate(zip(kinds, score_axes)):
        for layer in range(n_layers):
            for head in range(n_heads):
                name = f"L{layer}H{head}"
                traces.append(go.Scatter(
                    x=x, y=scores[kind][:, layer, head], xaxis=axis, yaxis="y2", mode="lines", name=name,
                    legendgroup=name, showlegend=c == 0, customdata=steps,
                    line=dict(color=HEAD_COLOURS[head % len(HEAD_COLOURS)], dash=DASHES[layer % len(DASHES)], width=2),
                    hovertemplate=f"{name}<br>step %{{customdata:,}}<br>{kind} %{{y:.3f}}<extra></extra>"))
        notes.append((f"{kind} score", domains[axes.index(axis)]))
    layout["yaxis2"] = dict(range=[0, 1.02], title="score", anchor=score_axes[0])
    annotations = [dict(text=text, x=sum(d) / 2, y=1.0, xref="paper", yref="paper", xanchor="center",
                        yanchor="bottom", showarrow=False) for text, d in notes]
    return _figure(traces, "Loss and head-type scores across training", 440 + 22 * (n_layers * n_heads // 9),
                   **layout, annotations=annotations, shapes=_marks(step, phase, axes),
                   legend=dict(orientation="h", y=-0.3))
