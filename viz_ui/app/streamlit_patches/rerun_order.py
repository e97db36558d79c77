"""Two fixes for races in Streamlit's order of reruns: a fragment's timed rerun waits for the messages of the run that
just ended, and a fragment rerun asked for on a page the session has left is dropped (a timed one) or becomes a full
rerun of the page the session shows.

**Messages of the run that just ended.**

Streamlit (1.67) runs a session's script in a ScriptRunner thread. The thread hands every message of a run (each
element, then "finished") to the server's event loop with ``call_soon_threadsafe``, and when the run has ended with
no rerun waiting it stops. The event loop also handles the browser's requests. A fragment's timed rerun
(``st.fragment(run_every=...)``: a student's class poll, a training page's live view) that the loop handles after the
thread stopped but before the loop reached the messages the thread had queued makes a new ScriptRunner; the loop
then drops those queued messages as coming from "a non-current ScriptRunner" (``AppSession.
_handle_scriptrunner_event_on_event_loop``). The browser never gets the end of the page, the run's "finished", nor
the fragment's timer registration: the page keeps the last charts of the previous run, and the class poll stops for
good. With 100 students on 3 replicas of 2 cores (bench/class_live.py) this dropped about 900 messages in 6 changes
and left up to 45 students per change without the teacher's view.

:func:`install` makes such a request wait its turn. Where Streamlit would start a new ScriptRunner for a fragment
rerun while the session still holds its stopped one (``AppSession._create_scriptrunner``), the start is put after
what the event loop already has queued (``loop.call_soon``), which includes every message that runner sent, and
again until the loop has handled that runner's shutdown, up to :data:`MAX_WAITS` times; then the request goes to
the runner the session has then (one started meanwhile by a full rerun takes it), or to a new one, without the
widget states a timed rerun carried (:func:`without_stale_states`: older than any request handled meanwhile, they
would undo it). Full reruns are left as they are: Streamlit stops the running script for them on purpose
(``runner.fastReruns``), and the full run that follows redraws the whole page.

**A fragment rerun from the page before.** A browser's fragment rerun request names the page the browser shows. When
it reaches the server while the script switches page (a student's class poll, itself a fragment run, applies the
teacher's view with ``st.switch_page``), Streamlit queues it and runs it just after the new page's full run. Run on
the page the request named, the session's page went back to the old one for that fragment run, and the browser,
told by the run's ``new_session`` that the page changed, cleared the new page's elements, then got the fragment's
elements at their place in the new page and threw ("Bad delta path index 2 (should be between [0, 0])"): a blank
page (tests/test_class_browser.py, 2 runs in 5 when students followed fast). Run on the current page instead, it
still threw under CPU load ("Bad delta path index 3 (should be between [0, 2])"; 3 of 6 such runs in 40 page
changes, 2026-11-28): its ``new_session`` reaches the browser a few milliseconds after the full run's, and Streamlit's
frontend compares the fragment run's page with the page it holds in React state, which a busy browser has not yet
updated from the full run's message; it then clears the page it has just been sent, mid-way.

So :func:`install` makes ``ScriptRunner._run_script`` never run a fragment on a page the session has left
(:func:`from_page_left`): a timed rerun (a poll's timer) is dropped, since it brings no change of its own and the
new page's full run has just run the same fragment inline (and registered its timer again); any other (the class
bell's ring, a click in a fragment: its widget states may be a change) becomes a full rerun of the current page
with the current query string, which the browser draws from an empty page whatever page it thinks it shows.
"""

from __future__ import annotations

from dataclasses import replace

from streamlit.runtime.app_session import AppSession, AppSessionState
from streamlit.runtime.scriptrunner.script_runner import ScriptRunner
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData, ScriptRequestType

MAX_WAITS = 100  # turns of the event loop a fragment rerun waits for a stopped runner's shutdown (each is short)


def stopped(runner: object) -> bool:
    """Whether ``runner`` (a ScriptRunner) has stopped: it accepts no more requests. False for None, or when this
    Streamlit's internals differ from the ones this was written for (then nothing waits)."""
    requests = getattr(runner, "_requests", None)
    return getattr(requests, "_state", None) == ScriptRequestType.STOP


