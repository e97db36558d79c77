"""Figures of the interventions page: numpy / DataFrames in, ``plotly.graph_objects.Figure`` out (no Streamlit).

Signed effects use a diverging scale centred at 0 (white); grids of cells carry an invisible scatter trace with one
clickable point per cell (``curve_number`` 1, ``point_index = row * n_columns + column``), as the all-heads grid of
:func:`viz_ui.views.figures.attention_grid`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from viz_ui.analysis.text import plotly_text
from viz_ui.views.figures import DIVERGING, _layout, position_ticks

RISE, FALL = "#1f77b4", "#d62728"  # Δ > 0 and Δ < 0 (the bar colours of viz_ui.views.figures.value_bar)
INTACT, ABLATED = "#9aa5b1", "#b3261e"


def _cell_points(n_rows: int, n_cols: int, hover: list[str], size: int = 18) -> go.Scatter:
    """One invisible, clickable point per cell of a ``[n_rows, n_cols]`` heatmap drawn at integer coordinates."""
    ys, xs = np.divmod(np.arange(n_rows * n_cols), n_cols)
    return go.Scatter(x=xs, y=ys, mode="markers", text=hover, hovertemplate="%{text}<extra></extra>", showlegend=False,
                      marker=dict(size=size, color="rgba(0,0,0,0)", line=dict(width=0)))


def _marks(xs: list[int], ys: list[int], symbol: str, size: int) -> list[go.Scatter]:
    """Marks over cells (an ablated head, the chosen cell): a black symbol on a wide white one, visible on any
    cell colour in either theme. Not hoverable, so a click goes to the cell's own point."""
    return [go.Scatter(x=xs, y=ys, mode="markers", hoverinfo="skip", showlegend=False,
                       marker=dict(symbol=symbol, size=size, color=colour, line=dict(width=width, color=colour)))
            for colour, width in (("#ffffff", 6), ("#111111", 2.5))]


def _limit(values: np.ndarray, floor: float = 0.0) -> float:
    finite = values[np.isfinite(values)]
    return max(float(np.abs(finite).max()) if finite.size else 0.0, floor) or 1.0


def prob_diff_bars(table: pd.DataFrame, title: str) -> go.Figure:
    """Grouped horizontal bars: the probability of each token of :func:`viz_ui.analysis.interventions.prob_diff_table`
    in the intact and the ablated run (first token on top), the change written beside the ablated bar."""
    k = len(table)
    y = list(range(k))
    labels = [plotly_text(t) for t in table["token"]]
    fig = go.Figure([
        go.Bar(x=table["p intact"], y=y, orientation="h", name="intact", marker_color=INTACT, customdata=labels,
               hovertemplate="%{customdata}<br>intact p = %{x:.4f}<extra></extra>"),
        go.Bar(x=table["p ablated"], y=y, orientation="h", name="ablated", marker_color=ABLATED, customdata=labels,
               text=[f"{d:+.1%}" for d in table["Δp"]], textposition="outside", cliponaxis=False,
               textfont=dict(size=14), hovertemplate="%{customdata}<br>ablated p = %{x:.4f}<extra></extra>")])
    top = float(max(table["p intact"].max(), table["p ablated"].max())) if k else 1.0
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=y, ticktext=labels)
    fig.update_xaxes(title="probability (beside each red bar: Δp, ablated − intact)",
                     range=[0, min(1.0, top * 1.3 + 0.02)])
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.22))
    return _layout(fig, title, height=max(320, 120 + 44 * k)).update_layout(margin=dict(r=80))  # room for the Δp


def delta_bars(table: pd.DataFrame, title: str) -> go.Figure:
    """The tokens whose probability rose (blue) and fell (red) most, Δp as horizontal bars, largest rise on top."""
    k = len(table)
    labels = [plotly_text(t) for t in table["token"]]
    fig = go.Figure(go.Bar(x=table["Δp"], y=list(range(k)), orientation="h", customdata=labels,
                           marker_color=[RISE if d >= 0 else FALL for d in table["Δp"]],
                           text=[f"{d:+.1%}" for d in table["Δp"]], textposition="auto", cliponaxis=False,
                           textfont=dict(size=14),
                           hovertemplate="%{customdata}<br>Δp = %{x:+.5f}<extra></extra>"))
    lim = _limit(table["Δp"].to_numpy()) * 1.6
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(k)), ticktext=labels)
    fig.update_xaxes(title="Δp (ablated − intact)", range=[-lim, lim], zeroline=True)
    return _layout(fig, title, height=max(300, 100 + 34 * k)).update_layout(margin=dict(r=60, l=60))


