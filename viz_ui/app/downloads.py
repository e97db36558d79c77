"""A figure's data as CSV, downloaded from a link drawn inside its live chart: ``GET /viz/csv/TOKEN``.

Every figure offers its data as a CSV file (:func:`viz_ui.app.layout.show_figure`). As a Streamlit
``st.download_button`` under each figure that was one more widget per figure at every run: registered, hashed, sent
and drawn (page 3: 7 of its 96 elements; with ``st.page_link`` the costliest kind in a class student's run,
bench/class_live.py and py-spy). Where the app is served by ``serve.py`` (:func:`routes`), the live chart draws the
link itself (live_chart.js, "Data (CSV)" under the chart, as the button looked) and a page's run only registers the
function that writes the CSV (:func:`register`): a dictionary entry, no element. The CSV is the same text the button
gave: written by that function (pandas' ``to_csv``) when the link is followed, from the figure of the page's latest run.

The token names one chart of one session (random, kept in the session's state, one per chart key), so a link only
reaches a figure its own page showed; it answers for :data:`TOKEN_TTL_S` after that page's latest run, while the session
lives (the function is held by the session's state; the route's registry holds it weakly). Answers:
200 with the CSV (``text/csv``, ``Content-Disposition: attachment`` with the figure's file name); 404 for an unknown
or expired token (another replica, a restarted server: the page's next run draws a new link); 500 when the data
cannot be written (logged). Without the route (``streamlit run app.py``, or a page run by a test) :data:`ENABLED` is
False and the figures keep their ``st.download_button``.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from urllib.parse import quote

import streamlit as st
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from viz_ui.app.chart_tokens import chart_token

PREFIX = "/viz/csv/"
URL = PREFIX.lstrip("/")  # relative to the page: the browser resolves it against the page's address
MAX_LINKS = 20_000  # links registered at once by this process, least recently registered dropped first
TOKEN_TTL_S = 3_600.0  # a link answers for this long after its page last ran
ENABLED = False  # set by routes()
_log = logging.getLogger(__name__)

Build = Callable[[], str]  # writes the CSV text


class Owner(dict):
    """A session's registered CSVs, ``token → (build, file name)``, kept in its session state: the registry holds it
    only weakly, so a session that ends takes its figures with it (as Streamlit drops a download button's data)."""


class _Links:
    """The registered links by token: a weak reference to the :class:`Owner` that holds the token's CSV, and when it
    was registered; bounded by :data:`MAX_LINKS` (least recently registered dropped first)."""

    def __init__(self, limit: int = MAX_LINKS):
        self.limit = limit
        self.items: OrderedDict[str, tuple[weakref.ref, float]] = OrderedDict()
        self.lock = threading.Lock()

    def put(self, token: str, build: Build, filename: str, owner: Owner) -> None:
        """Register ``build`` (written as ``filename``) under ``token``, held by ``owner`` (one per session)."""
        owner[token] = (build, filename)
        with self.lock:
            self.items[token] = (weakref.ref(owner), time.monotonic())
            self.items.move_to_end(token)
            while len(self.items) > self.limit:
                self.items.popitem(last=False)

    def get(self, token: str) -> tuple[Build, str] | None:
        """``(build, file name)`` registered under ``token``, or None (never, dropped, expired or its session gone:
        dropped now)."""
        with self.lock:
            item = self.items.get(token)
            if item is None:
                return None
            owner = item[0]()
            if owner is None or token not in owner or time.monotonic() - item[1] > TOKEN_TTL_S:
                del self.items[token]
                return None
            return owner[token]


LINKS = _Links()


def register(chart: str, build: Build, filename: str) -> str | None:
    """Register the CSV of this session's live chart ``chart`` (its key): ``build()`` writes it when the link is
    followed, as ``filename``. Call at every run that draws the chart (the latest ``build`` is kept; one per chart and
    session, held by the session's state). Returns the link's address relative to the page (``viz/csv/TOKEN``), or
    None when the route is not installed (then draw a ``st.download_button``)."""
    if not ENABLED:
        return None
    owner = st.session_state.get("_csv_links")
    if owner is None:
        owner = st.session_state["_csv_links"] = Owner()
    token = chart_token("_csv_tokens", chart)
    LINKS.put(token, build, filename, owner)
    return URL + token


def _disposition(filename: str) -> str:
    """``attachment`` with ``filename`` for every browser: an ASCII fallback and the UTF-8 name (RFC 6266, 5987)."""
    ascii_name = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename)
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename, safe='')}"


async def answer(request: Request) -> Response:
    """``GET /viz/csv/TOKEN``: see the module's docstring."""
    link = LINKS.get(request.path_params["token"][:64])
    if link is None:
        return Response("No such figure: reload the page for a new link.\n", status_code=404, media_type="text/plain",
                        headers={"Cache-Control": "no-store"})
    build, filename = link
    try:
        text = await run_in_threadpool(build)  # pandas' to_csv: off the event loop that serves every session
    except Exception:
        _log.exception("a figure's CSV could not be written")
        return Response("The figure's data could not be written.\n", status_code=500, media_type="text/plain",
                        headers={"Cache-Control": "no-store"})
    return Response(text.encode("utf-8"), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": _disposition(filename), "Cache-Control": "no-store"})


def routes() -> list[Route]:
    """The route ``GET /viz/csv/{token}``; calling this marks the links available (:data:`ENABLED`)."""
    global ENABLED
    ENABLED = True
    return [Route(PREFIX + "{token}", answer, methods=["GET"])]
