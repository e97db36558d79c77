"""Exports: the data behind a figure as a table, and a whole trace as an ``.npz`` archive (no Streamlit)."""

from __future__ import annotations

import html
import io
import zipfile
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go

from viz_ui.analysis.text_trace import Trace

if TYPE_CHECKING:  # pandas is imported where a table is made: it costs ~0.25 s of the app's cold start
    import pandas as pd


def _axis_labels(axis, n: int, coords=None) -> list:
    """The tick labels of an axis when they name every row/column, else the positions (the trace's own
    coordinates when it has them, e.g. a window starting at position 200; else ``0 .. n - 1``)."""
    positions = list(range(n)) if coords is None else [int(c) if float(c).is_integer() else c for c in coords]
    vals, text = axis.tickvals, axis.ticktext
    if vals is not None and text is not None and list(vals) == positions:
        return _unescaped(text)
    return positions


def _unescaped(texts) -> list:
    """Labels as the figure shows them: the character references Plotly decodes (``&lt;`` …,
    :func:`viz_ui.analysis.text.plotly_text`) written as the characters, so that a table holds the token's text."""
    return [html.unescape(t) if isinstance(t, str) else t for t in texts]


def figure_frame(fig: go.Figure) -> pd.DataFrame:
    """The values a figure draws, as a table.

    Heatmaps: one row per y, one column per x, labelled with the axis tick labels when every row or
    column has one (NaN = a blank cell, such as a masked score). Bars: label and value. Scatter
    traces: x, y (and z), the point text, and the trace name. Several traces are stacked with a
    ``trace`` column.
    """
    import pandas as pd

    frames = []
    for trace in fig.data:
        if isinstance(trace, go.Heatmap):
            z = np.asarray(trace.z, dtype=float)
            ys = None if trace.y is None else np.asarray(trace.y).tolist()
            xs = None if trace.x is None else np.asarray(trace.x).tolist()
            frame = pd.DataFrame(z, index=_axis_labels(fig.layout.yaxis, z.shape[0], ys),
                                 columns=_axis_labels(fig.layout.xaxis, z.shape[1], xs))
            frame.index.name = fig.layout.yaxis.title.text or "row"
        elif isinstance(trace, go.Bar):
            values = np.asarray(trace.x if trace.orientation == "h" else trace.y, dtype=float)
            labels = trace.customdata if trace.customdata is not None else \
                _axis_labels(fig.layout.yaxis if trace.orientation == "h" else fig.layout.xaxis, len(values))
            frame = pd.DataFrame({"label": _unescaped(labels), "value": values})
        else:
            cols = {"x": np.asarray(trace.x, dtype=float), "y": np.asarray(trace.y, dtype=float)}
            if getattr(trace, "z", None) is not None:
                cols["z"] = np.asarray(trace.z, dtype=float)
            frame = pd.DataFrame(cols)
            if trace.text is not None and not isinstance(trace.text, str):
                frame["text"] = _unescaped(trace.text)
        if len(fig.data) > 1:
            frame.insert(0, "trace", trace.name or type(trace).__name__)
        frames.append(frame)
    return pd.concat(frames) if len(frames) > 1 else frames[0]


def figure_csv(fig: go.Figure) -> str:
    """:func:`figure_frame` as CSV text."""
    return figure_frame(fig).to_csv()


def trace_npz(trace: Trace) -> bytes:
    """Every recorded hook of a trace (``hook name -> array``, batch axis removed) plus ``ids`` ``[pos]``,
    ``labels`` ``[pos]`` and ``text`` (encoder-decoder traces: also ``src_ids``, ``src_labels`` of the source, which
    the ``encoder.*`` arrays follow), as a compressed ``.npz`` archive (``numpy.load`` reads it back). Arrays are
    as the trace keeps them (float16 in long traces); the scores and patterns a long trace derives on reading
    are computed one at a time as they are written, so the archive never holds them all in memory at once."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in _npz_entries(trace):
            with archive.open(f"{name}.npy", "w", force_zip64=True) as entry:
                np.lib.format.write_array(entry, np.asanyarray(array), allow_pickle=False)
    return buffer.getvalue()


def _npz_entries(trace: Trace):
    yield from (("ids", trace.ids), ("labels", np.array(trace.labels)), ("text", np.array(trace.text)))
    if trace.src_ids is not None:
        yield from (("src_ids", trace.src_ids), ("src_labels", np.array(trace.src_labels)))
    for name in trace.arrays.names():
        if name in trace.arrays.derived:
            yield name, trace.arrays[name].astype(np.float16)
        elif dict.__contains__(trace.arrays, name):
            yield name, dict.__getitem__(trace.arrays, name)
        else:  # a bounded trace's block hook, recomputed (viz_ui.analysis.trace_bounded)
            yield name, trace.arrays[name]


def pattern_table(patterns: np.ndarray, labels: list[str], causal: bool = True) -> pd.DataFrame:
    """Every head's attention weights in long form: layer, head, query_pos, query token, key_pos, key
    token, weight. ``patterns`` ``[n_layers, n_heads, query_pos, key_pos]``; with ``causal`` only the
    visible keys (key_pos <= query_pos) are listed."""
    import pandas as pd

    n_layers, n_heads, n, _ = patterns.shape
    layer, head, q, k = np.meshgrid(np.arange(n_layers), np.arange(n_heads), np.arange(n), np.arange(n), indexing="ij")
    keep = (k <= q) if causal else np.ones_like(q, dtype=bool)
    tokens = np.array(labels, dtype=object)
    return pd.DataFrame({"layer": layer[keep], "head": head[keep], "query_pos": q[keep], "query_token": tokens[q[keep]],
                         "key_pos": k[keep], "key_token": tokens[k[keep]], "weight": patterns[keep]})


def pooled_pattern_table(pooled: np.ndarray, block: int, n_q: int, n_k: int) -> pd.DataFrame:
    """The all-heads overview of a long text as drawn: one row per layer, head and ``block × block`` square of
    the ``[query_pos, key_pos]`` map, with its first and last positions and its largest weight.
    ``pooled`` ``[n_layers, n_heads, q_blocks, k_blocks]`` from :func:`viz_ui.analysis.heads.overview_patterns`."""
    import pandas as pd

    n_layers, n_heads, mq, mk = pooled.shape
    layer, head, qb, kb = np.meshgrid(np.arange(n_layers), np.arange(n_heads), np.arange(mq), np.arange(mk),
                                      indexing="ij")
    return pd.DataFrame({"layer": layer.ravel(), "head": head.ravel(), "query_pos_from": (qb * block).ravel(),
                         "query_pos_to": np.minimum(qb * block + block, n_q).ravel() - 1,
                         "key_pos_from": (kb * block).ravel(), "key_pos_to": np.minimum(kb * block + block, n_k).ravel() - 1,
                         "max_weight": pooled.ravel()})


def lens_table(ids: np.ndarray, probs: np.ndarray, stages: list[str], labels: list[str], vocab: list[str]) -> pd.DataFrame:
    """The logit lens in long form: stage, position, token, predicted next token, its probability."""
    import pandas as pd

    n_stages, n = ids.shape
    stage, pos = np.meshgrid(np.arange(n_stages), np.arange(n), indexing="ij")
    return pd.DataFrame({"stage": np.array(stages, dtype=object)[stage.ravel()], "position": pos.ravel(),
                         "token": np.array(labels, dtype=object)[pos.ravel()],
                         "predicted": [vocab[i] for i in ids.ravel()], "probability": probs.ravel()})
