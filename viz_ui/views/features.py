"""Figures and HTML of the Features page (pure functions of arrays: no Streamlit).

- :func:`strongest_map`: each token's strongest feature under every dictionary of a set (layers down, tokens
  across), clickable.
- :func:`text_features_heatmap`: one dictionary's top features over the text (tokens × features).
- :func:`contexts_html`: a feature's top-activating contexts, each token shaded by the feature's activation.
- :func:`histogram_figure`: a feature's activation histogram on the index corpus, with this text's activations.
- :func:`head_writes_figure`: how much each head's output adds to the feature's pre-activation.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from viz_ui.analysis.text import plain_html, plotly_text
from viz_ui.views.figures import DIVERGING, FONT, position_ticks

ACT_SCALE = "Oranges"  # feature activations are >= 0
SHADE = (244, 162, 89)  # the peak's colour in contexts: dark text on it is above 7:1


def feature_name(hook: str, feature: int) -> str:
    """``"L3 F120"`` for feature 120 of a dictionary on ``blocks.3.…`` (the hook's name when it has no layer)."""
    parts = hook.split(".")
    layer = f"L{parts[1]}" if len(parts) > 1 and parts[0] == "blocks" and parts[1].isdigit() else hook
    return f"{layer} F{feature}"


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0), font=FONT, height=height, margin=dict(l=10, r=10, t=60, b=10))
    return fig


def strongest_map(ids: np.ndarray, values: np.ndarray, hooks: list[str], labels: list[str], title: str,
                  max_text_cols: int = 40) -> go.Figure:
    """``ids`` / ``values`` ``[n_dictionaries, pos]``: each position's strongest feature and its activation under
    each dictionary (rows, in the set's order). Colour: the activation; cell text (up to ``max_text_cols``
    positions): the feature id. The second trace is an invisible scatter with one clickable point per cell:
    ``point_index = row * pos + position``."""
    rows, n = ids.shape
    names = [feature_name(h, 0).split(" ")[0] for h in hooks]
    custom = np.array([[plotly_text(f"{labels[p]} · {feature_name(hooks[r], int(ids[r, p]))}") for p in range(n)]
                       for r in range(rows)], dtype=object)
    heat = go.Heatmap(z=values, colorscale=ACT_SCALE, zmin=0, customdata=custom, colorbar=dict(title="activation"),
                      text=np.vectorize(lambda i: f"F{i}")(ids) if n else None,
                      hovertemplate="pos %{x}: %{customdata}<br>activation %{z:.3f}<extra></extra>")
    if n <= max_text_cols:
        heat.update(texttemplate="%{text}", textfont=dict(size=11))
    xs = [p for _ in range(rows) for p in range(n)]
    ys = [r for r in range(rows) for _ in range(n)]
    points = go.Scatter(x=xs, y=ys, mode="markers", marker=dict(size=18, color="rgba(0,0,0,0)"), showlegend=False,
                        hovertemplate="click: open this feature<extra></extra>")
    fig = go.Figure([heat, points])
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(rows)),
                     ticktext=[plotly_text(name) for name in names])
    fig.update_xaxes(tickangle=-60, **position_ticks(labels))
    return _layout(fig, title, height=max(280, 130 + 40 * rows))


def top_text_features(acts: np.ndarray, n: int = 16) -> np.ndarray:
    """The ``n`` features of ``acts`` ``[pos, d_sae]`` with the largest activation anywhere in the text, strongest
    first (only features active somewhere)."""
    best = acts.max(0)
    order = np.argsort(-best, kind="stable")[:n]
    return order[best[order] > 0]


