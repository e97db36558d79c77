"""Figures of a training timeline (numpy in, ``plotly.graph_objects.Figure`` out; no Streamlit).

Steps are drawn on a log axis, where step 0 (initialisation) has no place: it is drawn at x = 0.5 and labelled
"0" (the hover always gives the real step).
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from viz_ui.views.figures import FONT, grid_tile_texts, grid_tiles, merge_layout, one_pass_figure, position_ticks, typed_array

ZERO_AT = 0.5  # where step 0 is drawn on the log axis
MARK = "#b3261e"  # the current step (the app's primary colour: 6.4:1 on white)
PHASE = "rgba(255, 160, 0, 0.3)"  # the phase-change band
PHASE_EDGE = "#b35c00"  # its dotted edges
HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                "#d62728"]
DASHES = ["solid", "dash", "dot", "dashdot"]
NARROW_MODEBAR = ["zoom", "pan", "select", "lasso", "zoomin", "zoomout", "autoscale", "resetscale"]


# Margins that already hold a figure's tick labels, axis titles, colour bar and legend. Plotly draws a figure with
# the margins it is given, measures what does not fit, and draws it all again with wider ones (automargin): about
# 40 % of a figure's time in the browser, at every step change. Estimates a little over what Plotly measures (every
# character taken as CHAR_EM font sizes wide; a colour bar's 2 % gap taken on a 1,800 px plot; a legend in two rows)
# let it draw once; where a label is wider still (or the legend needs three rows), Plotly widens the margin as before.
CHAR_EM = 0.55
STANDOFF = 15  # px between tick labels and the axis title (the template's title.standoff)
LINE_EM = 1.3  # a line of text, in font sizes
SLACK = 6  # px


def _font_px(scale: float) -> int:
    return round(FONT["size"] * scale)


def _text_px(chars: int, scale: float) -> float:
    """About the most that ``chars`` characters take across, in px."""
    return CHAR_EM * _font_px(scale) * chars


def _title_px(scale: float) -> float:
    """An axis title and its distance from the tick labels, in px."""
    return STANDOFF + LINE_EM * _font_px(scale)


def _colour_bar_px(scale: float) -> int:
    """The right margin of a colour bar titled "weight" with ticks 0 to 1 (30 px thick, 10 px pads), placed by Plotly
    2 % of the plot's width right of it."""
    return round(max(30 + 2 * 10 + _text_px(3, scale), _text_px(6, scale) + 2 * 10) + 0.02 * 1800) + SLACK


def head_margins(labels: list[str], scale: float = 1.0) -> dict:
    """Margins (px) for :func:`viz_ui.views.figures.attention_heatmap` of ``labels`` at font ``scale``: its position ·
    token tick labels (the x ones turned 60°), the axis titles and the colour bar."""
    widest = _text_px(max(map(len, position_ticks(labels)["ticktext"]), default=1), scale)
    return dict(l=round(widest + _title_px(scale)) + SLACK, r=_colour_bar_px(scale),
                b=round(widest * math.sin(math.pi / 3) + _font_px(scale) / 2 + _title_px(scale)) + SLACK)


def grid_margins(n_layers: int, scale: float = 1.0) -> dict:
    """Margins (px) for :func:`viz_ui.views.figures.attention_grid` at font ``scale``: the layer labels (L0, L1, …) and
    title on the left, the colour bar on the right."""
    return dict(l=round(_text_px(len(f"L{n_layers - 1}"), scale) + _title_px(scale)) + SLACK, r=_colour_bar_px(scale))


# The top margin (px, before scaling) of the loss and score curves, the same for both so that their plots line up:
# the title starts below the mode bar (viz_ui.views.figures.MODEBAR_BAND), then the score curves' subplot labels.
CURVES_TOP = 84