def head_map(values: np.ndarray, title: str, value_name: str, marked: list[tuple[int, int]] = (),
             click_hint: str = "", zmax: float | None = None, cell_text: bool = True,
             marker: str = "x-thin-open") -> go.Figure:
    """A ``[n_layers, n_heads]`` signed map (diverging colours centred at 0; ``zmax`` fixes the range, default the
    largest magnitude, at least 0.05), with the value in each cell, ``marked`` heads marked with ``marker`` (a ✕),
    and a clickable point per head (``point_index = layer * n_heads + head``)."""
    n_layers, n_heads = values.shape
    lim = zmax if zmax is not None else _limit(values, 0.05)  # noise (|Δ| ≪ 0.05 nats) stays near white
    heat = go.Heatmap(z=values, x=list(range(n_heads)), y=list(range(n_layers)), colorscale=DIVERGING, zmin=-lim,
                      zmax=lim, colorbar=dict(title=value_name), hoverinfo="skip")
    if cell_text:  # the value in each cell, but none under a mark
        text = np.char.mod("%.2f", values).astype(object)
        for layer, head in marked:
            text[layer, head] = ""
        heat.update(text=text, texttemplate="%{text}", textfont=dict(size=13))
    hover = [f"L{l}H{h}: {value_name} {values[l, h]:+.4f}" + (f"<br>{click_hint}" if click_hint else "")
             for l in range(n_layers) for h in range(n_heads)]
    fig = go.Figure([heat, _cell_points(n_layers, n_heads, hover)])
    if marked:
        fig.add_traces(_marks([h for _, h in marked], [l for l, _ in marked], marker, 22))
    fig.update_yaxes(autorange="reversed", title="layer", tickmode="array", tickvals=list(range(n_layers)),
                     ticktext=[f"L{i}" for i in range(n_layers)])
    fig.update_xaxes(title="head", tickmode="array", tickvals=list(range(n_heads)),
                     ticktext=[f"H{i}" for i in range(n_heads)])
    return _layout(fig, title, height=max(300, 130 + 46 * n_layers))


def patch_map(values: np.ndarray, labels: list[str], title: str, selected: tuple[int, int] | None = None,
              value_name: str = "restored") -> go.Figure:
    """A ``[n_layers, pos]`` patching result (1 = fully restored, 0 = no effect; diverging colours centred at 0
    with at least ±1 shown), integer positions with token tick labels, a clickable point per cell
    (``point_index = layer * pos + position``) and the selected cell outlined."""
    n_layers, n_pos = values.shape
    lim = _limit(values, 1.0)
    custom = np.array([plotly_text(t) for t in labels], dtype=object)[None, :].repeat(n_layers, 0)
    heat = go.Heatmap(z=values, x=list(range(n_pos)), y=list(range(n_layers)), colorscale=DIVERGING, zmin=-lim,
                      zmax=lim, colorbar=dict(title=value_name), customdata=custom, hoverinfo="skip")
    hover = [f"L{l}, pos {p} {plotly_text(labels[p])}<br>{value_name} {values[l, p]:+.3f}<br>click: what changed downstream"
             for l in range(n_layers) for p in range(n_pos)]
    fig = go.Figure([heat, _cell_points(n_layers, n_pos, hover, size=14)])
    if selected is not None:
        fig.add_traces(_marks([selected[1]], [selected[0]], "square-open", 20))
    fig.update_yaxes(autorange="reversed", title="layer", tickmode="array", tickvals=list(range(n_layers)),
                     ticktext=[f"L{i}" for i in range(n_layers)])
    fig.update_xaxes(title="position · token", tickangle=-60, **position_ticks(labels))
    return _layout(fig, title, height=max(320, 190 + 34 * n_layers))


