"""One watch per server: a class's news reaches the students on this server at once, not at their next poll.

A student's screen polls the class every ``POLL_SECONDS`` (:mod:`viz_ui.classroom.follow`). Alone, that makes every
change wait half a poll period on average, and a whole one at worst, before the students' page runs start
(bench/class_live.py). Here one thread per server process asks the store, every :data:`WATCH_SECONDS`, two cheap
questions for each class that has students on this server (the view's version and the current question); when
either changed, it reruns the page of each student concerned at once, on the server (the followers for a new view,
every student for a question asked or revealed), as ``st.rerun()`` would: the page and link of the session's last
run, no widget values sent, so nothing a student set is touched. The page's poll, which runs inline in every full
run, then does what it always does: applies the view, or draws the question. The students' own polls stay, as the
heartbeat behind the follower count and the safety net when the store or this watch misses something. (A rerun of
the poll's fragment alone, started from the server, was tried first: when it reached a browser that was switching
pages, the browser got the fragment's elements for a page it no longer showed, failed with "Bad delta path" and
stayed blank.)

Streamlit has no public way to rerun a session from the server: :func:`wake` uses its internals (``Runtime``'s session
manager, ``AppSession._create_scriptrunner``, the session's last ``ClientState``) as Streamlit itself does when a
source file changes (``runOnSave``). Where they differ from the ones this was written for (Streamlit
1.67), waking does nothing and the students' polls alone carry the class, as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from viz_ui.classroom import ClassStoreUnavailable, class_store

WATCH_SECONDS = 0.2  # how often the server asks the store about its classes
FORGET_SECONDS = 30.0  # a session whose poll was not seen for this long is forgotten (it left, or closed the tab)
BUSY_RETRIES = 40  # a session running a script is woken again 50 ms later, up to this many times
_LOG = logging.getLogger(__name__)


@dataclass
class _Student:
    code: str
    following: bool
    seen: float  # time.monotonic() of its last poll


def class_state(store, code: str) -> tuple[int, tuple | None]:
    """What a student's screen shows of the class ``code`` that the teacher can change: ``(view version, (question
    id, revealed) or None)``. Raises what the store raises (``KeyError``: no such class)."""
    question = store.question(code)
    return store.version(code), (question["id"], bool(question.get("revealed"))) if question else None


class Watcher:
    """The students of this server by session id (:meth:`register`, called by each poll) and the thread that wakes
    them (:meth:`check`, every ``period`` seconds once a student registered). ``store``: a callable returning the
    class store; ``wake``: ``wake(session_id)``, by default :func:`wake`."""

    def __init__(self, store: Callable = class_store, wake: Callable | None = None, period: float = WATCH_SECONDS):
        self.store, self.wake, self.period = store, wake, period
        self.students: dict[str, _Student] = {}
        self.seen: dict[str, tuple] = {}  # class code -> its last class_state
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def register(self, code: str, session_id: str, following: bool) -> None:
        """Note that session ``session_id`` is a student of class ``code``, ``following`` the teacher or not (called
        by each of its polls); starts the watch thread at the first call."""
        with self.lock:
            self.students[session_id] = _Student(code, following, time.monotonic())
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="viz-class-watch", daemon=True)
                self.thread.start()

    def forget(self, session_id: str) -> None:
        with self.lock:
            self.students.pop(session_id, None)

    def check(self) -> int:
        """One round: ask the store about each class that has students here; wake its followers when its view
        changed since the last round, all its students when its question did or the class ended. Returns the number
        of students woken. A class seen for the first time wakes nobody; a store that does not answer: that class
        waits for the next round."""
        now = time.monotonic()
        with self.lock:
            for sid in [s for s, st in self.students.items() if now - st.seen > FORGET_SECONDS]:
                del self.students[sid]
            by_code: dict[str, list[tuple[str, _Student]]] = {}
            for sid, student in self.students.items():
                by_code.setdefault(student.code, []).append((sid, student))
            for code in set(self.seen) - set(by_code):
                del self.seen[code]
        woken = 0
        for code, students in by_code.items():
            try:
                state = class_state(self.store(), code)
            except KeyError:
                state = None  # ended: each poll says so and leaves the class
            except (ClassStoreUnavailable, OSError, ValueError):
                continue
            before = self.seen.get(code, state)
            self.seen[code] = state
            if state == before:
                continue
            everyone = state is None or before is None or state[1] != before[1]
            for sid, student in students:
                if everyone or student.following:
                    (self.wake or wake)(sid)
                    woken += 1
        return woken

    def _run(self) -> None:
        while True:
            time.sleep(self.period)
            try:
                self.check()
            except Exception:  # the watch must not die: the students' polls go on without it
                _LOG.exception("class watch")


WATCHER = Watcher()


def _session(session_id: str):
    """This server's live Streamlit session ``session_id`` (an ``AppSession``), or None."""
    from streamlit.runtime import Runtime

    info = Runtime.instance()._session_mgr.get_active_session_info(session_id)
    return None if info is None else info.session


def wake(session_id: str) -> None:
    """Rerun the page of session ``session_id`` now (from any thread): handed to the session's event loop, where
    :func:`_wake_on_loop` starts it. A session that is gone is forgotten."""
    try:
        session = _session(session_id)
        if session is None:
            WATCHER.forget(session_id)
            return
        session._event_loop.call_soon_threadsafe(_wake_on_loop, session_id, 0)
    except (AttributeError, ImportError, RuntimeError) as exc:  # other internals, or the loop closed (stopping)
        _LOG.debug("class watch cannot wake a session: %s", exc)


def _wake_on_loop(session_id: str, tries: int) -> None:
    """On the session's event loop: start a full run of its page as ``st.rerun()`` would (the query string and page
    of its last run, no widget states). Only an idle session is rerun: its last ``ClientState`` is then the end of
    its last run, and a request the browser sends meanwhile (a widget the student moved) comes after this one, so
    nothing the student did is undone. A session running a script now is tried again 50 ms later (up to
    :data:`BUSY_RETRIES` times; the run it is in may well apply the news itself). A session that is gone or
    shutting down is left alone."""
    try:
        from streamlit.runtime.app_session import AppSessionState
        from streamlit.runtime.scriptrunner_utils.script_requests import RerunData

        session = _session(session_id)
        if session is None:
            return
        if session._state == AppSessionState.SHUTDOWN_REQUESTED:
            return
        if session._scriptrunner is not None:
            if tries < BUSY_RETRIES:
                session._event_loop.call_later(0.05, _wake_on_loop, session_id, tries + 1)
            return
        client = session._client_state
        session._create_scriptrunner(RerunData(
            query_string=client.query_string, page_script_hash=client.page_script_hash, page_name=client.page_name,
            context_info=client.context_info if client.HasField("context_info") else None))
    except (AttributeError, ImportError, TypeError) as exc:  # other Streamlit internals: the polls carry the class
        _LOG.debug("class watch cannot wake a session: %s", exc)
