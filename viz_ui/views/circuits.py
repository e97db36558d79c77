"""Figures and tables of the Circuits page (no Streamlit): the next-token probabilities with and without an
intervention, a graph node's strongest inputs and outputs, and the heads that carry an edge."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from viz_ui.analysis.text import plotly_text
from viz_ui.views.figures import FONT


def intervention_bars(vocab: Sequence[str], intact: np.ndarray, changed: np.ndarray, title: str, k: int = 8
                      ) -> go.Figure:
    """Grouped horizontal bars: the ``k`` most probable next tokens of either run, their probability in the intact
    run and in the changed one (probabilities ``[d_vocab]``)."""
    top = list(dict.fromkeys(np.argsort(-intact)[:k].tolist() + np.argsort(-changed)[:k].tolist()))[: 2 * k]
    top.sort(key=lambda i: -max(intact[i], changed[i]))
    labels = [plotly_text(vocab[i]) for i in top]
    fig = go.Figure([go.Bar(y=labels, x=intact[top], orientation="h", name="intact", marker_color="#4b5bd6",
                            hovertemplate="%{y}: %{x:.3f}<extra>intact</extra>"),
                     go.Bar(y=labels, x=changed[top], orientation="h", name="with the intervention",
                            marker_color="#c2410c", hovertemplate="%{y}: %{x:.3f}<extra>changed</extra>")])
    fig.update_layout(barmode="group", title=dict(text=title, x=0), font=FONT, height=max(300, 70 + 34 * len(top)),
                      margin=dict(l=10, r=10, t=60, b=10), legend=dict(orientation="h", y=-0.12),
                      xaxis_title="probability of the next token")
    fig.update_yaxes(autorange="reversed", type="category")
    return fig


def edges_table(rows: Sequence[tuple[str, str, int, float]]) -> pd.DataFrame:
    """``rows`` of ``(node, kind, position, weight)`` as a table, largest ``|weight|`` first."""
    frame = pd.DataFrame(rows, columns=["node", "kind", "position", "weight"])
    return frame.reindex(frame["weight"].abs().sort_values(ascending=False).index).reset_index(drop=True)


def heads_table(ranked: Sequence[tuple[int, int, float]], edge: float) -> pd.DataFrame:
    """The heads that carry an edge, largest drop first: ``(layer, head, drop)`` and the drop's share of the edge."""
    return pd.DataFrame({"head": [f"L{layer}H{head}" for layer, head, _ in ranked],
                         "edge drop when cut": [round(d, 5) for _, _, d in ranked],
                         "share of the edge": [round(d / edge, 3) if edge else float("nan") for _, _, d in ranked]})
