"""A fragment's timed rerun waits for the messages of the run that just ended (a fix for a race in Streamlit).

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
the runner the session has then (one started meanwhile by a full rerun takes it), or to a new one. Full reruns are
left as they are: Streamlit stops the running script for them on purpose (``runner.fastReruns``), and the full run
that follows redraws the whole page.
"""

from __future__ import annotations

from streamlit.runtime.app_session import AppSession, AppSessionState
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData, ScriptRequestType

MAX_WAITS = 100  # turns of the event loop a fragment rerun waits for a stopped runner's shutdown (each is short)


def stopped(runner: object) -> bool:
    """Whether ``runner`` (a ScriptRunner) has stopped: it accepts no more requests. False for None, or when this
    Streamlit's internals differ from the ones this was written for (then nothing waits)."""
    requests = getattr(runner, "_requests", None)
    return getattr(requests, "_state", None) == ScriptRequestType.STOP


def install() -> None:
    """Patch ``AppSession._create_scriptrunner`` once per process (later calls do nothing)."""
    if getattr(AppSession._create_scriptrunner, "_viz_waits", False):
        return
    original = AppSession._create_scriptrunner

    def create_scriptrunner(self: AppSession, initial_rerun_data: RerunData, _waited: int = 0) -> None:
        fragment = bool(initial_rerun_data.fragment_id or initial_rerun_data.fragment_id_queue)
        if _waited and getattr(self, "_state", None) == AppSessionState.SHUTDOWN_REQUESTED:
            return None  # the browser left while this request waited: Streamlit discards requests then
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