def curve_margins(height: int, scale: float = 1.0, rows: int = 2) -> dict:
    """Margins (px) for :func:`loss_curves` and :func:`score_curves` (``height`` px before scaling; the same bottom
    margin, so that the two figures' step axes line up side by side) at font ``scale``: the y axis's tick labels (up
    to 3 characters) and title on the left; below, the step axis and a legend in ``rows`` rows (each about two font
    sizes high), whose top Plotly places 30 % of the plot's height under the plot."""
    f = _font_px(scale)
    legend = rows * (2 * f + 2) + 6
    plot = height * (1 + (scale - 1) * 0.6) - CURVES_TOP * scale  # before the bottom margin
    return dict(l=round(_text_px(3, scale) + _title_px(scale)) + SLACK, b=round((legend + 0.3 * plot) / 1.3) + SLACK)


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


def _marks(step: int | None, phase: tuple[int, int] | None, axes: list[str]) -> list[dict]:
    """Shapes for the current step (a vertical line; none when ``step`` is None) and the phase change (a shaded band)
    on each x axis of ``axes`` (``"x"``, ``"x2"``, …), as plain dicts: ``fig.add_vline`` validates a whole shape per
    call (tens of ms for a figure redrawn at every step)."""
    shapes = []
    for axis in axes:
        if phase:
            shapes.append(dict(type="rect", xref=axis, yref="paper", x0=float(step_x([phase[0]])[0]),
                               x1=float(step_x([phase[1]])[0]), y0=0, y1=1, fillcolor=PHASE,
                               line=dict(color=PHASE_EDGE, width=1, dash="dot"), layer="below",
                               label=dict(text="phase change ", textposition="top left", xanchor="right")))  # text colour
        if step is not None:
            x = float(step_x([step])[0])
            shapes.append(dict(type="line", xref=axis, yref="paper", x0=x, x1=x, y0=0, y1=1,
                               line=dict(color=MARK, width=2)))
    return shapes