def is_fragment_rerun(rerun_data: RerunData) -> bool:
    """Whether ``rerun_data`` reruns fragments only (not the whole page)."""
    return bool(rerun_data.fragment_id or rerun_data.fragment_id_queue)


def from_page_left(rerun_data: RerunData, current_page: str, current_query: str = "") -> RerunData | None:
    """``rerun_data`` to run now in a session showing ``current_page`` (a page script hash, "" before the first run)
    with the query string ``current_query`` ("" when not known). A fragment rerun that names another page: None (not
    run) when it is a timed rerun (``is_auto_rerun``), else a full rerun of the current page (no page name, no
    fragments, the current query string when known, the request's widget states). Anything else is unchanged."""
    if is_fragment_rerun(rerun_data) and current_page and rerun_data.page_script_hash not in ("", current_page):
        if rerun_data.is_auto_rerun:
            return None
        return replace(rerun_data, page_script_hash=current_page, page_name="", fragment_id=None,
                       fragment_id_queue=[], is_fragment_scoped_rerun=False,
                       query_string=current_query or rerun_data.query_string)
    return rerun_data


def without_stale_states(rerun_data: RerunData) -> RerunData:
    """``rerun_data`` of a fragment's timed rerun (``is_auto_rerun``) without its widget states, once it has waited
    for its turn: they are the browser's snapshot of every widget when the timer fired, and a request handled while
    it waited (a select changed meanwhile: a full rerun) has newer ones. Streamlit's coalescing lets the later
    request's values win, and the timed rerun, handed on after the newer one, would take the page back to the old
    values (a head picked while a teacher's tick waited would be undone). A timed rerun brings no change of its own,
    so the session's values stand. Any other rerun (a click in a fragment: its values are the change) is unchanged."""
    if rerun_data.is_auto_rerun and is_fragment_rerun(rerun_data) and rerun_data.widget_states is not None:
        return replace(rerun_data, widget_states=None)
    return rerun_data


def install() -> None:
    """Patch ``AppSession._create_scriptrunner`` and ``ScriptRunner._run_script`` once per process (later calls do
    nothing)."""
    _install_page_left_check()
    if getattr(AppSession._create_scriptrunner, "_viz_waits", False):
        return
    original = AppSession._create_scriptrunner

    def create_scriptrunner(self: AppSession, initial_rerun_data: RerunData, _waited: int = 0) -> None:
        fragment = is_fragment_rerun(initial_rerun_data)
        if _waited and getattr(self, "_state", None) == AppSessionState.SHUTDOWN_REQUESTED:
            return None  # the browser left while this request waited: Streamlit discards requests then
        if _waited == 1:
            initial_rerun_data = without_stale_states(initial_rerun_data)
        old = self._scriptrunner
        if fragment and old is not None and _waited < MAX_WAITS and stopped(old):
            self._event_loop.call_soon(lambda: create_scriptrunner(self, initial_rerun_data, _waited + 1))
            return None
        if fragment and _waited and old is not None and not stopped(old) and old.request_rerun(initial_rerun_data):
            return None  # a runner started meanwhile (a full rerun) took the request
        return original(self, initial_rerun_data)

    create_scriptrunner._viz_waits = True
    create_scriptrunner.__doc__ = original.__doc__
    AppSession._create_scriptrunner = create_scriptrunner


def _install_page_left_check() -> None:
    if getattr(ScriptRunner._run_script, "_viz_page_left", False):
        return
    original = ScriptRunner._run_script

    def run_script(self: ScriptRunner, rerun_data: RerunData) -> None:
        pages = getattr(self, "_pages_manager", None)  # None where this Streamlit's internals differ: unchanged
        current = getattr(pages, "current_page_script_hash", "") or ""
        ctx = get_script_run_ctx(suppress_warning=True)  # this runner's thread: the last run's query string, or ""
        data = from_page_left(rerun_data, current, getattr(ctx, "query_string", "") or "")
        return None if data is None else original(self, data)

    run_script._viz_page_left = True
    run_script.__doc__ = original.__doc__
    ScriptRunner._run_script = run_script
