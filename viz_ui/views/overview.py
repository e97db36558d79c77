"""The whole model on one screen (the landing page): the input vectors, every layer's heads as attention
thumbnails and its feed-forward activations, from the running model. Pure numpy → Plotly (no Streamlit).

Each thumbnail is the model's own array, pooled to a few cells so that dozens of them fit one screen:
attention weights by block maximum (as the all-heads overview, :func:`viz_ui.views.figures.pool_blocks`), vectors
(``x = E + P``, MLP activations) by the signed value of largest magnitude in each block.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from viz_ui.analysis.numeric import pool_blocks
from viz_ui.views.figures import (DIVERGING, GRID_MIN_EM, HEAD_STEPS, LAYER_STEPS, WEIGHT_SCALE, _layout, grid_ticks,
                                  plot_height_em)

TILE = 16  # cells across one thumbnail (a head's map, a layer's MLP)


def pool_signed(matrix: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``matrix`` ``[n, m]`` → ``[min(rows, n), min(cols, m)]``: each cell is the value of largest magnitude (sign
    kept) in its block of rows and columns, so a strong positive or negative entry stays visible when pooled."""
    n, m = matrix.shape
    br, bc = max(1, math.ceil(n / rows)), max(1, math.ceil(m / cols))
    out_r, out_c = math.ceil(n / br), math.ceil(m / bc)
    p = np.zeros((out_r * br, out_c * bc), dtype=np.float32)
    p[:n, :m] = matrix
    blocks = p.reshape(out_r, br, out_c, bc).transpose(0, 2, 1, 3).reshape(out_r, out_c, br * bc)
    pick = np.abs(blocks).argmax(-1)
    return np.take_along_axis(blocks, pick[..., None], -1)[..., 0]


def salient_head(patterns: np.ndarray) -> tuple[int, int]:
    """The ``(layer, head)`` whose attention is most sharply on one particular other token: the largest mean,
    over queries after the first, of the highest weight on a key that is neither the query itself nor position 0
    (a resting place many heads use when they have nothing to do). ``patterns`` ``[n_layers, n_heads, n, n]``
    (pooled is fine). Used as the default head the attention views open on instead of layer 0 head 0."""
    n_layers, n_heads, n_q, n_k = patterns.shape
    if n_q < 3 or n_k < 3:
        return 0, 0
    p = patterns[:, :, 1:, 1:].copy()  # drop query 0 and key 0
    m = min(p.shape[-2], p.shape[-1])
    idx = np.arange(m)
    p[:, :, idx, idx] = 0.0  # the query itself
    score = p.max(-1).mean(-1)
    layer, head = np.unravel_index(int(np.nanargmax(score)), score.shape)
    return int(layer), int(head)


def thumbnail_side(patterns: np.ndarray) -> int:
    """Cells across one thumbnail of :func:`model_map` for ``patterns`` ``[n_layers, n_heads, q, k]``: at most
    :data:`TILE`."""
    block = max(1, math.ceil(max(patterns.shape[-2:]) / TILE))
    return max(math.ceil(n / block) for n in patterns.shape[-2:])


