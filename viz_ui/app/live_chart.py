"""A Plotly chart redrawn in place: for figures that change at every move of a slider (the timeline's step).

Streamlit's Plotly element gives a chart whose figure changed a new identity: the browser throws the old chart
away and draws a new one, twice (once before its width is known, then at the real width). This Streamlit component
(``st.components.v2``, in the page's own DOM, no iframe) keeps one Plotly chart per key and hands each new figure to
``Plotly.react``, which redraws only what changed. A chart given :class:`Frames` follows a step scrubber
(:mod:`viz_ui.app.scrubber`) in the browser: it holds a frame of every step and redraws from it as soon as the step
moves there, with no round trip to the server (bench/timeline.py). Plotly's code is the plotly package's own
``plotly.min.js`` (the version its figures are written for), copied into the app's ``static/`` folder and served by
Streamlit's static file serving (``server.enableStaticServing`` in .streamlit/config.toml): nothing is fetched from
the internet (:mod:`viz_ui.app.preload`, which also has every page start loading it before its charts arrive).

Where that cannot be done (static serving off, the folder not writable),
:func:`viz_ui.app.preload.live_chart_source` returns None and callers fall back to ``st.plotly_chart``.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import plotly
import plotly.graph_objects as go
import plotly.io
import streamlit as st
from _plotly_utils.utils import PlotlyJSONEncoder

from viz_ui.app import ahead as ahead_route
from viz_ui.app import downloads
from viz_ui.app.gate import one_at_a_time
from viz_ui.app.preload import LOADER_JS, compact_js, live_chart_source
from viz_ui.views.figure_spec import FigureSpec
from viz_ui.views.figures import plain_figure, style_plain

# a chart drawn ahead: (new text, early) → the figure the rerun would show for it, or None; ``early`` (or None) takes
# that figure as soon as it is known, before the function returns (see live_chart)
Ahead = Callable[[str, Callable[[FigureSpec], None] | None], FigureSpec | None]
_JS = compact_js(LOADER_JS + "\n" + (Path(__file__).with_name("live_chart.js")).read_text(encoding="utf-8"))
# its CSS (the faded chart, the CSV link): several lines, as Streamlit reads a one-line string with "[" as a file's glob
_CSS = (Path(__file__).with_name("live_chart.css")).read_text(encoding="utf-8")
_COMPONENT = st.components.v2.component("viz_live_chart", js=_JS, css=_CSS, isolate_styles=False)


@dataclass(frozen=True)
class Frames:
    """The frames of a live chart that follows a step scrubber (:mod:`viz_ui.app.scrubber`) in the browser: a step
    change there redraws the chart from its frame at once, with no round trip to the server.

    ``figure``: the figure every frame is drawn on (keep it the same between reruns where it can be: a new one is
    drawn again in full). ``json``: a JSON list of frames for the steps ``first, first + 1, ...``, each
    ``{"data": [update of trace 0, update of trace 1, ...], "layout": update}``, merged into the figure's traces
    and layout as ``fig.update_traces``/``fig.update_layout`` would (numbers as Plotly's typed arrays,
    :func:`viz_ui.views.figures.typed_array`; every frame of a chart with the same keys). ``channel``: the scrubber's key; ``index``: the
    step the server shows (drawn until the scrubber announces one). ``follow``: a Streamlit slider that selects the
    step instead of a scrubber, ``(aria-label, origin, step)``: its value ``v`` shows step ``round((v - origin) / step)``
    as soon as it moves in the browser (the output page's temperature)."""

    figure: go.Figure
    channel: str
    index: int
    first: int
    count: int
    json: str
    follow: tuple[str, float, float] | None = None


PAYLOAD_BYTES = 64 * 2**20  # the figures' JSON kept for reuse, at most (least recently used dropped first)


class _Payloads:
    """The JSON text of figures given as a :class:`viz_ui.views.figure_spec.FigureSpec`, by ``(spec.key, style)``,
    shared by every session of this server: a figure that many sessions (a class following its teacher) or many reruns
    show is built and written once. Bounded by :data:`PAYLOAD_BYTES` of text, least recently used dropped first."""

    def __init__(self, limit: int = PAYLOAD_BYTES):
        self.limit, self.size = limit, 0
        self.items: OrderedDict[tuple, str] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple) -> str | None:
        with self.lock:
            text = self.items.get(key)
            if text is not None:
                self.items.move_to_end(key)
            return text

    def put(self, key: tuple, text: str) -> None:
        with self.lock:
            if key in self.items or len(text) > self.limit:
                return
            self.items[key] = text
            self.size += len(text)
            while self.size > self.limit:
                self.size -= len(self.items.popitem(last=False)[1])


