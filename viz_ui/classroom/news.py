"""A class's news, pushed to students' screens by long polling: ``GET /class/CODE/news?seen=STATE``.

A student's screen needs to know when the teacher published a new view or asked or revealed a question. Asking
the server with a Streamlit fragment rerun every second costs each student ~4 ms of server CPU a second
(bench/class_live.py: 0.38 of a core for 100 students doing nothing) and makes every change wait up to a second.
Instead, each student's browser holds one plain HTTP request open here (the bell, :mod:`viz_ui.classroom.bell`):
it is answered as soon as the class's news differs from what the screen last saw (or after :data:`HOLD_S`, then
asked again), and only then does the screen rerun its poll. Each server process reads a class's news from the store
when the store tells it of a change (:meth:`ClassStore.subscribe <viz_ui.classroom.store.ClassStore.subscribe>`:
Redis pub/sub, or the in-process store's own call), and every :data:`CHECK_S` all the same (a change told while Redis
restarted); a store that cannot tell is read every :data:`WATCH_S`. Either way one read per class, whatever the
number of students.

The news is a short string, ``"{view version}:{question id}:{revealed 0/1}"``; it says nothing the class code does
not already give (a student's link reads the view itself). An unknown or ended class answers 404; a store that does
not answer keeps the requests waiting (the fragment's slower poll says so on the screen).

The route is installed when the app is served by ``serve.py`` (``streamlit run serve.py``: a Streamlit ``st.App``
with this route); :data:`ENABLED` then says so to the pages, which otherwise poll every second as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from viz_ui.classroom.store import ClassStore, ClassStoreUnavailable
from viz_ui.classroom.view import valid_code

PATH = "/class/{code}/news"
HOLD_S = 20.0  # a request waits at most this long (below HAProxy's 60 s `timeout server`), then answers the same news
WATCH_S = 0.15  # a store that cannot tell of changes: the watcher reads it this often for each class waited on
CHECK_S = 1.0  # a store that tells of changes: the watcher reads it this often all the same
IDLE_S = 60.0  # a class nobody waited on for this long is no longer watched
MAX_CLASSES = 1_000  # classes watched at once by one process (a request for one more: 503)
ENABLED = False  # set by routes(): the pages use the bell instead of a fast poll
GONE = "gone"
FULL = "full"


def news_string(version: int, question: dict | None) -> str:
    """The news of a class whose view is at ``version`` and whose current question is ``question`` (the store's
    dict, or None)."""
    revealed = int(bool(question.get("revealed"))) if question else 0
    return f"{version}:{question['id'] if question else ''}:{revealed}"


def news_of(store: ClassStore, code: str) -> str:
    """The class's news now (see the module docstring). Raises ``KeyError`` for an unknown class and
    ``ClassStoreUnavailable`` (or ``OSError``) when the store does not answer."""
    question = store.question(code)
    return news_string(store.version(code), question)


class _Class:
    __slots__ = ("news", "changed", "last_wait", "reading", "again")

    def __init__(self) -> None:
        self.news: str | None = None  # None: not read yet
        self.changed = asyncio.Event()  # set (and replaced) at each change
        self.last_wait = time.monotonic()
        self.reading = False  # a read of the store is under way (one at a time: answers never go back in time)
        self.again = False  # a change was told during that read: read once more


class NewsBoard:
    """The classes this process's students wait on, and one watcher task that reads their news from ``store()``.

    Runs on the server's event loop; the store is read in a worker thread (a Redis that hangs never blocks the
    loop)."""

    def __init__(self, store: Callable[[], ClassStore]) -> None:
        self._store = store
        self._classes: dict[str, _Class] = {}
        self._watcher: asyncio.Task | None = None
        self._tells: bool | None = None  # whether the store tells this board of changes (None: not asked yet)
        self._tasks: set[asyncio.Task] = set()

    async def wait(self, code: str, seen: str, hold_s: float | None = None) -> str | None:
        """The class's news as soon as it differs from ``seen``, or after ``hold_s`` seconds (default
        :data:`HOLD_S`) whatever it is;
        :data:`GONE` for an unknown class; :data:`FULL` when too many classes are watched; None while the store has
        not answered yet."""
        entry = self._classes.get(code)
        if entry is None:
            if len(self._classes) >= MAX_CLASSES:
                return FULL
            entry = self._classes[code] = _Class()
            await self._refresh(code, entry)
        self._start()
        entry.last_wait = time.monotonic()
        end = time.monotonic() + (HOLD_S if hold_s is None else hold_s)
        while entry.news in (None, seen) and (left := end - time.monotonic()) > 0:
            try:
                await asyncio.wait_for(entry.changed.wait(), timeout=left)
            except asyncio.TimeoutError:
                break
            entry.last_wait = time.monotonic()
        return entry.news

    def _start(self) -> None:
        if self._tells is None:
            self._subscribe(asyncio.get_running_loop())
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    def _subscribe(self, loop: asyncio.AbstractEventLoop) -> None:
        def told(code: str) -> None:  # in the store's thread
            try:
                loop.call_soon_threadsafe(self._poke, code)
            except RuntimeError:  # the loop has closed (the server stopping)
                pass
        try:  # the calls last as long as the process (one board per process): the stop function is not kept
            self._tells = self._store().subscribe(told) is not None
        except (ClassStoreUnavailable, OSError, ValueError, AttributeError):
            self._tells = False

    def _poke(self, code: str) -> None:
        entry = self._classes.get(code)
        if entry is not None:
            task = asyncio.get_running_loop().create_task(self._refresh(code, entry))
            self._tasks.add(task)  # held until done (the loop keeps only a weak reference)
            task.add_done_callback(self._tasks.discard)

    async def _refresh(self, code: str, entry: _Class) -> None:
        """Read the class's news, one read at a time per class; a change told during a read reads again after it."""
        if entry.reading:
            entry.again = True
            return
        entry.reading = True
        try:
            while True:
                entry.again = False
                await self._read(code, entry)
                if not entry.again:
                    return
        finally:
            entry.reading = False

    async def _read(self, code: str, entry: _Class) -> None:
        try:
            news = await asyncio.get_running_loop().run_in_executor(None, news_of, self._store(), code)
        except KeyError:
            news = GONE
        except (ClassStoreUnavailable, OSError, ValueError):
            return  # unchanged: the screens' slower poll says that the store does not answer
        if news != entry.news:
            entry.news = news
            entry.changed.set()
            entry.changed = asyncio.Event()

    async def _watch(self) -> None:
        while self._classes:
            await asyncio.sleep(CHECK_S if self._tells else WATCH_S)
            now = time.monotonic()
            for code, entry in list(self._classes.items()):
                if now - entry.last_wait > IDLE_S or entry.news == GONE:
                    del self._classes[code]
                else:
                    await self._refresh(code, entry)


