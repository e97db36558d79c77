"""Pure figure functions: numpy arrays in, ``plotly.graph_objects.Figure`` out (no Streamlit).

Token axes use integer positions with token tick labels, so a repeated token ("the" twice) keeps two
rows instead of being merged by Plotly's categorical axis.
"""

from __future__ import annotations

import base64
import copy
import functools
import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from _plotly_utils.basevalidators import ColorscaleValidator
from _plotly_utils.utils import is_homogeneous_array, is_skipped_key, to_typed_array_spec

from viz_ui.analysis.numeric import grid_block, pool_blocks
from viz_ui.analysis.text import plotly_text

FONT = dict(size=15)
WEIGHT_SCALE = "Blues"  # attention weights in [0, 1]
DIVERGING = "RdBu_r"  # signed values (embeddings, scores), white at 0
MAX_LABELLED_TICKS = 32
_UNUSED = ("geo", "polar", "ternary")  # subplot kinds no figure here uses


def _lean_template(base: str) -> go.layout.Template:
    """Plotly's ``base`` template without its per-trace defaults and unused subplot kinds, with tick labels
    never measured for overflow.

    Plotly deep-copies and validates a figure's template each time one is set: the full built-in template
    cost ~7 ms per figure on the server. In the browser, the default ``ticklabeloverflow`` ("hide past div")
    measures every tick label's box on every draw, about half of the browser's time on a page of token
    heatmaps (bench/latency.py); our labels fit (automargin), so they are allowed to overflow.
    """
    layout = {k: v for k, v in pio.templates[base].layout.to_plotly_json().items() if k not in _UNUSED}
    for axis in ("xaxis", "yaxis"):
        layout[axis] = {**layout.get(axis, {}), "ticklabeloverflow": "allow"}
    return go.layout.Template(layout=layout)


pio.templates["viz_light"] = _lean_template("plotly_white")
pio.templates["viz_dark"] = _lean_template("plotly_dark")
# Every new figure starts from the lean template (the default, "plotly", is the heaviest to copy and validate).
pio.templates.default = "viz_light"


def position_ticks(labels: list[str], max_ticks: int = MAX_LABELLED_TICKS, offset: int = 0) -> dict:
    """Axis settings that label integer positions with ``"pos token"``, thinning past ``max_ticks``;
    ``labels[i]`` stands at position ``offset + i`` (a window of a long text)."""
    step = max(1, math.ceil(len(labels) / max_ticks))
    vals = list(range(0, len(labels), step))
    return dict(tickmode="array", tickvals=[offset + i for i in vals],
                ticktext=[f"{offset + i} {plotly_text(labels[i])}" for i in vals])


# The head and layer labels of the grid figures (the start page's model map, the all-heads grid). Plotly turns tick
# labels that do not fit side by side by 30°, then 90°, into the margin above the plot, where the title is: at 32
# heads "H0 … H31" stood upright over the title, and over each other. A grid's labels therefore keep a fixed angle
# (0°) and are thinned to one in every ``step`` columns or rows: the smallest step at which they fit side by side in a
# plot GRID_MIN_EM font sizes wide (the narrowest a grid is drawn, measured in Chromium: the start page's left column
# at 1280 × 800, 27 font sizes; the attention page's grid in lecture mode at the largest font scale, 22.6), and one
# above the other at the largest font scale (lecture mode grows fonts by the scale, a figure's height by less:
# display_height). Every head and layer is still named in the hover text; docs/ui.md shows the rule's effect.
GRID_MIN_EM = 22
MAX_SCALE = 2.5  # the largest font scale of lecture mode (the Classroom panel's "Font scale" slider)
LABEL_CHAR_EM = 0.65  # a tick label's character, in font sizes: about the widest of Plotly's capitals and digits
LABEL_GAP_EM = 0.5  # the room between two labels side by side, in font sizes
LABEL_LINE_EM = 1.3  # a row of labels one above the other: its line (1.2) and a little room, in font sizes
HEAD_STEPS = (1, 2, 4, 8, 16, 32, 64, 128)  # heads come in powers of two
LAYER_STEPS = (1, 2, 5, 10, 20, 50, 100)


def plot_height_em(height: float, margin: float) -> float:
    """The height of a figure's plot in font sizes at the largest font scale (:data:`MAX_SCALE`): a figure ``height``
    px high with ``margin`` px above and below the plot (both before scaling)."""
    return (display_height(height, MAX_SCALE) - margin * MAX_SCALE) / (FONT["size"] * MAX_SCALE)


def _kept(n: int, step: int, first: int, last: int) -> list[int]:
    """The indices of ``n`` labels that :func:`grid_ticks` shows."""
    end = n - last
    thinned = [i for i in range(first, end, step)
               if (not first or i - first + 1 >= step) and (not last or i + step <= end)]
    return list(range(first)) + thinned + list(range(end, n))


def grid_ticks(positions: list[float], names: list[str], em_per_unit: float, steps: tuple[int, ...],
               side_by_side: bool, first: int = 0, last: int = 0) -> dict:
    """Axis settings for a grid's labels at a fixed angle (:data:`GRID_MIN_EM`): ``names[i]`` at ``positions[i]``
    (data units, ascending) for one in every ``step`` names, counted from the ``first`` ones. ``step``: the smallest of
    ``steps`` at which the labels fit (else the last), on an axis of ``em_per_unit`` font sizes per data unit: labels
    side by side (a top or bottom axis) need half of each neighbour's width (:data:`LABEL_CHAR_EM` a character) and
    :data:`LABEL_GAP_EM` between their centres; labels one above the other :data:`LABEL_LINE_EM`. The ``first`` and
    ``last`` names (the model map's input row and MLP column) are always shown, and thinned names closer to them than
    ``step`` are left out."""
    def need(a: int, b: int) -> float:
        return LABEL_CHAR_EM * (len(names[a]) + len(names[b])) / 2 + LABEL_GAP_EM if side_by_side else LABEL_LINE_EM

    def fits(step: int) -> bool:
        keep = _kept(len(names), step, first, last)
        return all((positions[b] - positions[a]) * em_per_unit >= need(a, b) for a, b in zip(keep, keep[1:]))

    keep = _kept(len(names), next((step for step in steps if fits(step)), steps[-1]), first, last)
    return dict(tickmode="array", tickvals=[positions[i] for i in keep], ticktext=[names[i] for i in keep],
                tickangle=0)


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0), font=FONT, height=height,
                      margin=dict(l=10, r=10, t=60, b=10))
    return fig


