"""A fragment rerun that finds the session's ScriptRunner stopped waits until that runner's messages are sent.

**Problem.** Streamlit runs a session's script in a ScriptRunner thread. The thread hands every message of a run
(each element, then "finished") to the server's event loop with ``call_soon_threadsafe``, and when the run has ended
with no rerun waiting it stops. The event loop also handles the browser's requests. A fragment's timed rerun
(``st.fragment(run_every=...)``: a student's class poll, a training page's live view) that the loop handles after the
thread stopped but before the loop reached the messages the thread had queued makes a new ScriptRunner
(``AppSession._create_scriptrunner``); the loop then drops those queued messages as coming from "a non-current
ScriptRunner" (``AppSession._handle_scriptrunner_event_on_event_loop``). The browser never gets the end of the page,
the run's "finished", nor the fragment's timer registration: the page keeps the last charts of the previous run, and
the class poll stops for good. With 100 students on 3 replicas of 2 cores (``bench/class_live.py``, 2026-11-27) this
dropped about 900 messages in 6 changes and left up to 45 students per change without the teacher's view.

**Fix.** :func:`install` wraps ``AppSession._create_scriptrunner``: a fragment rerun that finds the session still
holding its stopped runner is put after what the event loop already has queued (``loop.call_soon``), which includes
every message that runner sent, and again until the loop has handled that runner's shutdown, up to
:data:`MAX_WAITS` times; then the request goes to the runner the session has then (one started meanwhile by a full
rerun takes it), or to a new one, without the widget states a timed rerun carried (:func:`without_stale_states`:
older than any request handled meanwhile, they would undo it). A request that waited while the browser left is
dropped, as Streamlit drops requests to a closed session. Full reruns are left as they are: Streamlit stops the
running script for them on purpose (``runner.fastReruns``), and the full run that follows redraws the whole page.
The same run of ``bench/class_live.py`` then logged 0 dropped page messages.

**Checked on** Streamlit 1.67.0 (``tests/test_rerun_order.py``; ``tests/test_class_browser.py``; the class bench).

**Upstream.** No issue or pull request for this race was found in Streamlit's tracker. Closest:
https://github.com/streamlit/streamlit/pull/8599 (merged in 2024: lifecycle messages dropped when ``st.rerun``
restarts a script) and https://github.com/streamlit/streamlit/pull/8298 (fragment reruns queued behind the running
script instead of interrupting it; this case arrives after the script ended). An upstream issue would ask that
``AppSession`` not start a new ScriptRunner for a fragment rerun, or not drop the messages of a runner that stopped
normally, until the event loop has handled what that runner queued.

**Remove when** Streamlit delivers a stopped runner's queued messages before a fragment rerun's new runner starts:
delete this module and its line in ``PATCHES`` (``__init__.py``), then run ``tests/test_class_browser.py`` and
``bench/class_live.py`` with 100 students: every student must follow every change.
"""

from __future__ import annotations

from dataclasses import replace

from streamlit.runtime.app_session import AppSession, AppSessionState
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData, ScriptRequestType

from viz_ui.app.streamlit_patches import targets

MAX_WAITS = 100  # turns of the event loop a fragment rerun waits for a stopped runner's shutdown (each is short)
TARGET = "streamlit.runtime.app_session.AppSession._create_scriptrunner"


def problems() -> list[str]:
    """What of Streamlit's internals this patch replaces or reads is missing or changed (empty: all found)."""
    return (targets.missing([TARGET, "streamlit.runtime.app_session.AppSessionState.SHUTDOWN_REQUESTED",
                             "streamlit.runtime.scriptrunner_utils.script_requests.ScriptRequestType.STOP",
                             "streamlit.runtime.scriptrunner.script_runner.ScriptRunner.request_rerun"])
            + targets.parameters_differ(TARGET, ["self", "initial_rerun_data"])
            + targets.not_in_source("streamlit.runtime.app_session.AppSession",
                                    ["self._scriptrunner", "self._event_loop", "self._state"])
            + targets.not_in_source("streamlit.runtime.scriptrunner.script_runner.ScriptRunner", ["self._requests"])
            + targets.not_in_source("streamlit.runtime.scriptrunner_utils.script_requests.ScriptRequests",
                                    ["self._state"])
            + targets.fields_missing("streamlit.runtime.scriptrunner_utils.script_requests.RerunData",
                                     ["fragment_id", "fragment_id_queue", "is_auto_rerun", "widget_states"]))


def stopped(runner: object) -> bool:
    """Whether ``runner`` (a ScriptRunner) has stopped: it accepts no more requests. False for None."""
    requests = getattr(runner, "_requests", None)
    return getattr(requests, "_state", None) == ScriptRequestType.STOP


def is_fragment_rerun(rerun_data: RerunData) -> bool:
    """Whether ``rerun_data`` reruns fragments only (not the whole page)."""
    return bool(rerun_data.fragment_id or rerun_data.fragment_id_queue)


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


def installed() -> bool:
    """Whether ``AppSession._create_scriptrunner`` is this module's."""
    return getattr(AppSession._create_scriptrunner, "_viz_waits", False)


def install() -> None:
    """Wrap ``AppSession._create_scriptrunner`` once per process (later calls do nothing)."""
    if installed():
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
    create_scriptrunner.__wrapped__ = original  # the checks in problems() read Streamlit's own source through it
    AppSession._create_scriptrunner = create_scriptrunner