PAYLOADS = _Payloads()


class _StrictEncoder(PlotlyJSONEncoder):
    """Plotly's JSON encoder (numpy arrays, dates, ...) without its second pass: Plotly decodes and encodes its text
    again whenever "NaN" or "Infinity" occurs anywhere in it, to write non-finite numbers as ``null``; the base64 text
    of a typed array (every numeric array of a figure) often holds "NaN" by chance, so that a 128 × 128 heatmap took
    that pass at every build (37 ms a figure instead of 18). Here a non-finite float raises ``ValueError`` instead
    (``allow_nan=False``), and :func:`plotly_json` then leaves the figure to Plotly."""

    def encode(self, o):
        return json.JSONEncoder.encode(self, o)


def plotly_json(figure: dict) -> str:
    """``plotly.io.json.to_json_plotly(figure)`` with the built-in ``json`` engine, the same text, faster (see
    :class:`_StrictEncoder`). ``figure``: a plain figure dict (:func:`viz_ui.views.figures.plain_figure`)."""
    try:
        text = json.dumps(figure, cls=_StrictEncoder, separators=(",", ":"), allow_nan=False)
    except ValueError:  # NaN or ±inf somewhere: Plotly writes them as null
        return plotly.io.json.to_json_plotly(figure, engine="json")
    # as Plotly's writer does: no "</script>" can end an HTML script element around the text
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("/", "\\u002f")


def figure_json(fig: go.Figure | FigureSpec, style: tuple[float, str] | None = None) -> tuple[str, str]:
    """``(json, revision)``: the figure as the JSON text a live chart draws (styled by ``style``, see
    :func:`live_chart`) and a revision that changes with it. A :class:`~viz_ui.views.figure_spec.FigureSpec` with a
    key is built and written once per server (:data:`PAYLOADS`; concurrent sessions asking for the same one wait for
    the first, :func:`viz_ui.app.gate.one_at_a_time`), and its revision is its key; anything else is built and
    written at every call."""
    key = fig.key if isinstance(fig, FigureSpec) else None
    if key is None:
        fig = fig.figure() if isinstance(fig, FigureSpec) else fig
        plain = plain_figure(fig)  # no deep copy, no validation: see plain_figure
        text = plotly_json(plain if style is None else style_plain(plain, *style))
        return text, str(hash(text))
    revision = f"{key}:{style}"
    text = PAYLOADS.get((key, style))
    if text is None:
        with one_at_a_time(("figure_json", key, style)):
            text = PAYLOADS.get((key, style))
            if text is None:
                text, _ = figure_json(fig.figure(), style)
                PAYLOADS.put((key, style), text)
    return text, revision


