"""Predict, then reveal: the class's answers beside the model's own probabilities (numbers and figure; no Streamlit).

Answers are anonymous tallies ``{answer: count}`` (:meth:`viz_ui.classroom.ClassStore.tally`). An answer is text
typed by a student: it is only ever shown as plain text (Plotly labels escaped).
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from viz_model import VizTransformer

from viz_ui.analysis.text import plotly_text
from viz_ui.views.figures import _layout

MAX_BARS = 12  # the most frequent answers drawn; the rest are counted as "other answers"
MAX_ANSWER = 200  # characters: the store's bound on an answer


def normalise_answer(value: object) -> str:
    """An answer as it is sent and counted: whitespace around it removed, runs of whitespace inside made one space,
    cut to 200 characters. Case is kept: the model tells " The" from " the", and so does the tally."""
    return " ".join(str(value or "").split())[:MAX_ANSWER]


def continuation(text: str, answer: str) -> str:
    """The string the model would write after ``text`` for a typed ``answer``: a space before it when it starts
    with a letter or digit and the text does not end with whitespace (a word after a word; byte-level BPE and
    SentencePiece tokenizers fold that space into the word's token, " cat" rather than "cat"), else the answer as
    typed (punctuation such as "." or "'s" attaches to the word before it)."""
    if answer and answer[0].isalnum() and text and not text[-1].isspace():
        return " " + answer
    return answer


def top_answers(tally: dict[str, int], k: int = MAX_BARS) -> tuple[list[tuple[str, int]], int]:
    """The ``k`` most frequent answers (count descending, then alphabetical) and the count of all the others."""
    ranked = sorted(tally.items(), key=lambda item: (-item[1], item[0]))
    return ranked[:k], sum(count for _, count in ranked[k:])


@torch.no_grad()
def answer_probabilities(model: VizTransformer, tokenizer, prefix_ids: list[int], text: str,
                         answers: list[str]) -> list[tuple[float | None, int]]:
    """The model's probability of writing each answer next after ``prefix_ids`` (the ids of ``text``), as
    ``(probability, n_tokens)``: the answer's :func:`continuation` is tokenised on its own (no special tokens) and,
    by the chain rule, P(t_1 … t_m | text) = ∏ P(t_i | text, t_1 … t_{i-1}), read from one forward pass over the
    text followed by the answer's tokens (a one-token answer is that token's probability at the text's last
    position, as the Output page shows it). ``(None, 0)`` for an answer that makes no tokens or does not fit the
    model's context. Softmax in float32 over the model's logits ``[pos, d_vocab]``.

    Raises:
        ValueError: the model predicts no next token (an encoder, or a model without a language-model head).
    """
    if not model.cfg.causal or getattr(model.cfg, "is_encoder_decoder", False):
        raise ValueError("this model does not predict the next token")
    out, n_ctx = [], model.cfg.n_ctx
    for answer in answers:
        ids = tokenizer.encode(continuation(text, answer), add_special_tokens=False).ids
        if not ids or not prefix_ids or len(prefix_ids) + len(ids) > n_ctx:
            out.append((None, len(ids)))
            continue
        tokens = torch.tensor([list(prefix_ids) + list(ids)], device=model.device)
        logits = model(tokens)[0, len(prefix_ids) - 1:-1].float()  # [m, d_vocab]: the rows that predict the answer
        if logits.shape[-1] < max(ids) + 1:
            raise ValueError("this model does not predict the next token")
        logp = torch.log_softmax(logits, dim=-1)[torch.arange(len(ids)), torch.tensor(ids)]
        out.append((math.exp(float(logp.sum())), len(ids)))
    return out


def reveal_figure(answers: list[tuple[str, int]], total: int, probs: list[float | None] | None, title: str,
                  correct: str | None = None) -> go.Figure:
    """The class's answers (left: share of the ``total`` answers, with the count) beside the model's probability of
    the same candidates (right; ``probs`` aligned with ``answers``, None where not computed; ``probs`` None: the
    class only), one row per answer, most frequent on top; ``correct`` (an answer's text) drawn in green."""
    labels = [plotly_text(a) for a, _ in answers]
    counts = np.array([c for _, c in answers], dtype=float)
    share = counts / max(total, 1)
    rows = list(range(len(answers)))
    colour = ["#1a7f37" if a == correct else "#1f77b4" for a, _ in answers]
    cols = 1 if probs is None else 2
    fig = make_subplots(rows=1, cols=cols, shared_yaxes=True, horizontal_spacing=0.08)
    fig.add_trace(go.Bar(x=share, y=rows, orientation="h", marker_color=colour, cliponaxis=False, name="class",
                         text=[f"{int(c)} · {s:.0%}" for c, s in zip(counts, share)], textposition="outside",
                         customdata=labels, hovertemplate="%{customdata}<br>%{text}<extra></extra>"), row=1, col=1)
    if probs is not None:
        p = np.array([np.nan if v is None else v for v in probs], dtype=float)
        fig.add_trace(go.Bar(x=np.nan_to_num(p), y=rows, orientation="h", marker_color="#d62728", cliponaxis=False,
                             name="model", text=["n/a" if np.isnan(v) else _percent(v) for v in p],
                             textposition="outside", customdata=labels,
                             hovertemplate="%{customdata}<br>p = %{x:.4g}<extra></extra>"), row=1, col=2)
        fig.update_xaxes(_share_axis(float(np.nanmax(p, initial=0))), title="the model: P(answer next)", row=1, col=2)
    fig.update_xaxes(_share_axis(float(share.max(initial=0))), title="the class: share of answers", row=1, col=1)
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=rows, ticktext=labels, row=1, col=1)
    fig.update_layout(showlegend=False, bargap=0.3)
    fig = _layout(fig, title, height=max(300, 110 + 40 * len(answers)))
    fig.update_layout(margin=dict(r=60))
    return fig


def _share_axis(largest: float) -> dict:
    """An x axis from 0 with room right of the largest bar (``largest`` in [0, 1]) for its label, drawn outside
    the bar; ticks as percentages, none past 100 %."""
    upper = largest * 1.3 + 0.08
    axis = dict(range=[0, upper], tickformat=".0%")
    if upper > 0.25:
        step = 0.25 if upper > 0.6 else 0.1
        n_ticks = int(min(upper, 1.0) / step + 1e-9) + 1
        axis.update(tickmode="array", tickvals=[round(i * step, 2) for i in range(n_ticks)])
    return axis


def _percent(p: float) -> str:
    """A probability as a percentage with enough digits to be told from zero (0.0004 % rather than 0.0 %)."""
    if p >= 0.001:
        return f"{p:.1%}"
    return f"{p * 100:.2g} %" if p > 0 else "0 %"
