"""Pure table functions: model values in, ``pandas.DataFrame`` out (no Streamlit)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from viz_ui.analysis.text import plain, plain_html

N_CHIP_COLOURS = 7  # the chips' colours: classes c0 … c6 of .tok in viz_ui/app/base.css


def token_table(ids: np.ndarray, labels: list[str], offsets: list[tuple[int, int]], text: str) -> pd.DataFrame:
    """One row per token: position, token (display form), id, and the characters of the text it covers."""
    return pd.DataFrame({
        "position": np.arange(len(ids)),
        "token": labels,
        "id": ids,
        "characters": [repr(text[a:b]) for a, b in offsets],
    })


def token_chips_html(labels: list[str], ids: np.ndarray) -> str:
    """The tokens as coloured chips (alternating colours, spaces shown as "·"); hover shows position and id. The
    chips' styles are classes of ``viz_ui/app/base.css`` (``.toks``, ``.tok``, ``.tok.c0`` … ``.c6``).

    Every label is HTML-escaped, so any text is safe to render.
    """
    chips = [f'<span class="tok c{i % N_CHIP_COLOURS}" title="position {i}, id {int(tid)}">'
             f'{plain_html(label)}<sub>{int(tid)}</sub></span>' for i, (label, tid) in enumerate(zip(labels, ids))]
    return '<div class="toks">' + "\u200b".join(chips) + "</div>"  # zero-width spaces: lines may wrap


def similarity_table(sim: np.ndarray, labels: list[str]) -> pd.DataFrame:
    """A square ``[pos, pos]`` similarity matrix with ``"pos token"`` row and column names."""
    names = [f"{i} {lab}" for i, lab in enumerate(labels)]
    return pd.DataFrame(sim, index=names, columns=names)


def topk_table(probs: np.ndarray, logits: np.ndarray, labels: list[str], k: int) -> pd.DataFrame:
    """The ``k`` most likely tokens under ``probs`` ``[d_vocab]``: rank, token, id, probability, logit.

    ``labels[i]`` is the display form of token id ``i``. Ties keep the lower id first.
    """
    order = np.argsort(-probs, kind="stable")[:k]
    return pd.DataFrame({
        "rank": np.arange(1, len(order) + 1),
        "token": [labels[i] for i in order],
        "id": order,
        "probability": probs[order],
        "logit": logits[order],
    })


def score_table(labels: list[str], dots: np.ndarray, scaled: np.ndarray, scores: np.ndarray,
                weights: np.ndarray, capped: np.ndarray | None = None, scaled_name: str = "q·k / √d_k",
                capped_name: str = "after the soft cap", bias: np.ndarray | None = None) -> pd.DataFrame:
    """One row per key position: q·k, q·k/√d_k, the soft-capped value (``capped``, models that cap their
    scores: Gemma 2), the relative position bias (``bias``: T5), the mask, the score, exp(score − max score), the weight.

    ``weight = exp(score − max) / Σ exp(score − max)``: the softmax, written so it can be checked by hand.
    """
    finite = np.isfinite(scores)
    shifted = np.where(finite, np.exp(np.where(finite, scores, 0) - scores[finite].max()), 0.0)
    return pd.DataFrame({
        "key position": np.arange(len(labels)),
        "token": labels,
        "q·k": dots,
        scaled_name: scaled,
        **({} if capped is None else {capped_name: capped}),
        **({} if bias is None else {"+ position bias": bias}),
        "mask": np.where(finite, "0", "−∞"),
        "score": np.where(finite, np.round(scores, 4).astype(str), "−∞"),
        "exp(score − max)": shifted,
        "weight": weights,
    })


def vector_table(rows: dict[str, np.ndarray], n_dims: int | None = None) -> pd.DataFrame:
    """Named vectors as rows, their first ``n_dims`` dimensions as columns (all when None)."""
    width = min(len(v) for v in rows.values()) if n_dims is None else n_dims
    return pd.DataFrame({name: v[:width] for name, v in rows.items()}).T.rename(columns=lambda d: f"d{d}")


def steps_table(records, vocab: list[str]) -> pd.DataFrame:
    """One row per generated token: step, token, id, its probability as sampled and at T = 1."""
    return pd.DataFrame({
        "step": np.arange(1, len(records) + 1),
        "token": [vocab[r.token_id] for r in records],
        "id": [r.token_id for r in records],
        "probability (as sampled)": [r.prob for r in records],
        "probability (T = 1)": [r.model_prob for r in records],
    })


def kv_table(records, queries: list[int], labels: list[str]) -> pd.DataFrame:
    """Per generation step: the query token, positions whose q, k, v were computed, and those reused."""
    return pd.DataFrame({
        "step": np.arange(1, len(records) + 1),
        "query token": [f"{q} {labels[q]}" for q in queries],
        "positions computed (q, k, v)": [r.n_computed for r in records],
        "keys and values reused from the cache": [r.n_reused for r in records],
        "attention row length": [r.attention.shape[-1] for r in records],
    })


def markdown_table(data, fmt: str | dict | None = None):
    """``data`` (a DataFrame, or what ``pd.DataFrame`` takes; a pandas Styler's data, without its styles) as a
    DataFrame for ``st.table``, which renders every cell, index label and column header as Markdown: numbers written
    with ``fmt`` (one format for every numeric column, or one per column name, as ``Styler.format``), then every
    string among them escaped with :func:`viz_ui.analysis.text.plain` (no length limit), so that a token or a name
    shows as it is (:func:`viz_ui.app.layout.show_table` draws it)."""
    from pandas.io.formats.style import Styler

    def escape(value):
        return plain(value, None) if isinstance(value, str) else value

    data = data.data if isinstance(data, Styler) else data
    frame = data.copy() if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
    for column in frame.columns:
        form = fmt.get(column) if isinstance(fmt, dict) else fmt
        if form is not None and pd.api.types.is_numeric_dtype(frame[column]):
            frame[column] = frame[column].map(form.format)
    frame.columns = frame.columns.map(escape)
    frame.index = frame.index.map(escape)
    frame.columns.name, frame.index.name = escape(frame.columns.name), escape(frame.index.name)
    for column in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[column]):
            frame[column] = frame[column].map(escape)
    return frame