def live_chart(fig: go.Figure | FigureSpec, config: dict, key: str, on_click=None, frames: Frames | None = None,
               style: tuple[float, str] | None = None,
               ahead: Ahead | None = None, csv: tuple[Callable[[], str], str] | None = None) -> dict | None:
    """Draw ``fig`` in the live chart ``key`` (the same key at every rerun: the browser keeps the chart and
    updates it in place). ``fig``: a figure, or a :class:`~viz_ui.views.figure_spec.FigureSpec` built and written
    once per server for every session that shows it (:func:`figure_json`). ``config``: Plotly's config (mode bar,
    export). ``on_click``: a callback run when a point is clicked; it reads :func:`clicked_point`. ``frames``: draw
    ``frames.figure`` with the frame of the step the scrubber ``frames.channel`` shows (``fig`` is not sent): the
    browser redraws the chart from the next frame as soon as the step changes there (Plotly.react with the new arrays;
    a frame that changes the layout only is drawn with Plotly.relayout, a few ms); a step without a frame here shows
    the chart faded until the server sends frames that hold it. ``style``: ``(scale, theme)`` to style the figure sent as
    :func:`viz_ui.views.figures.style_for_display` would (on its plain dict, :func:`viz_ui.views.figures.style_plain`);
    None: sent as it is. ``ahead``: a function ``(new text, early)`` that returns the figure this chart's rerun would
    show for that text (or None); it may hand the figure to ``early`` (when not None) as soon as it has it, before it
    returns (:func:`viz_ui.app.state.trace_early`): the chart is then drawn ahead of the rerun when the user submits a
    new text (:mod:`viz_ui.app.ahead`; it runs outside the page's run: no session state, no Streamlit elements).
    ``csv``: ``(build, file name)``: the chart draws a "Data (CSV)" link under itself that downloads ``build()``
    (:mod:`viz_ui.app.downloads`, where the app is served with that route: see :func:`csv_link`).

    Returns:
        The component's result (``.click`` is the last click, for one rerun), or None when live charts are not
        available (see :func:`viz_ui.app.preload.live_chart_source`; nothing was drawn).
    """
    src = live_chart_source()
    if src is None:
        return None
    # registered first: a figure for this chart drawn ahead and still under way is waited for (its JSON reused)
    token = (ahead_route.register(key, lambda text, deliver=None: _ahead_json(ahead, text, style, deliver))
             if ahead is not None and frames is None else None)
    figure, revision = figure_json(fig if frames is None else frames.figure, style)
    data = {"config": config, "src": src, "clickable": on_click is not None, "revision": revision, "chart": key}
    if token is not None:
        data.update(ahead=token, aheadUrl=ahead_route.URL)
    link = downloads.register(key, *csv) if csv is not None else None
    if link is not None:
        data.update(csv={"url": link, "name": csv[1]})
    texts = {"figure": figure}
    if frames is not None:
        data.update(channel=frames.channel, index=frames.index, first=frames.first, count=frames.count,
                    framesRevision=str(hash(frames.json)))
        texts["frames"] = frames.json
        if frames.follow:
            label, origin, step = frames.follow
            data.update(follow={"label": label, "origin": origin, "step": step})
    return _COMPONENT(key=key, data=pack(data, **texts), on_click_change=on_click or (lambda: None))


def csv_link() -> bool:
    """Whether a live chart given ``csv`` draws its own CSV link (the route of :mod:`viz_ui.app.downloads` is
    installed and live charts can be drawn): else the caller offers the CSV with ``st.download_button``."""
    return downloads.ENABLED and live_chart_source() is not None


def _ahead_json(build: Ahead, text: str, style: tuple[float, str] | None,
                deliver: Callable[[tuple[str, str]], None] | None = None) -> tuple[str, str] | None:
    """What a chart drawn ahead answers for ``text``: ``figure_json`` of ``build(text, early)``, or None; a figure
    ``build`` hands to ``early`` before it returns goes to ``deliver`` at once, as ``figure_json``."""
    early = None if deliver is None else (lambda spec: deliver(figure_json(spec, style)))
    spec = build(text, early)
    return None if spec is None else figure_json(spec, style)


def pack(data: dict, **texts: str) -> bytes:
    """A live chart's data as it is sent to the browser: one line of JSON (``data``, plus ``parts``: each text's
    name and length in bytes), then each text's UTF-8 bytes, in order (live_chart.js's ``unpack``).

    Bytes rather than the JSON object Streamlit would write: a component's JSON data is encoded by Streamlit twice
    more (once to send, once sorted and hashed for the element's identity), so the figure's JSON, a string inside it,
    was escaped and copied three times per chart and session at every rerun (page 3 at 64 tokens: 1.2 MB of figures,
    about 12 ms of server time per rerun, and again in every student's session of a class); bytes are sent as they are
    and hashed once. ``data`` must not hold ``"parts"``.
    """
    encoded = {name: text.encode("utf-8") for name, text in texts.items()}
    head = json.dumps({**data, "parts": [[name, len(raw)] for name, raw in encoded.items()]}, separators=(",", ":"))
    return b"\n".join([head.encode("utf-8"), b"".join(encoded.values())])


def unpack(payload: bytes) -> dict:
    """The data and texts :func:`pack` packed, as one dict (``parts`` left out). Raises ValueError for bytes that
    :func:`pack` did not write."""
    head, sep, rest = bytes(payload).partition(b"\n")
    if not sep:
        raise ValueError("not a live chart's data: no header line")
    data = json.loads(head)
    at = 0
    for name, length in data.pop("parts"):
        data[name] = rest[at:at + length].decode("utf-8")
        at += length
    if at != len(rest):
        raise ValueError("not a live chart's data: the parts do not add up")
    return data


def clicked_point(key: str) -> dict | None:
    """The point clicked in the live chart ``key`` during this rerun: ``{"curve_number", "point_index", "x", "y"}``
    as Plotly reports them, or None."""
    result = st.session_state.get(key)
    return None if result is None else result.get("click")