async def _disconnected(request: Request) -> None:
    """Returns when the client closes the connection of ``request`` (a GET: its body is empty). A held request is
    answered at once then, rather than at the end of its hold: a server stopping waits for the requests it holds, so
    a closed tab's held request kept a stopping server up for as long as :data:`HOLD_S`."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def routes(store: Callable[[], ClassStore]) -> list[Route]:
    """The news route (``GET /class/{code}/news?seen=STATE``), answered from a :class:`NewsBoard` over ``store()``.
    Calling it marks the bell available (:data:`ENABLED`)."""
    global ENABLED
    board = NewsBoard(store)

    async def news(request: Request) -> JSONResponse:
        code = valid_code(request.path_params["code"])
        seen = request.query_params.get("seen", "")[:64]
        if code is None:
            return JSONResponse({"error": "not a class code"}, status_code=404)
        waiting = asyncio.ensure_future(board.wait(code, seen))
        gone = asyncio.ensure_future(_disconnected(request))
        await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done() and gone.done() and gone.exception() is None:
            waiting.cancel()  # the screen closed its connection (a tab closed, a page left): no one to answer
            return Response(status_code=204)
        gone.cancel()
        answer = await waiting
        if answer is None or answer == FULL:
            return JSONResponse({"error": "the class store does not answer" if answer is None else "too many classes"},
                                status_code=503)
        if answer == GONE:
            return JSONResponse({"error": "no such class"}, status_code=404)
        return JSONResponse({"news": answer}, headers={"Cache-Control": "no-store"})

    ENABLED = True
    return [Route(PATH, news, methods=["GET"])]
