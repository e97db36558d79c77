"""The output page's next-token chart, and its frames at every temperature of the slider.

A move of the temperature slider redraws the chart in the browser at once from the frame of the new value
(:class:`viz_ui.app.live_chart.Frames` following the slider), before the server's rerun brings the metrics, the
table and the generation; the frames are the very bars the server draws at that temperature (tests/test_output_frames.py).
"""

from __future__ import annotations

import json

import numpy as np

from viz_ui.analysis.generation import next_token_view, shown_bars
from viz_ui.analysis.text import plotly_text
from viz_ui.views.figures import topk_bar_frame

TEMPERATURE_STEP = 0.05
TEMPERATURES = tuple(round(i * TEMPERATURE_STEP, 2) for i in range(61))  # the slider's values: 0 to 3
# vocabularies above this size get no frames: each temperature is a softmax, top-k and top-p over the whole
# vocabulary (0.55 ms at 4,096 tokens, 82 ms at 128,256 on 2 cores; 61 of them are computed per text and position)
FRAME_VOCAB = 16_384


def next_token_title(labels: list[str], pos: int, temperature: float, masked_lm: bool) -> str:
    """The next-token chart's title at position ``pos`` (``labels``: the text's token labels)."""
    if masked_lm:
        return f"Token at position {pos} (“{plotly_text(labels[pos])}”), T = {temperature:g}"
    return f"Next token after “{plotly_text(labels[pos])}” (position {pos}), T = {temperature:g}"


def next_token_bars(probs: np.ndarray, n_bars: int, actual: int | None) -> tuple[np.ndarray, int | None]:
    """The ids of the bars the next-token chart draws for ``probs`` ``[d_vocab]`` (at most ``n_bars`` most likely
    tokens with a probability above 0, most likely first: :func:`~viz_ui.analysis.generation.shown_bars`) and the bar
    of ``actual`` (None: not among them)."""
    ids = shown_bars(probs, n_bars)
    return ids, (ids.tolist().index(actual) if actual is not None and actual in ids else None)


def temperature_frames(logits: np.ndarray, vocab: list[str], labels: list[str], pos: int, top_k: int, top_p: float,
                       n_bars: int, actual: int | None, masked_lm: bool, scale: float = 1.0) -> str | None:
    """The next-token chart at every temperature of :data:`TEMPERATURES` as frames (JSON; frame ``i`` is
    ``TEMPERATURES[i]``, :func:`viz_ui.views.figures.topk_bar_frame` at the display's ``scale``), or None for a
    vocabulary over :data:`FRAME_VOCAB` tokens. ``logits`` ``[d_vocab]`` at position ``pos``; ``vocab`` every id's
    label; ``labels`` the text's.

    Raises:
        ValueError: for invalid sampling settings (as :func:`~viz_ui.analysis.generation.next_token_view`).
    """
    if len(logits) > FRAME_VOCAB:
        return None
    frames = []
    for temperature in TEMPERATURES:
        probs = next_token_view(logits, temperature, top_k, top_p, actual).probs
        ids, highlight = next_token_bars(probs, n_bars, actual)
        frames.append(topk_bar_frame([vocab[i] for i in ids], probs[ids],
                                     next_token_title(labels, pos, temperature, masked_lm), highlight, scale))
    return json.dumps(frames)


def temperature_index(temperature: float) -> int:
    """The position of ``temperature`` in :data:`TEMPERATURES` (the nearest)."""
    return min(len(TEMPERATURES) - 1, max(0, round(temperature / TEMPERATURE_STEP)))
