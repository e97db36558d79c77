"""A student follows the teacher: a banner with Stop following / Catch up, and a tiny poll.

The poll is a fragment rerun: it asks the store three cheap questions (the view's version, a heartbeat, the current
question) and draws nothing visible, unless the store did not answer (one line). Only when the teacher's view
changed (and the student follows), or a question was asked or revealed, does it rerun the page. 100–300 students
poll one server, so it does no model work.

When the app is served with its news route (``streamlit run serve.py``, :mod:`viz_ui.classroom.news`), the poll
draws the class bell (:mod:`viz_ui.classroom.bell`), which reruns it as soon as the class's news changes, and its
own timer runs every :data:`HEARTBEAT_SECONDS` (the followers' heartbeat, and a safety net); otherwise the browser
reruns it every :data:`POLL_SECONDS`.
"""

from __future__ import annotations

import os
import time

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from viz_ui.app.navigation import PAGES
from viz_ui.classroom import ClassStoreUnavailable, class_store, news
from viz_ui.classroom.bell import bell
from viz_ui.classroom.session import ClassSession, current, current_page, leave
from viz_ui.classroom.turns import take_turn
from viz_ui.classroom.view import keys_to_reset, student_params


def _poll_seconds(default: float = 1.0) -> float:
    """``VIZ_CLASS_POLL_SECONDS`` (0.25–10, read at start-up): how often a student's screen asks the class for news;
    a longer period costs the server less (each poll is a fragment rerun) and the students wait longer."""
    try:
        value = float(os.environ.get("VIZ_CLASS_POLL_SECONDS", default))
    except ValueError:
        return default
    return value if 0.25 <= value <= 10 else default


POLL_SECONDS = _poll_seconds()
# with the bell: the poll's own period; below the store's FOLLOW_WINDOW_S (10 s), so that one heartbeat may be late
HEARTBEAT_SECONDS = 4.0
OFFLINE = ":material/cloud_off: The class server did not answer the last check; retrying."


def student_bar(cls: ClassSession) -> None:
    """The banner of a student's screen (call on every full run): following or exploring, and the poll."""
    bar = st.container(horizontal=True, vertical_alignment="center", gap="medium")
    if cls.following:
        bar.markdown(f":material/cast_for_education: **Following class {cls.code}**: this screen shows the "
                     "teacher's view.", width="content")
        bar.button("Stop following", key="class_stop", on_click=_set_following, args=(False,),
                   icon=":material/explore:", help="Explore on your own; Catch up rejoins the teacher.")
    else:
        bar.markdown(f":material/explore: **Exploring on your own** (class {cls.code}): Catch up shows the "
                     "teacher's view again.", width="content")
        bar.button("Catch up", key="class_catch_up", type="primary", on_click=_set_following, args=(True,),
                   icon=":material/cast_for_education:")
    if news.ENABLED:
        _poll_with_bell()
    else:
        _poll()


MAX_ATTEMPTS = 3  # times one view is applied again when its page or link did not arrive


def check_applied() -> None:
    """At the start of a student's full run after a view was applied (call before any widget writes to the link):
    when this run shows another page, or a link without the view's parameters, the rerun that would have shown the
    view was lost (the browser's poll asked for a rerun of the old page with the old link while it was pending, and
    Streamlit kept the newer request's page and query string): the view is applied again in this run's poll, up to
    :data:`MAX_ATTEMPTS` times."""
    cls = current()
    if cls is None or cls.teacher or cls.expect is None:
        return
    take_turn()  # one of a few runs at once on this server that show the class a new view (viz_ui.classroom.turns)
    page, link = cls.expect
    shown = st.query_params.to_dict()
    cls.waited = 0  # a full run came
    if page == current_page() and all(shown.get(key) == value for key, value in link.items()):
        cls.expect, cls.attempts = None, 0
    elif not cls.following or cls.attempts >= MAX_ATTEMPTS:
        cls.expect, cls.attempts = None, 0  # given up: the student's Catch up applies the view again
    else:
        cls.version = 0  # not shown: this run's poll applies the latest view again


def _set_following(following: bool) -> None:
    cls = current()
    if cls is None:
        return
    cls.following = following
    if following:
        cls.version = -1  # apply the teacher's latest view in this run's poll, whatever its version
    try:
        class_store().follow(cls.code, cls.student_id, following)
        cls.beat = time.monotonic()
    except (KeyError, ClassStoreUnavailable, OSError):
        pass  # the next poll says it


@st.fragment(run_every=POLL_SECONDS)
def _poll() -> None:
    """One poll (runs inline in each full run, then every POLL_SECONDS on its own)."""
    poll()


@st.fragment(run_every=HEARTBEAT_SECONDS)
def _poll_with_bell() -> None:
    """One poll (runs inline in each full run, then when the bell rings or every HEARTBEAT_SECONDS on its own)."""
    poll(with_bell=True)