def model_map(x: np.ndarray, patterns: np.ndarray, mlp: list[np.ndarray], mlp_name: str,
              title: str = "", mlp_units: list[int] | None = None) -> go.Figure:
    """The model as a grid of live thumbnails.

    Args:
        x: ``[pos, d_model]`` the first block's input (``blocks.0.hook_resid_pre`` = E + P, or E alone).
        patterns: ``[n_layers, n_heads, q, k]`` attention weights (pooled or not; pooled again to :data:`TILE`).
        mlp: per layer ``[pos, d_mlp]`` feed-forward hidden activations (``blocks.{i}.mlp.hook_post``), or those
            already pooled to :func:`thumbnail_side` (:func:`pool_signed`: pooling again leaves them as they are).
        mlp_name: a short name for the MLP's non-linearity, used in the hover text.
        mlp_units: the hidden units of each layer, for the hover text (None: the width of ``mlp``'s arrays).

    Returns:
        A figure whose row 0 is ``x`` and row ``1 + l`` layer ``l``: its heads H0… then its MLP. The last trace
        is an invisible scatter with one point per thumbnail; ``point_index`` → :func:`map_targets` says which
        part was clicked.
    """
    n_layers, n_heads = patterns.shape[:2]
    block = max(1, math.ceil(max(patterns.shape[-2:]) / TILE))
    tiles = pool_blocks(patterns, block)
    tq, tk = tiles.shape[-2:]
    t = max(tq, tk)
    gap = max(1, t // 4)
    width = (n_heads + 1) * (t + gap) - gap  # heads, then the MLP column
    canvas = np.full((n_layers * (t + gap), n_heads * (t + gap) - gap), np.nan, dtype=np.float32)
    for layer in range(n_layers):
        for head in range(n_heads):
            r, c = layer * (t + gap), head * (t + gap)
            canvas[r:r + tq, c:c + tk] = tiles[layer, head]
    top = t + 2 * gap  # the input row, then a wider gap before the layers
    traces = [go.Heatmap(z=canvas, x0=0, dx=1, y0=top, dy=1, colorscale=WEIGHT_SCALE, zmin=0, zmax=1,
                         hoverongaps=False, showscale=False, hoverinfo="skip")]
    xs = pool_signed(x, t, width)
    lim = float(np.abs(xs).max()) or 1.0
    traces.append(go.Heatmap(z=xs, x0=0, dx=width / xs.shape[1], y0=0, dy=t / xs.shape[0], colorscale=DIVERGING,
                             zmin=-lim, zmax=lim, showscale=False, hoverinfo="skip"))
    for layer, act in enumerate(mlp):
        ms = pool_signed(act, t, t)
        lim = float(np.abs(ms).max()) or 1.0
        traces.append(go.Heatmap(z=ms, x0=n_heads * (t + gap), dx=t / ms.shape[1], y0=top + layer * (t + gap),
                                 dy=t / ms.shape[0], colorscale=DIVERGING, zmin=-lim, zmax=lim, showscale=False,
                                 hoverinfo="skip"))
    # one invisible, clickable point at the centre of every thumbnail
    centres, hover = [], []
    centres.append((width / 2 - 0.5, t / 2 - 0.5))
    hover.append(f"Input x: {x.shape[0]} tokens × d_model {x.shape[1]}<br>click: embeddings & positions")
    for layer in range(n_layers):
        y = top + layer * (t + gap) + t / 2 - 0.5
        for head in range(n_heads):
            centres.append((head * (t + gap) + t / 2 - 0.5, y))
            strongest = float(patterns[layer, head].max())
            hover.append(f"Layer {layer}, head {head}<br>largest weight {strongest:.2f}<br>click: open this head")
        centres.append((n_heads * (t + gap) + t / 2 - 0.5, y))
        units = mlp[layer].shape[1] if mlp_units is None else mlp_units[layer]
        hover.append(f"Layer {layer} feed-forward: {units} {mlp_name} units<br>"
                     "click: residual stream & feed-forward")
    cx, cy = zip(*centres)
    traces.append(go.Scatter(x=cx, y=cy, mode="markers", text=hover, hovertemplate="%{text}<extra></extra>",
                             marker=dict(size=28, color="rgba(0,0,0,0)", line=dict(width=0)), showlegend=False))
    fig = go.Figure(traces)
    height = max(320, min(760, 70 + 62 * (n_layers + 1)))
    top_margin = 90 if title else 60
    bottom = top + n_layers * (t + gap) - gap  # the canvas's rows, the input's first
    # the input row and the MLP column stay labelled; the layers' and heads' labels are thinned at a fixed angle so
    # that they neither overlap nor rise into the title at any number of heads (viz_ui.views.figures.GRID_MIN_EM)
    rows = [t / 2 - 0.5] + [top + i * (t + gap) + t / 2 - 0.5 for i in range(n_layers)]
    # the ranges end at the canvas: no room left for the clickable points' markers between the labels and the thumbnails
    fig.update_yaxes(range=[bottom - 0.5, -0.5], showgrid=False, zeroline=False,
                     **grid_ticks(rows, ["x = input"] + [f"L{i}" for i in range(n_layers)],
                                  plot_height_em(height, top_margin + 10) / bottom, LAYER_STEPS, False, first=1))
    cols = [i * (t + gap) + t / 2 - 0.5 for i in range(n_heads + 1)]
    # the thumbnails stretch to the plot's width: the whole model on one screen
    fig.update_xaxes(range=[-0.5, width - 0.5], side="top", showgrid=False, zeroline=False,
                     **grid_ticks(cols, [f"H{i}" for i in range(n_heads)] + ["MLP"], GRID_MIN_EM / width, HEAD_STEPS,
                                  True, last=1))
    fig = _layout(fig, title, height=height)
    # the column labels on top, under the title and the mode bar (viz_ui.views.figures.MODEBAR_BAND)
    fig.update_layout(margin=dict(l=10, r=10, t=top_margin, b=10), dragmode=False, clickmode="event+select")
    return fig


def map_targets(n_layers: int, n_heads: int) -> list[tuple[str, int, int]]:
    """What each clickable point of :func:`model_map` stands for, by ``point_index``: ``("input", 0, 0)``,
    then per layer ``("head", layer, head)`` for every head and ``("mlp", layer, 0)``."""
    out = [("input", 0, 0)]
    for layer in range(n_layers):
        out += [("head", layer, head) for head in range(n_heads)] + [("mlp", layer, 0)]
    return out


def output_distribution(logits: np.ndarray, k: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most probable ids of ``softmax(logits)`` (T = 1) and their probabilities, most likely first."""
    z = logits.astype(np.float64) - float(np.max(logits))
    p = np.exp(z)
    p /= p.sum()
    top = np.argsort(-p, kind="stable")[:k]
    return top, p[top]
