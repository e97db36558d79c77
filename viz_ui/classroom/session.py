"""This browser session's part in a class (teacher or student), kept in ``st.session_state`` and in the link.

The link carries what a new session needs to go on, so that a reconnect to another replica (a new Streamlit
session) is still in the class: ``?class=CODE`` for a student, ``?class=CODE&teach=TOKEN`` for the teacher. The
student link never holds the token: the code lets a student read the view and answer, never publish or ask.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from viz_ui.analysis.text import error_line, plain
from viz_ui.classroom import ClassStoreUnavailable, class_store
from viz_ui.classroom.view import valid_code

KEY = "_class"  # session_state key of the ClassSession
MESSAGE = "_class_message"  # a one-line message for the next run's class bar (wrong code, class ended, ...)
ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass
class ClassSession:
    """A session's class: the ``code``, its ``role`` (``"teacher"`` with the ``token``, or ``"student"``)."""

    code: str
    role: str  # "teacher" or "student"
    token: str | None = None  # the teacher's secret (teacher only)
    student_id: str = field(default_factory=lambda: secrets.token_urlsafe(9))  # random, anonymous (≤ 64 chars)
    following: bool = True  # student: applies the teacher's views
    version: int = 0  # student: the view version last applied (0: none yet)
    applied: dict = field(default_factory=dict)  # student: the parameters of the view last applied
    # student: (page, link) the last applied view must show at the next full run, and how often it was applied: a
    # rerun the view asked for can be replaced by one the browser asked for with the old page and link (Streamlit
    # merges pending rerun requests, the newer page and query string winning), and is then applied again
    expect: tuple | None = None
    attempts: int = 0
    waited: int = 0  # student: polls since the view was applied with no full run (its rerun never came)
    published: dict | None = None  # teacher: the view last published
    question: tuple | None = None  # (question id, revealed) last drawn, to notice a new question or a reveal
    answers: dict = field(default_factory=dict)  # question id -> this screen's answer (shown back to the student)
    hidden: str | None = None  # the question id this screen has hidden
    polled: tuple | None = None  # student: (monotonic time, view version, question) of the last store poll
    beat: float = float("-inf")  # student: monotonic time of the last heartbeat sent

    @property
    def teacher(self) -> bool:
        return self.role == "teacher"

    def question_changed(self, question: dict | None) -> bool:
        """Note the class's current ``question`` (the store's dict, or None) as this screen's; True when it is
        another question, or was revealed, since the screen last noted one (its page should run again to show it)."""
        seen = (question["id"], bool(question.get("revealed"))) if question else None
        changed, self.question = seen != self.question, seen
        return changed


def current() -> ClassSession | None:
    """This session's class, or None."""
    return st.session_state.get(KEY)


def say(message: str) -> None:
    """Show ``message`` (one line, plain text) in the class bar of the next run."""
    st.session_state[MESSAGE] = message


def store_error(exc: BaseException) -> str:
    """One line for a store failure."""
    if isinstance(exc, ClassStoreUnavailable):
        return f"The class server does not answer ({error_line(exc)}); retrying."
    return error_line(exc)


def leave(message: str | None = None) -> None:
    """Forget the class in this session and in its link."""
    st.session_state.pop(KEY, None)
    for key in ("class", "teach"):
        if key in st.query_params:
            del st.query_params[key]
    if message:
        say(message)


def sync() -> ClassSession | None:
    """The class this session is in, joining the one its link names (``class``, with ``teach`` for the teacher),
    and keeping ``class`` (and the teacher's ``teach``) in the link, which page changes clear. A code that is
    malformed, unknown or expired: a message and no class."""
    cls, param = current(), st.query_params.get("class")
    if param is not None and (cls is None or valid_code(param) != cls.code):
        cls = _join(param, st.query_params.get("teach"))
    if cls is not None:
        if st.query_params.get("class") != cls.code:
            st.query_params["class"] = cls.code
        if cls.teacher and st.query_params.get("teach") != cls.token:
            st.query_params["teach"] = cls.token
        elif not cls.teacher and "teach" in st.query_params:
            del st.query_params["teach"]
    return cls


def _join(param: str, token: str | None) -> ClassSession | None:
    code = valid_code(param)
    if code is None:
        leave(f"“{plain(param, 40)}” is not a class code (6 letters and digits, e.g. K7QX2M).")
        return None
    try:
        published = class_store().view(code)  # KeyError for an unknown or expired code
    except KeyError:
        leave(f"There is no class {code}: the code is wrong, or the class has ended.")
        return None
    except (ClassStoreUnavailable, OSError, ValueError) as exc:  # ValueError: VIZ_CLASS_STORE is no Redis URL
        say(store_error(exc))
        return None
    cls = ClassSession(code, "teacher" if token else "student", token or None)
    cls.published = published if cls.teacher else None  # a teacher's new session does not publish the same view again
    st.session_state[KEY] = cls
    return cls


def start() -> None:
    """Button callback: start a class with this session as its teacher."""
    try:
        code, token = class_store().create()
    except (ClassStoreUnavailable, OSError, ValueError) as exc:
        say(store_error(exc))
        return
    st.session_state[KEY] = ClassSession(code, "teacher", token)
    st.query_params["class"], st.query_params["teach"] = code, token


def current_page() -> str:
    """The running page's file relative to the app (``"app.py"``, ``"pages/attention.py"``)."""
    ctx = get_script_run_ctx()
    manager = ctx.pages_manager
    info = manager.get_pages().get(manager.current_page_script_hash) or {}
    path = Path(info.get("script_path") or ctx.main_script_path).resolve()
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return path.name
