"""Charts drawn ahead of the rerun: the browser asks for a chart's figure of a new text as the text is submitted.

After Ctrl+Enter in the sidebar's Text box, Streamlit reruns the whole page: the sidebar, the forward pass, then
every figure of the page in order, each drawn by the browser in turn, between the rendering of about a hundred other
messages (typing → attention at 64 tokens: 630–760 ms on this machine on 2026-11-27/28; page 3's head heatmap was
drawn 470–650 ms after the keydown, bench/latency.py). A live chart registered here (:func:`register`, through
:func:`viz_ui.app.live_chart.live_chart`'s ``ahead``) comes with a function of the new text that returns the figure
the page's rerun will draw for that text. At the keydown the browser sends the text to ``POST /viz/ahead`` and
holds the keydown from Streamlit until the answer is drawn (live_chart.js; at most 1.5 s); this server runs the
function in a worker thread (the forward pass it needs is the shared cached one the rerun reads, computed once: the
second caller waits for the first) and answers with the figure's JSON and revision. The browser draws it at once,
then gives Streamlit the keydown; when the rerun then sends the same figure (the same revision), it is not drawn
again (typing → attention at 64 tokens: 760 → 193 ms, bench/latency.py). The rerun's figure always wins: a chart
drawn ahead that differs from the rerun's is drawn over, and an answer that comes after the rerun's figure is
dropped.

The request: a JSON object ``{"token": str, "text": str}`` of at most :data:`MAX_BODY_BYTES`; the token names one
chart of one session (random, :func:`register`), so a request can only ask for a figure its own page would draw.
Answers: 200 with the figure's JSON (``X-Viz-Revision``: its revision); 204 when there is nothing to draw ahead (an
empty text, a text the model cannot run: the rerun shows the message); 400 for a body that is not such an object;
404 for an unknown token (another replica, a server restarted, a registration dropped, a page that has not run for
:data:`TOKEN_TTL_S`); 413 for a body too large; 429 while the same chart's previous request is still being answered;
503 while :data:`MAX_PENDING` answers are (the page's rerun then draws the chart, as without this route). An answer
whose chart's page ran again before a worker took it up is not built (204).

The route is installed when the app is served by ``serve.py`` (:func:`routes`); :data:`ENABLED` then says so to the
pages, which register nothing otherwise.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from viz_ui.app.chart_tokens import chart_token

PATH = "/viz/ahead"
URL = PATH.lstrip("/")  # relative to the page: the browser resolves it against the page's address
MAX_BODY_BYTES = 128 * 1024  # the Text box's 20,000 characters (layout.MAX_CHARS) in UTF-8 and JSON, with room
MAX_CHARTS = 10_000  # charts registered at once by this process, least recently registered dropped first
TOKEN_TTL_S = 3_600.0  # a chart's token answers for this long after its page last ran (a session gone stops answering)
MAX_PENDING = 16  # answers taken and still being built, for every chart together: more are refused (503)
WORKERS = 4  # charts built ahead at once by this process (each runs the model: more would only share the cores)
ENABLED = False  # set by routes()
_log = logging.getLogger(__name__)
_THREADS = "viz-ahead"
_executor: ThreadPoolExecutor | None = None
_pending = 0  # answers taken and still being built (read and changed on the event loop)

Got = "tuple[str, str] | None"  # (figure JSON, revision), or None: nothing to draw ahead
# an answer: (a new text, deliver) → Got. ``deliver(got)`` may hand the figure over before the answer returns (the
# forward pass it needs goes on meanwhile: :func:`viz_ui.app.state.trace_early`); the first figure handed over or
# returned is sent
Answer = Callable[[str, Callable[[Got], None] | None], Got]


@dataclass
class _Chart:
    answer: Answer
    busy: bool = False  # a request for this chart is taken and not answered yet (read and set on the event loop)
    # clear while an answer is being built (in a worker, not while queued for one): the page's run waits on it
    idle: threading.Event = field(default_factory=threading.Event)
    runs: int = 0  # page runs that registered the chart: an answer asked for before the latest one is not built
    registered: float = field(default_factory=time.monotonic)  # the latest registration (see TOKEN_TTL_S)

    def __post_init__(self) -> None:
        self.idle.set()


class _Registry:
    """The registered charts by token, bounded by :data:`MAX_CHARTS` (least recently registered dropped first)."""

    def __init__(self, limit: int = MAX_CHARTS):
        self.limit = limit
        self.items: OrderedDict[str, _Chart] = OrderedDict()
        self.lock = threading.Lock()

    def put(self, token: str, answer: Answer) -> _Chart:
        with self.lock:
            chart = self.items.get(token)
            if chart is None:
                chart = self.items[token] = _Chart(answer)
            else:
                chart.answer, chart.runs, chart.registered = answer, chart.runs + 1, time.monotonic()
                self.items.move_to_end(token)
            while len(self.items) > self.limit:
                self.items.popitem(last=False)
            return chart

    def get(self, token: str) -> _Chart | None:
        """The chart registered under ``token``, or None (never registered, dropped, or not registered again for
        :data:`TOKEN_TTL_S`: then dropped now)."""
        with self.lock:
            chart = self.items.get(token)
            if chart is not None and time.monotonic() - chart.registered > TOKEN_TTL_S:
                del self.items[token]
                return None
            return chart


REGISTRY = _Registry()


WAIT_S = 1.0  # a page's run waits at most this long for its chart's answer being built (see register)


def register(chart: str, answer: Answer) -> str | None:
    """Register this session's live chart ``chart`` (its key) to be drawn ahead of the rerun: ``answer(text)`` gives
    ``(figure JSON, revision)`` of the figure the page's rerun would draw for ``text`` (or None), exactly as the live
    chart sends them (:func:`viz_ui.app.live_chart.figure_json`). Called at every run that draws the chart (the
    latest ``answer`` is kept), before the run builds the chart's figure: while an answer for this chart is being
    built, the run waits for it (at most :data:`WAIT_S`), so that the answer reaches the browser before the run's own
    copy of the chart, and the run reuses the figure's JSON it wrote; an answer still queued for a worker is then not
    built at all. Returns the chart's token for the browser, or None when the route is not installed. ``answer`` runs
    in a worker thread outside the page's run: it may read the server's caches, not the session's state."""
    if not ENABLED:
        return None
    token = chart_token("_ahead_tokens", chart)
    REGISTRY.put(token, answer).idle.wait(WAIT_S)
    return token


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers={"Cache-Control": "no-store"})