def text_features_heatmap(acts: np.ndarray, features: np.ndarray, labels: list[str], title: str) -> go.Figure:
    """Tokens (rows) × ``features`` (columns, ``"F{id}"``) of ``acts`` ``[pos, d_sae]``: where in the text each
    of the text's top features fires. The second trace: one clickable point per column (``point_index`` = column)."""
    n = acts.shape[0]
    z = acts[:, features] if len(features) else np.zeros((n, 0))
    cols = [f"F{int(f)}" for f in features]
    heat = go.Heatmap(z=z, x=list(range(len(cols))), colorscale=ACT_SCALE, zmin=0, colorbar=dict(title="activation"),
                      customdata=np.array([[plotly_text(labels[p])] * len(cols) for p in range(n)], dtype=object),
                      hovertemplate="pos %{y} %{customdata}<br>feature %{x}<br>activation %{z:.3f}<extra></extra>")
    points = go.Scatter(x=list(range(len(cols))), y=[-0.5] * len(cols), mode="markers", showlegend=False,
                        marker=dict(size=16, color="rgba(0,0,0,0)"), text=cols,
                        hovertemplate="%{text}: click to open its card<extra></extra>")
    fig = go.Figure([heat, points])
    fig.update_xaxes(tickmode="array", tickvals=list(range(len(cols))), ticktext=cols, side="top", tickangle=0)
    fig.update_yaxes(autorange="reversed", title="token", **position_ticks(labels))
    fig = _layout(fig, title, height=max(340, min(900, 170 + 20 * n)))
    fig.update_layout(margin=dict(t=100))  # the feature ids on top, under the title
    return fig


def _shade(value: float, top: float) -> str:
    a = 0.0 if top <= 0 else max(0.0, min(1.0, value / top))
    r, g, b = (round(255 + (c - 255) * a) for c in SHADE)
    return f"rgb({r},{g},{b})"


def contexts_html(contexts: list[tuple[list[str], list[float], int, float]], top: float | None = None) -> str:
    """A feature's contexts as lines of token chips: each ``(labels, acts, peak, value)`` one line, every token
    shaded from white (0) to orange (``top``, default the largest activation shown), the peak token outlined,
    the peak's activation at the end. Every label is HTML-escaped; chips keep dark text on light shades (≥ 7:1)
    in both themes. The styles are classes of ``viz_ui/app/base.css`` (``.fline``, ``.fctx``, ``.fctx.peak``,
    ``.fval``); only each chip's shade, computed from its activation, is its own."""
    top = top if top is not None else max((max(a) for _, a, _, _ in contexts if a), default=0.0)
    lines = []
    for labels, acts, peak, value in contexts:
        chips = [f'<span class="fctx{" peak" if i == peak else ""}" style="background:{_shade(act, top)}" '
                 f'title="activation {act:.3f}">{plain_html(label)}</span>' for i, (label, act) in enumerate(zip(labels, acts))]
        lines.append(f'<div class="fline">{"".join(chips)}<span class="fval">{value:.2f}</span></div>')
    return "".join(lines)


def histogram_figure(counts: np.ndarray, edges: np.ndarray, text_values: np.ndarray, title: str) -> go.Figure:
    """Bars: ``counts`` ``[bins]`` of the feature's non-zero activations on the index corpus over ``edges``
    ``[bins + 1]``; ticks under them: this text's non-zero activations ``text_values``."""
    centres, widths = (edges[:-1] + edges[1:]) / 2, np.diff(edges)
    fig = go.Figure(go.Bar(x=centres, y=counts, width=widths, name="corpus", marker_color="#c05a00",
                           hovertemplate="activation %{x:.2f}<br>%{y} tokens<extra>corpus</extra>"))
    shown = text_values[text_values > 0]
    if len(shown):
        below = -0.06 * max(1.0, float(np.max(counts)) if len(counts) else 1.0)
        fig.add_trace(go.Scatter(x=shown, y=np.full(len(shown), below), mode="markers", name="your text",
                                 marker=dict(symbol="triangle-up", size=12, color="#2a6fdb", line=dict(width=1)),
                                 hovertemplate="your text: %{x:.3f}<extra></extra>"))
    fig.update_xaxes(title="activation (when active)")
    fig.update_yaxes(title="tokens")
    fig.update_layout(legend=dict(orientation="h", y=-0.25), bargap=0)
    return _layout(fig, title, height=360)


def head_writes_figure(values: np.ndarray, title: str) -> go.Figure:
    """``values`` ``[n_layers, n_heads]``: each head's direct addition to the feature's pre-activation (signed)."""
    n_layers, n_heads = values.shape
    top = float(np.abs(values).max()) or 1.0
    fig = go.Figure(go.Heatmap(z=values, colorscale=DIVERGING, zmin=-top, zmax=top, colorbar=dict(title="adds"),
                               hovertemplate="layer %{y}, head %{x}<br>adds %{z:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title="layer", tickmode="array", tickvals=list(range(n_layers)))
    fig.update_xaxes(title="head", tickmode="array", tickvals=list(range(n_heads)))
    return _layout(fig, title, height=max(260, 110 + 42 * n_layers))