def curves_height(n_heads_total: int) -> int:
    """The height (px, before lecture scaling) of the loss and score figures, which stand side by side: taller with
    more heads in the scores' legend."""
    return 440 + 22 * (n_heads_total // 9)


LOSS_COLOURS = {"train loss": "#1f77b4", "validation loss": "#ff7f0e"}
STEP_MARKER_PX = 13  # the diameter of the circles marking the step on the loss curves


def _log_range(steps: list[int]) -> tuple[float, float]:
    """The loss figure's step axis range (log10 units): from step 0 (at :data:`ZERO_AT`) to the last step, with 4 %
    of room on either side."""
    lo, hi = math.log10(ZERO_AT), math.log10(max(1, steps[-1]))
    pad = 0.04 * (hi - lo)
    return lo - pad, hi + pad


def loss_step(steps: list[int], train: list[float] | None, valid: list[float] | None, step: int,
              phase: tuple[int, int] | None = None) -> dict:
    """What :func:`loss_curves` draws for ``step``, as a layout update (``fig.update_layout``): the title, and the
    shapes: the phase change's band, a vertical line at the step, and a circle (:data:`STEP_MARKER_PX` px, the
    curve's colour ringed in the step's red) on each recorded curve at the step. Shapes, not traces: the page moves
    them with ``Plotly.relayout`` (a few ms) instead of drawing the figure again (:mod:`viz_ui.app.live_chart`).

    Raises:
        ValueError: ``step`` is not one of ``steps``.
    """
    i = steps.index(step)
    lo, hi = _log_range(steps)
    x = (math.log10(step_x([step])[0]) - lo) / (hi - lo)  # on the plot's width: Plotly draws a circle of a fixed
    shapes = _marks(step, phase, ["x"])                    # size anchored on a log axis too narrow and off centre
    r = STEP_MARKER_PX / 2
    for name, values in (("train loss", train), ("validation loss", valid)):
        if values is not None and math.isfinite(values[i]):
            shapes.append(dict(type="circle", xref="paper", yref="y", xsizemode="pixel", ysizemode="pixel", xanchor=x,
                               yanchor=float(values[i]), x0=-r, x1=r, y0=-r, y1=r, fillcolor=LOSS_COLOURS[name],
                               line=dict(color=MARK, width=3), layer="above"))
    return dict(title=dict(text=f"Loss at step {step:,}"), shapes=shapes)


def loss_curves(steps: list[int], train: list[float] | None, valid: list[float] | None, step: int | None,
                phase: tuple[int, int] | None = None, height: int = 440,
                display: tuple[float, str] | None = None, legend_rows: int = 2) -> go.Figure:
    """The train and validation loss (nats/token) of every snapshot (``None``: not recorded), step on a log axis,
    the phase change's ``(before, after)`` steps shaded, and the marks of ``step`` (:func:`loss_step`; ``None``: the
    figure without them, on which the page draws them). One panel, margins that already hold its labels and
    legend (:func:`curve_margins`), a mode bar of the export button only (it stands in a narrow column).
    ``display``: ``(scale, theme)`` to build it styled for the page (:func:`viz_ui.views.figures.one_pass_figure`);
    ``legend_rows``: the rows its legend is given room for (:func:`curve_margins`).

    Raises:
        ValueError: ``step`` is not one of ``steps``.
    """
    x = step_x(steps)
    traces = []
    for name, values in (("train loss", train), ("validation loss", valid)):
        if values is not None:
            traces.append(dict(type="scatter", x=x, y=values, mode="lines+markers", name=name, customdata=steps,
                               line=dict(color=LOSS_COLOURS[name]), marker=dict(size=5),
                               hovertemplate=f"step %{{customdata:,}}<br>{name} %{{y:.3f}}<extra></extra>"))
    scale = 1.0 if display is None else display[0]
    layout = dict(title=dict(text="Loss", x=0), font=FONT, height=height,
                  margin=dict(curve_margins(height, scale, legend_rows), r=10, t=CURVES_TOP),
                  xaxis=dict(title="step (log scale)", range=list(_log_range(steps)), **_log_ticks(steps[-1])),
                  yaxis=dict(title="loss (nats/token)"), shapes=_marks(None, phase, ["x"]),
                  legend=dict(orientation="h", y=-0.3), modebar=dict(remove=NARROW_MODEBAR))
    if step is not None:
        layout = merge_layout(layout, loss_step(steps, train, valid, step, phase))
    return one_pass_figure(traces, layout, display=display)


def score_curves(steps: list[int], scores: dict[str, np.ndarray], phase: tuple[int, int] | None = None,
                 display: tuple[float, str] | None = None, legend_rows: int = 2) -> go.Figure:
    """One panel per head-type score (``scores`` kind -> ``[n_snapshots, n_layers, n_heads]`` in [0, 1]), side by
    side, with a line per head (colour = head, dash = layer; a legend entry ``L{layer}H{head}`` toggles the head in
    every panel); step on a log axis, the phase change's ``(before, after)`` steps shaded. It does not depend on the
    step shown, so the page sends the same figure at every step change and the browser keeps it as drawn.
    ``display``, ``legend_rows``: as :func:`loss_curves`."""
    x = step_x(steps)
    kinds = list(scores)
    gap = 0.08
    width = (1 - gap * (len(kinds) - 1)) / len(kinds)
    domains = [[k * (width + gap), min(1.0, k * (width + gap) + width)] for k in range(len(kinds))]
    axes = ["x" if k == 0 else f"x{k + 1}" for k in range(len(kinds))]
    ticks = _log_ticks(steps[-1])
    layout = {("xaxis" if k == 0 else f"xaxis{k + 1}"): dict(domain=domains[k], title="step (log scale)", anchor="y",
                                                            **ticks) for k in range(len(kinds))}
    traces = []
    _, n_layers, n_heads = next(iter(scores.values())).shape
    for c, (kind, axis) in enumerate(zip(kinds, axes)):
        for layer in range(n_layers):
            for head in range(n_heads):
                name = f"L{layer}H{head}"
                traces.append(dict(
                    type="scatter", x=x, y=scores[kind][:, layer, head], xaxis=axis, yaxis="y", mode="lines",
                    name=name, legendgroup=name, showlegend=c == 0, customdata=steps,
                    line=dict(color=HEAD_COLOURS[head % len(HEAD_COLOURS)], dash=DASHES[layer % len(DASHES)], width=2),
                    hovertemplate=f"{name}<br>step %{{customdata:,}}<br>{kind} %{{y:.3f}}<extra></extra>"))
    height = curves_height(n_layers * n_heads)
    scale = 1.0 if display is None else display[0]
    annotations = [dict(text=f"{kind} score", x=sum(d) / 2, y=1.0, xref="paper", yref="paper", xanchor="center",
                        yanchor="bottom", showarrow=False) for kind, d in zip(kinds, domains)]
    layout.update(title=dict(text="Head-type scores across training", x=0), font=FONT, height=height,
                  margin=dict(curve_margins(height, scale, legend_rows), r=10, t=CURVES_TOP),
                  yaxis=dict(range=[0, 1.02], title="score"),
                  annotations=annotations, shapes=_marks(None, phase, axes), legend=dict(orientation="h", y=-0.3),
                  modebar=dict(remove=["zoomin", "zoomout", "autoscale"]))  # a shorter bar in a half-width column
    return one_pass_figure(traces, layout, display=display)


# Frames: what changes in the page's charts from one snapshot to the next, sent once for many steps so that the
# browser redraws a step change at once (viz_ui.app.live_chart.Frames, viz_ui.app.scrubber).

def grid_frame(patterns: np.ndarray, labels: list[str], title: str) -> dict:
    """The frame of :func:`viz_ui.views.figures.attention_grid` for one snapshot's ``patterns`` ``[n_layers, n_heads,
    query_pos, key_pos]``: the tiled canvas, the tiles' hover texts and the title."""
    tiles = grid_tiles(patterns)
    return {"data": [{"z": typed_array(tiles.canvas)}, {"text": grid_tile_texts(tiles, labels, labels)}],
            "layout": {"title": {"text": title}}}


def head_frame(matrix: np.ndarray, title: str, subtitle: str) -> dict:
    """The frame of :func:`viz_ui.views.figures.attention_heatmap` (weights) for one snapshot's ``[query_pos, key_pos]``
    pattern of a head: its weights (the hover reads them), the title and the subtitle."""
    return {"data": [{"z": typed_array(matrix)}], "layout": {"title": {"text": title, "subtitle": {"text": subtitle}}}}


def frame_window(index: int, n_steps: int, values_per_step: int, budget: int) -> tuple[int, int]:
    """The steps ``[lo, hi)`` whose frames are sent together: every step when ``n_steps * values_per_step`` fits in
    ``budget`` numbers, else as many as fit (at least one) centred on ``index`` and kept inside ``[0, n_steps)``."""
    width = max(1, min(n_steps, budget // max(1, values_per_step)))
    lo = min(max(0, index - width // 2), n_steps - width)
    return lo, lo + width


def step_metrics(steps: list[int], train: list[float] | None, valid: list[float] | None,
                 scores: dict[str, np.ndarray]) -> list[dict]:
    """The numbers shown under the step scrubber for every step (:func:`viz_ui.app.scrubber.step_scrubber`'s
    ``metrics``): the train and validation losses with their change since the first step (a fall in green, as
    ``st.metric``'s ``delta_color="inverse"``), and the best induction and previous-token scores of any head with
    the head that has it. ``scores``: kind -> ``[n_snapshots, n_layers, n_heads]``."""
    metrics = []
    for label, values in (("Train loss", train), ("Validation loss", valid)):
        if values is None:
            metrics.append({"label": label, "values": ["not recorded"] * len(steps), "deltas": [""] * len(steps),
                            "tones": ["off"] * len(steps)})
            continue
        deltas = [v - values[0] for v in values]
        metrics.append({"label": f"{label} (nats/token)", "values": [f"{v:.3f}" for v in values],
                        "deltas": [f"{'↓' if d < 0 else '↑' if d > 0 else ''} {d:+.3f} since step {steps[0]:,}".strip()
                                   for d in deltas],
                        "tones": ["good" if d < 0 else "bad" if d > 0 else "off" for d in deltas]})
    for label, kind in (("Best induction score", "induction"), ("Best previous-token score", "previous-token")):
        per_step = scores[kind].reshape(len(steps), -1)
        n_heads = scores[kind].shape[2]
        best = per_step.argmax(1)
        metrics.append({"label": label, "values": [f"{per_step[i, b]:.2f}" for i, b in enumerate(best)],
                        "deltas": [f"layer {b // n_heads}, head {b % n_heads}" for b in best],
                        "tones": ["off"] * len(steps)})
    return metrics