def component_bars(values: dict[str, float], title: str, y_title: str) -> go.Figure:
    """Every component's value as vertical bars in the order given (the forward pass for attribution), blue for
    positive, red for negative; every other layer's band shaded, ticks at the first and last component and at each
    layer's band, every bar named on hover."""
    names, vals = list(values), np.array(list(values.values()), dtype=float)
    fig = go.Figure(go.Bar(x=list(range(len(names))), y=vals, customdata=names,
                           marker_color=[RISE if v >= 0 else FALL for v in vals],
                           hovertemplate="%{customdata}<br>%{y:+.4f}<extra></extra>"))
    layer_of = [int(n[1:].split("H")[0].split("X")[0].split(".")[0]) if n[:1] == "L" and n[1:2].isdigit() else None
                for n in names]
    for layer in sorted({l for l in layer_of if l is not None}):
        idx = [i for i, l in enumerate(layer_of) if l == layer]
        if layer % 2 == 0:
            fig.add_vrect(x0=idx[0] - 0.5, x1=idx[-1] + 0.5, fillcolor="#888888", opacity=0.12, line_width=0)
    layers = sorted({l for l in layer_of if l is not None})
    centres = [float(np.mean([i for i, l in enumerate(layer_of) if l == layer])) for layer in layers]
    ends = [(0, names[0])] + ([(len(names) - 1, names[-1])] if layer_of[-1] is None and len(names) > 1 else [])
    ticks = sorted([*ends, *zip(centres, [f"L{l}" for l in layers])])
    fig.update_xaxes(tickmode="array", tickvals=[t for t, _ in ticks], ticktext=[n for _, n in ticks],
                     title="forward order; each band a layer: heads, b_O, MLP")
    fig.update_yaxes(title=y_title, zeroline=True)
    return _layout(fig, title, height=480)


def top_bars(values: dict[str, float], title: str, x_title: str, k: int = 15) -> go.Figure:
    """The ``k`` components of largest magnitude as horizontal bars (largest on top)."""
    items = sorted(values.items(), key=lambda kv: -abs(kv[1]))[:k]
    names, vals = [n for n, _ in items], np.array([v for _, v in items], dtype=float)
    fig = go.Figure(go.Bar(x=vals, y=list(range(len(names))), orientation="h", customdata=names,
                           marker_color=[RISE if v >= 0 else FALL for v in vals],
                           text=[f"{v:.3g}" for v in vals], textposition="outside", cliponaxis=False,
                           textfont=dict(size=14),
                           hovertemplate="%{customdata}<br>%{x:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(len(names))), ticktext=names)
    lo, hi = min(0.0, float(vals.min(initial=0))), max(0.0, float(vals.max(initial=0)))
    pad = 0.25 * (hi - lo or 1.0)
    fig.update_xaxes(title=x_title, range=[lo - (pad if lo < 0 else 0), hi + pad])
    return _layout(fig, title, height=max(300, 90 + 30 * len(names))).update_layout(margin=dict(r=60))


def heatmap_frame(values: np.ndarray, rows: list[str], cols: list[str]) -> pd.DataFrame:
    """A grid as a table for its CSV download (the figure also holds the clickable points)."""
    frame = pd.DataFrame(values, index=rows, columns=cols)
    frame.index.name = "layer"
    return frame.reset_index()


SITE_COLOURS = {"resid_pre": "#1f77b4", "attn_out": "#ff7f0e", "mlp_out": "#2ca02c", "head": "#9467bd"}


def agreement_scatter(exact: dict[str, np.ndarray], estimate: dict[str, np.ndarray], title: str) -> go.Figure:
    """Exact (x) against attribution-patching (y) values of the same cells, one colour per map (``site``), with the
    diagonal y = x where they would agree."""
    fig = go.Figure()
    lo, hi = 0.0, 1.0
    for site, x in exact.items():
        x, y = np.asarray(x, float).ravel(), np.asarray(estimate[site], float).ravel()
        fin = np.concatenate([x[np.isfinite(x)], y[np.isfinite(y)]])
        if fin.size:
            lo, hi = min(lo, float(fin.min())), max(hi, float(fin.max()))
        fig.add_trace(go.Scatter(x=x, y=y, mode="markers", name=site, marker=dict(size=7, color=SITE_COLOURS.get(site),
                                                                                   opacity=0.7),
                                 hovertemplate=f"{site}<br>exact %{{x:.3f}}<br>attribution %{{y:.3f}}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", hoverinfo="skip",
                             line=dict(color="#888888", dash="dot")))
    fig.update_xaxes(title="exact (normalised)")
    fig.update_yaxes(title="attribution estimate (normalised)")
    return _layout(fig, title, height=420)
