"""The output page's cached state: the next-token chart's frames at every temperature of the slider, and the
slider's label and range, which the chart follows in the browser (:class:`viz_ui.app.live_chart.Frames`)."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from viz_ui.app.live_chart import Frames
from viz_ui.app.state import get_trace, get_vocab_labels
from viz_ui.views.output import TEMPERATURE_STEP, TEMPERATURES, temperature_frames, temperature_index

TEMPERATURE_LABEL = "Temperature T (0 = greedy)"  # the slider's label: the chart finds the slider by it


@st.cache_data(max_entries=32, ttl=3600, show_spinner=False)
def get_temperature_frames(path: str, text: str, pos: int, top_k: int, top_p: float, n_bars: int, actual: int | None,
                           masked_lm: bool, scale: float) -> str | None:
    """:func:`viz_ui.views.output.temperature_frames` of the trace of ``text`` at position ``pos`` (once per text,
    position and settings: a move of the temperature reads it again)."""
    trace = get_trace(path, text)
    return temperature_frames(trace.arrays["hook_logits"][pos], get_vocab_labels(path), trace.labels, pos, top_k, top_p,
                              n_bars, actual, masked_lm, scale)


def temperature_chart_frames(fig: go.Figure, path: str, text: str, pos: int, temperature: float, top_k: int,
                             top_p: float, n_bars: int, actual: int | None, masked_lm: bool,
                             scale: float) -> Frames | None:
    """The frames that make the next-token chart ``fig`` (drawn at ``temperature``) follow the temperature slider in
    the browser (:func:`get_temperature_frames`), or None where there are none (a large vocabulary)."""
    frames = get_temperature_frames(path, text, pos, top_k, top_p, n_bars, actual, masked_lm, scale)
    if frames is None:
        return None
    return Frames(fig, "temperature", temperature_index(temperature), 0, len(TEMPERATURES), frames,
                  (TEMPERATURE_LABEL, TEMPERATURES[0], TEMPERATURE_STEP))