def poll(with_bell: bool = False) -> None:
    """Ask the store for the class's news: apply a new view (following), rerun the page for a new or revealed
    question, leave an ended class; ``with_bell``: then draw the bell with the news this screen shows."""
    cls = current()
    if cls is None or cls.teacher:
        return
    try:
        store = class_store()
        version, question = _news(cls, store, reuse=with_bell and not _fragment_run() and cls.version >= 0)
    except KeyError:
        leave(f"Class {cls.code} has ended.")
        st.rerun()
    except (ClassStoreUnavailable, OSError, ValueError):
        # said by the poll itself, which redraws only itself: a store that stops answering (Redis restarting) costs
        # no page run, and the next poll that gets an answer draws nothing, so the line goes away
        st.caption(OFFLINE)
        if with_bell:
            bell(cls.code, "", cls.following)  # any news rings it once the store answers again
        return
    if cls.following and version != cls.version and version > 0:
        take_turn()  # this thread runs the page next (viz_ui.classroom.turns)
        apply_view(cls, store.view(cls.code), version)
    elif rerun_overdue(cls):
        st.rerun()
    if cls.question_changed(question):
        take_turn()
        st.rerun()  # the page's question area draws it
    if with_bell:
        bell(cls.code, news.news_string(version, question), cls.following)


FRESH_S = 1.0  # a full run's poll reuses the store's answers of a poll this recent (the bell rings for anything newer)


def _fragment_run() -> bool:
    """Whether this run is a fragment's own rerun (the bell's, the timer's), not a full run of the page."""
    ctx = get_script_run_ctx()
    return bool(ctx is not None and ctx.fragment_ids_this_run)


def _news(cls: ClassSession, store, reuse: bool) -> tuple[int, dict | None]:
    """The class's view version and current question, from the store; ``reuse``: from the last poll's answers when
    they are under :data:`FRESH_S` old (the full run that a poll's applied view asked for: its news came with the
    bell, which rings again for anything newer). Sends the heartbeat at most every half :data:`HEARTBEAT_SECONDS`
    (every poll without the bell: its period is shorter than the heartbeat's). Raises as the store does."""
    now = time.monotonic()
    if reuse and cls.polled is not None and now - cls.polled[0] < FRESH_S:
        return cls.polled[1], cls.polled[2]
    version = store.version(cls.code)
    if now - cls.beat >= HEARTBEAT_SECONDS / 2 or not news.ENABLED:
        store.follow(cls.code, cls.student_id, cls.following)
        cls.beat = now
    question = store.question(cls.code)
    cls.polled = (now, version, question)
    return version, question


WAIT_POLLS = 2  # polls a student waits for the full run an applied view asked for before asking again


def rerun_overdue(cls: ClassSession) -> bool:
    """Called by each poll that applies no view: True (ask for a full run again, counted as an attempt) when a view
    was applied and :data:`WAIT_POLLS` polls passed without a full run, up to :data:`MAX_ATTEMPTS` attempts: a
    safety net for a full run that never reaches the browser, which :func:`check_applied` (at the start of a full run)
    cannot see. Most such losses under load were a race in Streamlit, fixed by
    :mod:`viz_ui.app.streamlit_patches.fragment_after_stop`."""
    if cls.teacher or not cls.following or cls.expect is None:
        return False
    cls.waited += 1
    if cls.waited <= WAIT_POLLS:
        return False
    cls.waited = 0
    if cls.attempts >= MAX_ATTEMPTS:
        cls.expect, cls.attempts = None, 0  # given up: the student's Catch up applies the view again
        return False
    cls.attempts += 1
    return True


def apply_view(cls: ClassSession, view: object, version: int) -> None:
    """Show the teacher's ``view`` as opening its link would: forget the shared values it and the previous view
    name, give the session the view's parameters as its link, then switch to the view's page or rerun this one.
    A view that is not a dict of strings is ignored (the version is still marked seen). The page and link it should
    show are checked at the next full run (:func:`_check_applied`)."""
    cls.attempts = cls.attempts + 1 if cls.expect is not None else 1
    cls.version, cls.waited = version, 0
    if not isinstance(view, dict) or not isinstance(view.get("params"), dict):
        cls.expect, cls.attempts = None, 0
        return
    params = {str(k): str(v) for k, v in view["params"].items() if isinstance(v, (str, int, float))}
    own = st.query_params.to_dict()
    state = st.session_state
    for key in keys_to_reset(cls.applied, params, own, state.get("_link", {})):
        state.pop("_" + key, None)
    state["_link"] = params  # the link a later page reads values from (layout._shared)
    cls.applied = params
    link = student_params(params, own, cls.code)
    page = view.get("page")
    known = page in {p for p, _, _ in PAGES}
    cls.expect = (page if known else current_page(), link)
    if known and page != current_page():
        st.switch_page(page, query_params=link)
    st.query_params.from_dict(link)
    st.rerun()