def matrix_heatmap(matrix: np.ndarray, labels: list[str], title: str, x_title: str = "dimension",
                   value_name: str = "value", offset: int = 0) -> go.Figure:
    """A ``[pos, d]`` matrix (embeddings, positions, residual stream) as a diverging heatmap.

    Rows are token positions (labelled; row i is position ``offset + i``), columns are vector dimensions;
    colour 0 is white.
    """
    limit = float(np.abs(matrix).max()) or 1.0
    custom = np.array([plotly_text(s) for s in labels], dtype=object)[:, None].repeat(matrix.shape[1], axis=1)
    fig = go.Figure(go.Heatmap(
        z=matrix, y=np.arange(offset, offset + len(labels)), colorscale=DIVERGING, zmin=-limit, zmax=limit,
        customdata=custom,
        hovertemplate=f"pos %{{y}} %{{customdata}}<br>{x_title} %{{x}}<br>{value_name} %{{z:.4f}}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title="position · token", **position_ticks(labels, offset=offset))
    fig.update_xaxes(title=x_title)
    return _layout(fig, title, height=max(300, min(900, 80 + 22 * len(labels))))


def typed_array(values: np.ndarray) -> dict:
    """A float32 array as Plotly's typed array (``{"dtype": "f4", "bdata": base64, "shape": "rows, cols"}``, the
    form plotly.py 6 itself writes numpy arrays in): a quarter of the size of a JSON list of numbers, decoded by
    plotly.js without parsing numbers. NaN stays NaN (a gap)."""
    a = np.ascontiguousarray(values, dtype="<f4")
    return {"dtype": "f4", "bdata": base64.b64encode(a.tobytes()).decode("ascii"),
            "shape": ", ".join(str(n) for n in a.shape)}


def attention_heatmap(matrix: np.ndarray, labels: list[str], title: str, kind: str = "weights",
                      offset: int = 0, patch: dict | None = None,
                      display: tuple[float, str] | None = None, clickable: bool = False) -> go.Figure:
    """One head's ``[query_pos, key_pos]`` matrix with token labels on both axes (row/column i is position
    ``offset + i``: a square window of a long text).

    ``kind="weights"``: softmax weights on a fixed 0..1 scale. ``kind="scores"``: scaled pre-softmax
    scores; masked entries (-inf) are left blank, with no hover label (Plotly's ``hoverongaps=False``).
    ``patch`` and ``display``: see :func:`one_pass_figure`. ``clickable``: a second trace, an invisible scatter with
    one point per cell (``x`` = key position, ``y`` = query position, the heatmap's hover text), so that a click
    selects a cell in ``st.plotly_chart``, which selects no heatmap cell. A live chart (viz_ui/app/live_chart.py)
    reports clicks on the heatmap itself and needs none: at 64 tokens the 4,096 SVG markers took 340–650 ms of the
    browser's drawing (issue 26).
    """
    n = len(labels)
    # fixed-width strings, not objects: Plotly copies every array of a new figure, an object array one item at a time
    shown = np.array([plotly_text(s) for s in labels], dtype=str)
    q_lab = shown.reshape(n, 1).repeat(n, 1)
    k_lab = shown.reshape(1, n).repeat(n, 0)
    # the hover reads the value from z: a new z (another step of a timeline) is all that changes
    hover = "query %{y} %{customdata[0]}<br>key %{x} %{customdata[1]}<br>%{z:.4f}<extra></extra>"
    if kind == "weights":
        trace = dict(z=matrix, colorscale=WEIGHT_SCALE, zmin=0, zmax=1, colorbar=dict(title="weight"))
    else:  # masked cells are gaps (NaN): drawn blank, with no hover (hoverongaps)
        finite = np.isfinite(matrix)
        z = np.where(finite, matrix, np.nan)
        limit = float(np.abs(z[finite]).max()) if finite.any() else 1.0
        trace = dict(z=z, colorscale=DIVERGING, zmin=-limit, zmax=limit, colorbar=dict(title="score"))
    positions = np.arange(offset, offset + n)
    trace.update(type="heatmap", x=positions, y=positions, hoverongaps=False, hovertemplate=hover,
                 customdata=np.stack([q_lab, k_lab], axis=-1))
    data = [trace]
    if clickable:  # heatmap cells cannot be selected: a transparent square marker over each cell can
        # the scatter has no gaps: its hover names a masked cell
        value = np.where(np.isfinite(matrix), np.char.mod("%.4f", np.nan_to_num(matrix, neginf=0.0)), "masked (−∞)")
        custom = np.concatenate([trace["customdata"].reshape(n * n, 2), value.reshape(n * n, 1)], axis=1)
        data.append(dict(type="scatter", mode="markers", x=np.tile(positions, n), y=np.repeat(positions, n),
                         customdata=custom, showlegend=False,
                         hovertemplate="query %{y}<br>key %{x}<br>%{customdata[2]}<extra></extra>",  # y, x: tick texts
                         marker=dict(symbol="square", size=max(6, min(40, 560 // max(1, n))), color="rgba(0,0,0,0)")))
    ticks = position_ticks(labels, offset=offset)
    base = dict(yaxis=dict(autorange="reversed", title="query position", **ticks),
                xaxis=dict(title="key position", tickangle=-60, scaleanchor="y", constrain="domain", **ticks),
                title=dict(text=title, x=0), font=FONT, height=max(480, min(950, 200 + 24 * n)),
                margin=dict(l=10, r=10, t=60, b=10))
    return one_pass_figure(data, base, patch, display)


def attention_grid(patterns: np.ndarray, max_tile: int = 48, max_cells: int = 250_000,
                   pooled_by: int = 1, labels: list[str] | None = None,
                   key_labels: list[str] | None = None, patch: dict | None = None,
                   display: tuple[float, str] | None = None) -> tuple[go.Figure, bool]:
    """Every layer and head at once: ``patterns`` ``[n_layers, n_heads, query_pos, key_pos]`` (key_pos may
    differ from query_pos: cross-attention's target × source).

    The heads are tiled into one float32 heatmap (rows = layers, columns = heads) with blank gaps
    (:func:`grid_tiles`). Sequences longer than the tile size are pooled by block maximum (:func:`grid_block`,
    :func:`pool_blocks`; 12 x 12 heads at 256 tokens: about 1.3 MB sent to the browser). ``pooled_by``: the caller
    already pooled the patterns by that block size (one layer at a time, so a long text's float32 stack never exists).

    ``labels`` / ``key_labels``: token labels of the query / key positions, for the hover of each tile, which
    names its layer, head and strongest query → key pair (:func:`grid_tile_texts`). The last trace is an invisible
    scatter with one clickable point per tile: ``point_index = layer * n_heads + head``. ``patch`` and
    ``display``: see :func:`one_pass_figure`.

    Returns:
        ``(figure, pooled)``: pooled is True when tiles were pooled.
    """
    n_layers, n_heads = patterns.shape[:2]
    tiles = grid_tiles(patterns, max_tile, max_cells, pooled_by)
    title = "All heads: attention weights" + (f" (max-pooled over {tiles.block}×{tiles.block} blocks)"
                                              if tiles.pooled else "")
    rows, cols = tiles.canvas.shape
    # square tiles: a grid wider than tall gets no more height than its tiles take at about 1,200 px across
    height = max(300, min(1100, 90 + 110 * n_layers, 90 + round(1200 * rows / cols)))
    # the tiles are square: the plot's height, or its narrowest width, bounds a canvas cell's size
    x_em = GRID_MIN_EM / cols
    y_em = min(plot_height_em(height, 100) / rows, x_em)
    base = dict(
        # square tiles; both axes shrink their domain (not extend their range) to keep them square, so the head
        # labels on top stay next to the first row of tiles; the ranges end at the canvas (no room for the markers)
        yaxis=dict(range=[rows - 0.5, -0.5], constrain="domain", constraintoward="top", title="layer",
                   showgrid=False, zeroline=False,
                   **grid_ticks(tiles.rows, [f"L{i}" for i in range(n_layers)], y_em, LAYER_STEPS, False)),
        xaxis=dict(range=[-0.5, cols - 0.5], constrain="domain", side="top", showgrid=False, zeroline=False,
                   scaleanchor="y",  # tick labels H0.. name the heads
                   **grid_ticks(tiles.cols, [f"H{i}" for i in range(n_heads)], x_em, HEAD_STEPS, True)),
        title=dict(text=title, x=0), font=FONT, height=height,
        margin=dict(l=10, r=10, t=90, b=10))  # the head labels on top, under the title and the mode bar's band
    heatmap = dict(type="heatmap", z=tiles.canvas, colorscale=WEIGHT_SCALE, zmin=0, zmax=1, hoverongaps=False,
                   colorbar=dict(title="weight"), hovertemplate="weight %{z:.3f}<extra></extra>")
    xs = [tiles.cols[h] for _ in range(n_layers) for h in range(n_heads)]
    ys = [tiles.rows[layer] for layer in range(n_layers) for _ in range(n_heads)]
    points = dict(type="scatter", x=xs, y=ys, mode="markers", hovertemplate="%{text}<extra></extra>",
                  text=grid_tile_texts(tiles, labels, key_labels if key_labels is not None else labels),
                  showlegend=False, marker=dict(size=24, color="rgba(0,0,0,0)", line=dict(width=0)))
    return one_pass_figure([heatmap, points], base, patch, display), tiles.pooled


def attention_grid_figure(patterns: np.ndarray, **kwargs) -> go.Figure:
    """:func:`attention_grid`'s figure alone (same arguments), to be given as a
    :class:`viz_ui.views.figure_spec.FigureSpec`; whether it pools: :func:`grid_pooled`."""
    return attention_grid(patterns, **kwargs)[0]


def grid_pooled(shape: tuple[int, ...], pooled_by: int = 1, max_tile: int = 48, max_cells: int = 250_000) -> bool:
    """Whether :func:`attention_grid` of patterns of ``shape`` ``[n_layers, n_heads, query_pos, key_pos]`` (with the
    same ``pooled_by``, ``max_tile``, ``max_cells``) shows pooled tiles, without building it."""
    return pooled_by * grid_block(*shape[:4], max_tile, max_cells) > 1


@dataclass(frozen=True)
class GridTiles:
    """Every head's map tiled into one canvas, as :func:`attention_grid` draws it."""

    canvas: np.ndarray  # [n_layers * (tq + gap) - gap, n_heads * (tk + gap) - gap] float32, NaN in the gaps
    tiles: np.ndarray  # [n_layers, n_heads, tq, tk]: the (pooled) maps
    rows: list[float]  # the canvas row at the centre of each layer's tiles
    cols: list[float]  # the canvas column at the centre of each head's tiles
    block: int  # positions per tile cell along each axis (1: not pooled)

    @property
    def pooled(self) -> bool:
        return self.block > 1


def grid_tiles(patterns: np.ndarray, max_tile: int = 48, max_cells: int = 250_000, pooled_by: int = 1) -> GridTiles:
    """``patterns`` ``[n_layers, n_heads, query_pos, key_pos]`` max-pooled (:func:`grid_block`, :func:`pool_blocks`)
    and tiled into one float32 canvas with blank (NaN) gaps: rows = layers, columns = heads. ``pooled_by``: as
    :func:`attention_grid`."""
    n_layers, n_heads, n_q, n_k = patterns.shape
    inner = grid_block(n_layers, n_heads, n_q, n_k, max_tile, max_cells)
    patterns = pool_blocks(patterns, inner)
    tq, tk = patterns.shape[-2:]  # tiles are rectangular for cross-attention (target × source)
    gap = max(1, max(tq, tk) // 8)
    canvas = np.full((n_layers * (tq + gap) - gap, n_heads * (tk + gap) - gap), np.nan, dtype=np.float32)
    for layer in range(n_layers):
        for head in range(n_heads):
            r, c = layer * (tq + gap), head * (tk + gap)
            canvas[r:r + tq, c:c + tk] = patterns[layer, head]
    return GridTiles(canvas, patterns, [i * (tq + gap) + (tq - 1) / 2 for i in range(n_layers)],
                     [i * (tk + gap) + (tk - 1) / 2 for i in range(n_heads)], inner * pooled_by)


def grid_tile_texts(tiles: GridTiles, labels: list[str] | None, key_labels: list[str] | None) -> list[str]:
    """The hover text of each tile of :func:`attention_grid`, layer by layer: its head and strongest query → key
    pair (positions are block starts when the tiles are pooled) and "click: show this head below"."""
    n_layers, n_heads = tiles.tiles.shape[:2]
    flat = tiles.tiles.reshape(n_layers, n_heads, -1)
    best = flat.argmax(-1)
    block, text = tiles.block, []
    for layer in range(n_layers):
        for head in range(n_heads):
            q, k = divmod(int(best[layer, head]), tiles.tiles.shape[-1])
            q, k = q * block, k * block
            pair = (f"{q} {plotly_text(labels[q])} → {k} {plotly_text(key_labels[k])}" if labels is not None and block == 1
                    else f"query {q} → key {k}" + (f" (blocks of {block})" if block > 1 else ""))
            text.append(f"Layer {layer}, head {head}<br>strongest: {pair}, {float(flat[layer, head].max()):.2f}"
                        "<br>click: show this head below")
    return text


def similarity_heatmap(sim: np.ndarray, labels: list[str], title: str, offset: int = 0) -> go.Figure:
    """A symmetric ``[pos, pos]`` cosine-similarity matrix on a fixed -1..1 scale (row/column i is position
    ``offset + i``)."""
    n = len(labels)
    positions = np.arange(offset, offset + n)
    fig = go.Figure(go.Heatmap(
        z=sim, x=positions, y=positions, colorscale=DIVERGING, zmin=-1, zmax=1, colorbar=dict(title="cos"),
        customdata=np.stack([np.array([plotly_text(s) for s in labels], dtype=object)[:, None].repeat(n, 1),
                             np.array([plotly_text(s) for s in labels], dtype=object)[None, :].repeat(n, 0)], axis=-1),
        hovertemplate="%{customdata[0]} (%{y}) · %{customdata[1]} (%{x})<br>cosine %{z:.3f}<extra></extra>"))
    ticks = position_ticks(labels, offset=offset)
    fig.update_yaxes(autorange="reversed", **ticks)
    fig.update_xaxes(tickangle=-60, scaleanchor="y", constrain="domain", **ticks)
    return _layout(fig, title, height=max(480, min(900, 200 + 22 * n)))


def pca_scatter(vocab_coords: np.ndarray, typed_coords: np.ndarray, labels: list[str],
                explained: np.ndarray, title: str) -> go.Figure:
    """The whole vocabulary's embeddings (grey) and the typed tokens (labelled) in PCA coordinates.

    ``vocab_coords`` ``[d_vocab, k]`` and ``typed_coords`` ``[pos, k]`` with k = 2 or 3.
    """
    k = typed_coords.shape[1]
    axis = [f"PC{i + 1} ({explained[i]:.1%})" for i in range(k)]
    text = [f"{i} {plotly_text(lab)}" for i, lab in enumerate(labels)]
    if k == 3:
        bg = go.Scatter3d(x=vocab_coords[:, 0], y=vocab_coords[:, 1], z=vocab_coords[:, 2], mode="markers",
                          marker=dict(size=2, color="#c8c8c8"), name="vocabulary", hoverinfo="skip")
        fg = go.Scatter3d(x=typed_coords[:, 0], y=typed_coords[:, 1], z=typed_coords[:, 2], mode="markers+text",
                          text=text, marker=dict(size=5, color="#d62728"), name="your tokens")
        fig = go.Figure([bg, fg])
        fig.update_layout(scene=dict(xaxis_title=axis[0], yaxis_title=axis[1], zaxis_title=axis[2]))
    else:
        bg = go.Scattergl(x=vocab_coords[:, 0], y=vocab_coords[:, 1], mode="markers",
                          marker=dict(size=4, color="#c8c8c8"), name="vocabulary", hoverinfo="skip")
        fg = go.Scatter(x=typed_coords[:, 0], y=typed_coords[:, 1], mode="markers+text", text=text,
                        textposition="top center", marker=dict(size=10, color="#d62728"), name="your tokens")
        fig = go.Figure([bg, fg])
        fig.update_xaxes(title=axis[0])
        fig.update_yaxes(title=axis[1])
    return _layout(fig, title, height=620)


def _topk_parts(labels: list[str], probs: np.ndarray, highlight: int | None) -> dict:
    """What :func:`topk_bar` draws for these bars: colours, texts, plain labels, the x range and the height (px)."""
    k = len(labels)
    return dict(colours=["#d62728" if i == highlight else "#1f77b4" for i in range(k)],
                text=[f"{p:.1%}" for p in probs], names=[plotly_text(s) for s in labels],
                # room on the right for the largest bar's percentage (drawn outside the axis: cliponaxis=False)
                x_range=[0, min(1.0, float(np.max(probs, initial=0)) * 1.25 + 0.02)], height=max(300, 80 + 34 * k))


def topk_bar(labels: list[str], probs: np.ndarray, title: str, highlight: int | None = None,
             x_title: str = "probability") -> go.Figure:
    """Horizontal bars of the most likely next tokens (most likely on top); ``probs`` ``[k]`` in [0, 1]."""
    k, parts = len(labels), _topk_parts(labels, probs, highlight)
    fig = go.Figure(go.Bar(x=probs, y=list(range(k)), orientation="h", marker_color=parts["colours"],
                           text=parts["text"], textposition="outside", customdata=parts["names"],
                           cliponaxis=False, hovertemplate="%{customdata}<br>p = %{x:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(k)), ticktext=parts["names"])
    fig.update_xaxes(title=x_title, range=parts["x_range"])
    fig.update_layout(margin=dict(r=70))
    return _layout(fig, title, height=parts["height"])


def topk_bar_frame(labels: list[str], probs: np.ndarray, title: str, highlight: int | None = None,
                   scale: float = 1.0) -> dict:
    """The frame (:class:`viz_ui.app.live_chart.Frames`) that turns any :func:`topk_bar` into
    ``topk_bar(labels, probs, title, highlight)`` styled at ``scale`` (:func:`style_for_display`): the bars' values,
    colours, texts and labels, the title, the axis ticks and range, and the height. Every frame has the same keys."""
    k, parts = len(labels), _topk_parts(labels, probs, highlight)
    bars = {"x": [float(p) for p in probs], "y": list(range(k)), "marker": {"color": parts["colours"]},
            "text": parts["text"], "customdata": parts["names"]}
    return {"data": [bars], "layout": {"title": {"text": title}, "height": display_height(parts["height"], scale),
                                       "xaxis": {"range": parts["x_range"]},
                                       "yaxis": {"tickvals": list(range(k)), "ticktext": parts["names"]}}}


def position_curves(table: np.ndarray, dims: list[int], n_typed: int, title: str) -> go.Figure:
    """Columns ``dims`` of a positional table ``[n_ctx, d_model]`` as curves over every position.

    The positions of the typed text (``0 .. n_typed - 1``) are shaded.
    """
    positions = np.arange(table.shape[0])
    fig = go.Figure([go.Scatter(x=positions, y=table[:, d], mode="lines", name=f"dim {d}",
                                hovertemplate=f"dim {d}<br>pos %{{x}}<br>%{{y:.4f}}<extra></extra>") for d in dims])
    fig.add_vrect(x0=-0.5, x1=n_typed - 0.5, fillcolor="#d62728", opacity=0.08, line_width=0,
                  annotation_text="your text", annotation_position="top left")
    fig.update_xaxes(title="position")
    fig.update_yaxes(title="P[pos, dim]")
    return _layout(fig, title, height=420)


def stage_heatmap(values: np.ndarray, row_names: list[str], labels: list[str], title: str, value_name: str,
                  cell_text: np.ndarray | None = None, zmax: float | None = None, max_text_cols: int = 40) -> go.Figure:
    """A ``[stage, pos]`` grid (layers down, token positions across).

    ``cell_text`` ``[stage, pos]`` is shown on hover, and written in the cells when there are at most
    ``max_text_cols`` positions.
    """
    rows, n = values.shape
    custom = np.array([plotly_text(s) for s in labels], dtype=object)[None, :].repeat(rows, 0)
    extra = "" if cell_text is None else "<br>%{text}"
    trace = go.Heatmap(z=values, colorscale="Viridis", zmin=0, zmax=zmax, customdata=custom,
                       colorbar=dict(title=value_name),
                       hovertemplate=f"%{{y}}<br>pos %{{x}} %{{customdata}}{extra}<br>{value_name} %{{z:.4f}}<extra></extra>")
    if cell_text is not None:
        trace.update(text=np.vectorize(plotly_text, otypes=[object])(np.asarray(cell_text, dtype=object)))
        if n <= max_text_cols:
            trace.update(texttemplate="%{text}", textfont=dict(size=12))
    fig = go.Figure(trace)
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(rows)),
                     ticktext=[plotly_text(r) for r in row_names])
    fig.update_xaxes(tickangle=-60, **position_ticks(labels))
    return _layout(fig, title, height=max(300, 120 + 34 * rows))


def value_bar(labels: list[str], values: np.ndarray, title: str, x_title: str) -> go.Figure:
    """Horizontal bars for signed values (first on top), e.g. the most active neurons of a token."""
    k, shown = len(labels), [plotly_text(s) for s in labels]
    fig = go.Figure(go.Bar(x=values, y=list(range(k)), orientation="h", customdata=shown,
                           marker_color=["#1f77b4" if v >= 0 else "#d62728" for v in values],
                           hovertemplate="%{customdata}<br>%{x:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(k)), ticktext=shown)
    fig.update_xaxes(title=x_title)
    return _layout(fig, title, height=max(300, 80 + 28 * k))


def layer_head_heatmap(scores: np.ndarray, title: str) -> go.Figure:
    """A ``[n_layers, n_heads]`` score in [0, 1] with the value written in each cell."""
    n_layers, n_heads = scores.shape
    fig = go.Figure(go.Heatmap(z=scores, colorscale=WEIGHT_SCALE, zmin=0, zmax=1, texttemplate="%{z:.2f}",
                               textfont=dict(size=14), colorbar=dict(title="score"),
                               hovertemplate="layer %{y}, head %{x}<br>score %{z:.3f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title="layer", tickmode="array", tickvals=list(range(n_layers)))
    fig.update_xaxes(title="head", tickmode="array", tickvals=list(range(n_heads)))
    return _layout(fig, title, height=max(260, 110 + 42 * n_layers))


def layer_table_heatmap(values: np.ndarray, columns: list[str], title: str, value_name: str) -> go.Figure:
    """A ``[n_layers, n_columns]`` table of non-negative values (e.g. the std of each weight matrix per
    layer), sequential colours from 0, the value written in each cell."""
    n_layers = values.shape[0]
    fig = go.Figure(go.Heatmap(z=values, x=list(range(len(columns))), colorscale=WEIGHT_SCALE, zmin=0,
                               texttemplate="%{z:.3g}", textfont=dict(size=13), colorbar=dict(title=value_name),
                               customdata=np.array([plotly_text(c) for c in columns], dtype=object)[None, :].repeat(
                                   n_layers, axis=0),
                               hovertemplate=f"layer %{{y}}, %{{customdata}}<br>{value_name} %{{z:.4g}}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title="layer", tickmode="array", tickvals=list(range(n_layers)))
    fig.update_xaxes(title="matrix", tickmode="array", tickvals=list(range(len(columns))),
                     ticktext=[plotly_text(c) for c in columns])
    return _layout(fig, title, height=max(260, 110 + 34 * n_layers))


def angle_heatmap(angles: np.ndarray, labels: list[str], title: str) -> go.Figure:
    """Rotary angles ``[pos, d_head / 2]`` in radians on a cyclic colour scale (0 and 2π share a colour)."""
    n_pairs = angles.shape[1]
    fig = go.Figure(go.Heatmap(z=angles, colorscale="Twilight", zmin=0, zmax=2 * np.pi,
                               colorbar=dict(title="angle (rad)", tickvals=[0, np.pi, 2 * np.pi], ticktext=["0", "π", "2π"]),
                               customdata=np.array([plotly_text(s) for s in labels], dtype=object)[:, None].repeat(
                                   n_pairs, axis=1),
                               hovertemplate="pos %{y} %{customdata}<br>pair %{x}<br>angle %{z:.3f} rad<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title="position · token", **position_ticks(labels))
    fig.update_xaxes(title="dimension pair i (θ_i = base^(−2i/d_head))")
    return _layout(fig, title, height=max(300, min(900, 80 + 22 * len(labels))))


def relative_score_curve(scores: np.ndarray, title: str, marks: list[tuple[int, float, str]] = ()) -> go.Figure:
    """Score against relative distance ``delta`` (``scores[delta]``), with optional marked points
    ``(delta, score, label)`` (e.g. the pairs that occur in the typed text)."""
    fig = go.Figure(go.Scatter(x=list(range(len(scores))), y=scores, mode="lines", name="q·k/√d_k at distance Δ",
                               hovertemplate="Δ = %{x}<br>score %{y:.4f}<extra></extra>"))
    if marks:
        fig.add_trace(go.Scatter(x=[m[0] for m in marks], y=[m[1] for m in marks], mode="markers",
                                 marker=dict(size=11, color="#d62728"), text=[plotly_text(m[2]) for m in marks],
                                 name="recorded in this text", hovertemplate="%{text}<br>score %{y:.4f}<extra></extra>"))
    fig.update_xaxes(title="relative position Δ = query position − key position")
    fig.update_yaxes(title="score")
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return _layout(fig, title, height=420)


def generation_heatmap(matrix: np.ndarray, row_labels: list[str], key_labels: list[str], title: str) -> go.Figure:
    """Attention of each generation step's newest token ``[n_steps, key_pos]``; NaN (not yet written) is blank."""
    n_rows, n_keys = matrix.shape
    custom = np.array([plotly_text(s) for s in key_labels], dtype=object)[None, :].repeat(n_rows, 0)
    fig = go.Figure(go.Heatmap(z=matrix, colorscale=WEIGHT_SCALE, zmin=0, zmax=1, customdata=custom, hoverongaps=False,
                               colorbar=dict(title="weight"),
                               hovertemplate="%{y}<br>key %{x} %{customdata}<br>weight %{z:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(n_rows)),
                     ticktext=[plotly_text(r) for r in row_labels], title="step: query → chosen token")
    fig.update_xaxes(title="key position", tickangle=-60, **position_ticks(key_labels))
    return _layout(fig, title, height=max(320, 150 + 26 * n_rows))


def cross_heatmap(matrix: np.ndarray, row_labels: list[str], col_labels: list[str], title: str,
                  y_title: str = "target position · token (query)",
                  x_title: str = "source position · token (key)") -> go.Figure:
    """Attention weights between two different sequences, ``[n_rows, n_cols]`` in [0, 1]: cross-attention
    (target × source) or one step's row per head; rows and columns keep integer positions as ticks."""
    n_rows, n_cols = matrix.shape
    rows, cols = [plotly_text(r) for r in row_labels], [plotly_text(c) for c in col_labels]
    custom = np.array([[f"{rows[r]} → {cols[c]}" for c in range(n_cols)] for r in range(n_rows)], dtype=object)
    fig = go.Figure(go.Heatmap(z=matrix, colorscale=WEIGHT_SCALE, zmin=0, zmax=1, customdata=custom,
                               colorbar=dict(title="weight"),
                               hovertemplate="%{customdata}<br>weight %{z:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title=y_title, **position_ticks(row_labels))
    fig.update_xaxes(title=x_title, **position_ticks(col_labels))
    return _layout(fig, title, height=max(300, min(900, 120 + 26 * n_rows)))


def cost_curve(n: np.ndarray, measured: np.ndarray, fitted: np.ndarray, memory_mb: np.ndarray, title: str) -> go.Figure:
    """Measured attention time (ms) against sequence length, the fitted O(n² · d) curve, and the score matrix's
    memory (MB, right axis)."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=n, y=measured, mode="markers+lines", name="measured time (ms)",
                             hovertemplate="n = %{x}<br>%{y:.2f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=n, y=fitted, mode="lines", name="c · n² · d (fitted)", line=dict(dash="dash"),
                             hovertemplate="n = %{x}<br>%{y:.2f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=n, y=memory_mb, mode="markers+lines", name="scores memory (MB)", yaxis="y2",
                             hovertemplate="n = %{x}<br>%{y:.1f} MB<extra></extra>"))
    fig.update_layout(xaxis=dict(title="sequence length n (tokens)"), yaxis=dict(title="time (ms)"),
                      yaxis2=dict(title="memory (MB)", overlaying="y", side="right", showgrid=False),
                      legend=dict(orientation="h", y=-0.25))
    return _layout(fig, title, height=440)


# Plotly draws its mode bar (the figure's toolbar: camera, zoom, …) over the figure's top right corner, 2 px from the
# top, one row of 22 px buttons: a long title, or a short one in a narrow figure, ran under it. Every figure's title
# therefore starts below that band, at the same place whatever the figure's width, font scale or theme; its
# automargin grows the top margin when a title (two lines, a subtitle, a lecture font) needs more room above the plot.
MODEBAR_BAND = 34  # px: the mode bar ends 28 px from the top; a title set this far down starts 4 px above it (measured)
TITLE_BELOW_MODEBAR = dict(yref="container", y=1, yanchor="top", pad=dict(t=MODEBAR_BAND), automargin=True)


def display_height(height: float | None, scale: float = 1.0) -> int:
    """A figure's height (px; Plotly's 450 when None) on the display: it grows with the lecture font ``scale``."""
    return round((height or 450) * (1 + (scale - 1) * 0.6))


def display_layout(font_size: float, height: float | None, axes, scale: float = 1.0, theme: str = "light",
                   top: float = 60) -> dict:
    """The layout that :func:`style_for_display` gives a figure, as a dict: fonts of ``font_size * scale`` px in the
    theme's ink, the theme's background (and template, when dark), ``height`` (px; Plotly's 450 when None) grown
    with ``scale``, the top margin (``top`` px, scaled), the title below the mode bar's band (:data:`MODEBAR_BAND`
    px, not scaled: the mode bar is not); ``axes``: the layout's axis names (``"xaxis"``, ``"yaxis2"``, …), whose
    tick fonts follow. :func:`one_pass_figure` merges it into a layout dict."""
    ink = "#000000" if theme == "light" else "#f2f2f2"
    size = round(font_size * scale)
    patch = {"template": f"viz_{theme}"} if theme != "light" else {}  # figures start from viz_light (pio default)
    patch.update(font=dict(size=size, color=ink), paper_bgcolor="#ffffff" if theme == "light" else "#0e1117",
                 plot_bgcolor="#ffffff" if theme == "light" else "#0e1117",
                 height=display_height(height, scale), margin=dict(t=round(top * scale)),
                 title=TITLE_BELOW_MODEBAR)
    patch.update({axis: dict(tickfont=dict(size=size, color=ink)) for axis in axes})
    return patch


def merge_layout(layout: dict, patch: dict | None) -> dict:
    """``layout`` updated by ``patch`` as ``fig.update_layout(patch)`` would (nested dicts merged, other values
    replaced), without a Plotly figure: a new dict."""
    out = dict(layout)
    for key, value in (patch or {}).items():
        out[key] = merge_layout(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def one_pass_figure(data: list[dict], layout: dict, patch: dict | None = None,
                    display: tuple[float, str] | None = None) -> go.Figure:
    """A figure built in one pass from trace dicts and a layout dict (each later ``update_layout`` or ``add_trace``
    validates the figure again: tens of ms, paid at every rerun of a page): ``layout`` updated by ``patch``
    (:func:`merge_layout`), then, given ``display = (scale, theme)``, styled as :func:`style_for_display` would
    style it (show it with ``show_figure(..., styled=True)``)."""
    layout = merge_layout(layout, patch)
    if isinstance(layout.get("title"), str):  # a title given as its text: merged with the display's title settings
        layout["title"] = {"text": layout["title"]}
    if display is not None:
        scale, theme = display
        axes = sorted({"xaxis", "yaxis"} | {k for k in layout if k.startswith(("xaxis", "yaxis"))})
        size = (layout.get("font") or {}).get("size") or FONT["size"]
        top = (layout.get("margin") or {}).get("t", 60)  # a title with a subtitle needs more than 60 px
        layout = merge_layout(layout, display_layout(size, layout.get("height"), axes, scale, theme, max(60, top)))
        data = [merge_layout(t, {"textfont": {"size": round(t["textfont"]["size"] * scale)}})
                if (t.get("textfont") or {}).get("size") else t for t in data]
    # not validated: validation turned every string array (the hover labels) into an object array and deep-copied
    # it one string at a time, 15-20 ms a 64 x 64 heatmap, four of them on every rerun of page 3 (issue 26). What
    # plotly.py's validation would rewrite, and plotly.js does not read, is rewritten here (:func:`_expanded`); a
    # test checks that every figure built here writes the same JSON as the validated figure.
    fig = go.Figure(dict(data=[_expanded(t) for t in data], layout=_expanded(layout)), _validate=False)
    # validated again from here on: a caller's later update (``fig.update_layout(title="...")``) is expanded as on
    # any figure, not stored as given
    for obj in (fig, fig._layout_obj, *fig._data_objs):
        obj._validate = True
    return fig


@functools.cache
def _colorscale(name: str) -> tuple:
    """A plotly.py colour scale name (``"Blues"``, ``"RdBu_r"``) as the ``((fraction, colour), ...)`` pairs its
    validation writes (plotly.js knows other scales under some of these names, and no ``_r`` names)."""
    return tuple(map(tuple, ColorscaleValidator("colorscale", "heatmap").validate_coerce(name)))


_ITEM_LISTS = {"annotations", "shapes", "images", "selections", "sliders", "updatemenus"}


def _expanded(obj):
    """A trace or layout dict with the shorthands plotly.py's validation expands expanded as it would: a ``title``
    given as its text becomes ``{"text": ...}``, a ``colorscale`` given by name becomes its list of stops, a
    ``template`` given by name becomes the template (:func:`_template`), an empty list of shapes or annotations is
    left out. Nested dicts are new; everything else is shared."""
    if not isinstance(obj, dict):
        return obj
    out = {}
    for key, value in obj.items():
        if key in _ITEM_LISTS and isinstance(value, (list, tuple)) and not value:
            continue  # validation leaves out an empty list of shapes or annotations
        if key == "title" and isinstance(value, str):
            value = {"text": value}
        elif key == "colorscale" and isinstance(value, str):
            value = [list(stop) for stop in _colorscale(value)]
        elif key == "template":  # a template's name becomes the template (a copy: a figure's updates change it)
            out[key] = copy.deepcopy(_template(value)) if isinstance(value, str) else value
            continue
        out[key] = _expanded(value) if isinstance(value, dict) else value
    return out


def plain_figure(fig: go.Figure) -> dict:
    """``fig`` as the plain dict that ``plotly.io.to_json(fig, validate=False)`` writes out (``{"data": [...],
    "layout": {...}}``; numeric numpy arrays as Plotly's typed arrays, no trace ``uid``), without ``fig.to_dict()``'s
    deep copy of every array first: on page 3 at 64 tokens that copy (the hover labels' object arrays, one string at
    a time) was 60-120 ms of each rerun (issue 26). The dict's own dicts and lists are new; other arrays (object
    arrays, arrays under the keys Plotly leaves alone) are ``fig``'s, to be read only."""
    def plain(obj):
        if isinstance(obj, dict):
            return {k: v if is_skipped_key(k) else to_typed_array_spec(v) if is_homogeneous_array(v) else plain(v)
                    for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [plain(v) for v in obj]
        return obj
    return {"data": [plain({k: v for k, v in t.items() if k != "uid"}) for t in fig._data],
            "layout": plain(fig._layout)}


@functools.cache
def _template(name: str) -> dict:
    """The Plotly template ``name`` (registered in ``plotly.io.templates``) as the dict a figure's layout holds."""
    return pio.templates[name].to_plotly_json()


def style_plain(figure: dict, scale: float = 1.0, theme: str = "light") -> dict:
    """A plain figure dict (:func:`plain_figure`) styled as :func:`style_for_display` styles a ``go.Figure`` (the same
    layout and trace fonts, the template's name replaced by the template, as Plotly's validation does), without
    Plotly's validation (10-20 ms a figure): a new dict, sharing the arrays of ``figure``."""
    layout = figure["layout"]
    axes = sorted({"xaxis", "yaxis"} | {k for k in layout if k.startswith(("xaxis", "yaxis"))})
    top = max(60, (layout.get("margin") or {}).get("t") or 0)  # as style_for_display: a figure's own larger top margin
    patch = display_layout((layout.get("font") or {}).get("size") or FONT["size"], layout.get("height"), axes, scale,
                           theme, top)
    if "template" in patch:
        patch["template"] = _template(patch["template"])
    layout = {**merge_layout(layout, {k: v for k, v in patch.items() if k != "template"}),
              **({"template": patch["template"]} if "template" in patch else {})}
    data = [merge_layout(t, {"textfont": {"size": round(t["textfont"]["size"] * scale)}})
            if (t.get("textfont") or {}).get("size") else t for t in figure["data"]]
    return {**figure, "data": data, "layout": layout}


def style_for_display(fig: go.Figure, scale: float = 1.0, theme: str = "light") -> go.Figure:
    """Scale every font of a figure by ``scale`` and apply a high-contrast ``"light"`` or a ``"dark"`` theme.

    Used by lecture mode: text sizes (layout, titles, ticks, colour bars, cell and bar texts), the height and the
    top margin (the figure's own when over 60 px) grow with ``scale``; the title starts below the mode bar. The
    figure is changed in place and returned. The layout's part is :func:`display_layout`, set in one update (each
    Plotly update validates again).
    """
    axes = [k for k in fig.layout if k.startswith(("xaxis", "yaxis")) and fig.layout[k] is not None]
    top = max(60, fig.layout.margin.t or 0)  # a figure with tick labels on top, under the title, sets more
    fig.update_layout(display_layout(fig.layout.font.size or FONT["size"], fig.layout.height, axes, scale, theme, top))
    for trace in fig.data:
        textfont = getattr(trace, "textfont", None)
        if textfont is not None and textfont.size:
            trace.textfont.size = round(textfont.size * scale)
    return fig