async def _body(request: Request) -> bytes | None:
    """The request's body, or None when it is (or would be) over :data:`MAX_BODY_BYTES`."""
    length = request.headers.get("content-length", "")
    if length and (not (length.isascii() and length.isdigit()) or int(length) > MAX_BODY_BYTES):
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return None
    return bytes(body)


def _run(chart: _Chart, text: str, runs: int, deliver: Callable[[Got], None] | None = None) -> tuple[str, str] | None:
    """``chart.answer(text, deliver)`` in a worker thread, unless the chart's page ran again since the request came
    (``runs``: its count then): the rerun sends the chart itself, and an answer now would be dropped by the browser."""
    if chart.runs != runs:
        return None
    chart.idle.clear()
    try:
        return chart.answer(text, deliver)
    except Exception:  # the rerun reports the same failure on the page; here only the log
        _log.exception("a chart drawn ahead could not be built")
        return None
    finally:
        chart.idle.set()


async def answer(request: Request) -> Response:
    """``POST /viz/ahead``: see the module's docstring."""
    body = await _body(request)
    if body is None:
        return _error(f"the request is larger than {MAX_BODY_BYTES:,} bytes", 413)
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: arrays nested thousands deep
        payload = None
    if (not isinstance(payload, dict) or not isinstance(payload.get("token"), str)
            or not isinstance(payload.get("text"), str)):
        return _error('expected a JSON object {"token": string, "text": string}', 400)
    chart = REGISTRY.get(payload["token"][:64])
    if chart is None:
        return _error("no such chart", 404)
    if chart.busy:
        return _error("this chart's previous text is still being drawn", 429)
    global _pending
    if _pending >= MAX_PENDING:
        return _error("too many charts are being drawn ahead: the page's rerun draws this one", 503)
    chart.busy = True
    _pending += 1
    loop = asyncio.get_running_loop()
    first = loop.create_future()  # the first figure handed over (early, or the answer's return value)

    def settle(got) -> None:
        if not first.done():
            first.set_result(got)

    def finished(work: asyncio.Future) -> None:  # the worker is done: the chart and the pool are free again
        global _pending
        chart.busy = False
        _pending -= 1
        settle(None if work.cancelled() or work.exception() is not None else work.result())

    work = loop.run_in_executor(_executor, _run, chart, payload["text"], chart.runs,
                                lambda got: loop.call_soon_threadsafe(settle, got))
    work.add_done_callback(finished)
    got = await first
    if got is None:
        return Response(status_code=204, headers={"Cache-Control": "no-store"})
    figure, revision = got
    return Response(figure, media_type="application/json",
                    headers={"X-Viz-Revision": revision, "Cache-Control": "no-store"})


class _QuietWorkers(logging.Filter):
    """Drops Streamlit's "missing ScriptRunContext" warning in this module's worker threads: the answers read
    Streamlit's caches outside a page's run on purpose (a cache's spinner there draws nothing)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.threadName or "").startswith(_THREADS)


def routes() -> list[Route]:
    """The route ``POST /viz/ahead``; calling this marks drawing ahead available (:data:`ENABLED`)."""
    global ENABLED, _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=_THREADS)
        logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").addFilter(_QuietWorkers())
    ENABLED = True
    return [Route(PATH, answer, methods=["POST"])]
