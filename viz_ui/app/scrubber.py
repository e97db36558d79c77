"""A step scrubber: a slider over the steps of a run (a training timeline's snapshots) that is drawn in the browser.

A step change must redraw at once (issue 17: ≤ 300 ms), which a round trip through Streamlit cannot do on a busy
page: its rerun, the re-rendering of the page's elements and new charts took 450-500 ms (bench/timeline.py). This
Streamlit component (``st.components.v2``) holds the slider, Play/Pause and the step's numbers (sent for every step);
a step change is announced in the browser to the live charts that follow it (:class:`viz_ui.app.live_chart.Frames`),
which redraw from frames they already hold. The server hears of the step when the user pauses on it (after
250 ms), at once for a step outside ``window`` (the steps the charts hold), and at every tick of Play; the
fragment that holds the scrubber then reruns (the link, the step's greedy sample).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

_HERE = Path(__file__).parent
_COMPONENT = st.components.v2.component("viz_step_scrubber", js=(_HERE / "scrubber.js").read_text(encoding="utf-8"),
                                        css=(_HERE / "scrubber.css").read_text(encoding="utf-8"), isolate_styles=True)

# Colours of the scrubber per theme, each ≥ 4.5:1 on the background it is drawn on (tests/test_timeline.py).
PALETTES = {
    "light": {"ink": "#31333f", "muted": "#4a4d57", "accent": "#b3261e", "surface": "#ffffff", "line": "#b9bbc3",
              "off-bg": "#f0f2f6", "good": "#166534", "good-bg": "#dcf5e3", "bad": "#b3261e", "bad-bg": "#fde4e2"},
    "dark": {"ink": "#fafafa", "muted": "#c4c6cc", "accent": "#ff8a80", "surface": "#262730", "line": "#6b6f7b",
             "off-bg": "#262730", "good": "#7ee2a8", "good-bg": "#173a26", "bad": "#ff8a80", "bad-bg": "#451a1a"},
}
BACKGROUNDS = {"light": "#ffffff", "dark": "#0e1117"}  # the page behind the scrubber


def step_scrubber(key: str, labels: list[str], index: int, label: str, on_change, metrics: list[dict] = (),
                  window: tuple[int, int] | None = None, immediate: bool = False, theme: str = "light",
                  play_seconds: float | None = 1.0, help: str = "", play_help: str = "") -> None:
    """Draw the scrubber ``key`` over steps named ``labels`` (e.g. ``"1,450"``), showing step ``index`` (the
    server's; the browser keeps its own while the user moves it and follows a different one from the server).

    ``on_change``: called (as a widget callback) when the browser reports a step: read it with
    :func:`reported_step`. ``metrics``: numbers of every step shown under the slider, each ``{"label", "values",
    "deltas", "tones"}`` with one text per step in each list: the value large, the delta small beside a tone
    (``"good"``, ``"bad"`` or ``"off"``), as ``st.metric`` draws its delta. Every text is shown as plain text. ``window``: the steps
    ``[lo, hi)`` that the charts following this scrubber hold frames for (a step outside is reported at once);
    ``immediate``: report every step at once (no chart follows in the browser). ``play_seconds``: the time per
    step while playing (None: no Play button). ``theme``: ``"light"`` or ``"dark"`` (:data:`PALETTES`).

    Raises:
        ValueError: ``index`` is not a position in ``labels``, or a metric does not have one text per step.
    """
    if not 0 <= index < len(labels):
        raise ValueError(f"step {index} is not one of the {len(labels)} steps")
    for m in metrics:
        if not len(m["values"]) == len(m["deltas"]) == len(m["tones"]) == len(labels):
            raise ValueError(f"the metric {m['label']!r} needs one value, delta and tone per step")
    data = {"channel": key, "labels": [str(s) for s in labels], "index": int(index), "label": label, "help": help,
            "play_help": play_help, "play_ms": round(1000 * play_seconds) if play_seconds else 0,
            "metrics": [{k: m[k] for k in ("label", "values", "deltas", "tones")} for m in metrics],
            "window": list(window) if window else None, "immediate": immediate, "palette": PALETTES[theme], "scheme": theme}
    _COMPONENT(key=key, data=data, on_step_change=on_change)


def reported_step(key: str) -> int | None:
    """The step the browser reported for the scrubber ``key`` in this rerun (read it in ``on_change``), or None."""
    value = st.session_state.get(key)
    index = None if value is None else value.get("step")
    return index if isinstance(index, int) and not isinstance(index, bool) else None
