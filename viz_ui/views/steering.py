"""The Steering & feature ablation page's numbers as tables and figures (pure functions, no Streamlit): the output
distribution before and after an intervention, the tokens that rose and fell, the KL divergence at every position,
the greedy continuations side by side, and which features a text uses most."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from viz_ui.analysis.text import plotly_text
from viz_ui.views.figures import _layout
from viz_ui.analysis.interventions import prob_diff_table, softmax
from viz_ui.views.interventions import ABLATED, INTACT, RISE

STEERED = "#8e5cc8"  # the steered run's bars (purple: 4.7:1 on white, 4.1:1 on the dark theme's #0e1117)


def strongest_features(acts: np.ndarray, n: int | None = None) -> list[int]:
    """Feature ids of ``acts`` ``[pos, d_sae]`` that are active somewhere in the text, strongest first (by their
    largest activation over the positions; ties by id); the first ``n`` when given."""
    peak = acts.max(0) if len(acts) else np.zeros(acts.shape[-1])
    order = [int(i) for i in np.lexsort((np.arange(len(peak)), -peak)) if peak[i] > 0]
    return order if n is None else order[:n]


def compare_table(before: np.ndarray, after: np.ndarray, vocab: list[str], after_name: str, k: int = 8) -> pd.DataFrame:
    """:func:`viz_ui.analysis.interventions.prob_diff_table` of two ``[d_vocab]`` logit rows with its second run named
    ``after_name`` ("steered", "ablated"): token, id, ``p intact``, ``p <after_name>``, ``Δp``."""
    return prob_diff_table(before, after, vocab, k).rename(columns={"p ablated": f"p {after_name}"})


def compare_bars(table: pd.DataFrame, title: str, after_name: str) -> go.Figure:
    """Grouped horizontal bars of :func:`compare_table`: each token's probability intact and after (first token on
    top), Δp written beside the second bar."""
    k = len(table)
    y = list(range(k))
    labels = [plotly_text(t) for t in table["token"]]
    colour = STEERED if after_name == "steered" else ABLATED
    fig = go.Figure([
        go.Bar(x=table["p intact"], y=y, orientation="h", name="intact", marker_color=INTACT, customdata=labels,
               hovertemplate="%{customdata}<br>intact p = %{x:.4f}<extra></extra>"),
        go.Bar(x=table[f"p {after_name}"], y=y, orientation="h", name=after_name, marker_color=colour,
               customdata=labels, text=[f"{d:+.1%}" for d in table["Δp"]], textposition="outside", cliponaxis=False,
               textfont=dict(size=14), hovertemplate="%{customdata}<br>" + after_name + " p = %{x:.4f}<extra></extra>")])
    top = float(max(table["p intact"].max(), table[f"p {after_name}"].max())) if k else 1.0
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=y, ticktext=labels)
    fig.update_xaxes(title=f"probability (Δp = {after_name} − intact)",
                     range=[0, min(1.0, top * 1.3 + 0.02)])
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.22))
    return _layout(fig, title, height=max(320, 120 + 44 * k)).update_layout(margin=dict(r=80))  # room for Δp text


def kl_figure(kl: np.ndarray, labels: list[str], title: str, marked: int | None = None) -> go.Figure:
    """Bars of the KL divergence at every position (x: position with its token), the chosen position ``marked``
    in a darker colour."""
    n = len(kl)
    ticks = [f"{i} {plotly_text(t)}" for i, t in enumerate(labels)]
    colours = [ABLATED if i == marked else RISE for i in range(n)]
    fig = go.Figure(go.Bar(x=list(range(n)), y=kl, marker_color=colours, customdata=ticks,
                           hovertemplate="%{customdata}<br>KL = %{y:.4f} nats<extra></extra>"))
    fig.update_xaxes(title="position", tickmode="array", tickvals=list(range(n)), ticktext=ticks if n <= 48 else None,
                     tickangle=-45 if n > 12 else 0)
    fig.update_yaxes(title="KL(intact ‖ ablated), nats", rangemode="tozero")
    return _layout(fig, title, height=360)


def continuation_frame(intact: list[int], steered: list[int], vocab: list[str], after_name: str = "steered"
                       ) -> pd.DataFrame:
    """The greedy continuations token by token: step, the intact token, the other run's token, and whether they
    differ (from the first step on which they differ, the two runs read different texts)."""
    n = max(len(intact), len(steered))
    pick = lambda ids, i: vocab[ids[i]] if i < len(ids) else ""  # noqa: E731
    return pd.DataFrame({"step": np.arange(1, n + 1), "intact": [pick(intact, i) for i in range(n)],
                         after_name: [pick(steered, i) for i in range(n)],
                         "same": [i < len(intact) and i < len(steered) and intact[i] == steered[i] for i in range(n)]})


def top_change_words(before: np.ndarray, after: np.ndarray, vocab: list[str]) -> tuple[str, float, str, float]:
    """``(top token intact, its p, top token after, its p)`` of two ``[d_vocab]`` logit rows."""
    p0, p1 = softmax(before), softmax(after)
    a, b = int(p0.argmax()), int(p1.argmax())
    return vocab[a], float(p0[a]), vocab[b], float(p1[b])
