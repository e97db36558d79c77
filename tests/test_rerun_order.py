"""viz_ui.app.streamlit_patches.fragment_after_stop and .fragment_from_page_left: a fragment's timed rerun that reaches the server just after a script run ended starts
its ScriptRunner after that run's last messages are handled, not before (which made Streamlit drop them); a fragment
rerun asked for on a page the session has left is dropped when timed, else run as a full rerun of the current page
(run as a fragment, on either page, it made the browser blank the new page)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetStates
from streamlit.runtime.app_session import AppSession, AppSessionState
from streamlit.runtime.scriptrunner.script_runner import ScriptRunner
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData, ScriptRequestType

from viz_ui.app import streamlit_patches
from viz_ui.app.streamlit_patches import fragment_after_stop, fragment_from_page_left

POLL = RerunData(fragment_id_queue=["poll"], is_auto_rerun=True)


@pytest.fixture
def calls(monkeypatch):
    """AppSession._create_scriptrunner replaced by a recorder, then patched by install(); restored afterwards."""
    seen: list = []
    monkeypatch.setattr(AppSession, "_create_scriptrunner",
                        lambda self, data: seen.append(("new runner", list(data.fragment_id_queue) or "full")))
    fragment_after_stop.install()
    return seen


def runner(state, seen=None):
    return SimpleNamespace(_requests=SimpleNamespace(_state=state),
                           request_rerun=lambda data: seen.append(("taken", list(data.fragment_id_queue))) or True)


def replay(s, seen, data, after_shutdown=None, shutdown: bool = True):
    """On the session's event loop, in the order Streamlit gets them under load: the browser's rerun request (which
    found the runner stopped), then the messages the runner's thread had queued before it stopped (two elements and
    "finished"), then its shutdown (the session forgets the runner, or gets ``after_shutdown``)."""
    loop = s._event_loop
    loop.call_soon(AppSession._create_scriptrunner, s, data)
    for name in ("element", "element", "finished"):
        loop.call_soon_threadsafe(seen.append, name)
    if shutdown:
        loop.call_soon_threadsafe(lambda: (seen.append("shutdown"), setattr(s, "_scriptrunner", after_shutdown)))
    loop.run_until_complete(asyncio.sleep(0.05))


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_a_fragment_rerun_after_the_runner_stopped_waits_for_its_messages_and_shutdown(calls, loop):
    s = SimpleNamespace(_event_loop=loop, _scriptrunner=runner(ScriptRequestType.STOP))
    replay(s, calls, POLL)
    assert calls == ["element", "element", "finished", "shutdown", ("new runner", ["poll"])]


def test_a_runner_started_meanwhile_takes_the_fragment_rerun(calls, loop):
    s = SimpleNamespace(_event_loop=loop, _scriptrunner=runner(ScriptRequestType.STOP))
    replay(s, calls, POLL, after_shutdown=runner(ScriptRequestType.CONTINUE, calls))
    assert calls == ["element", "element", "finished", "shutdown", ("taken", ["poll"])]


def test_a_timed_rerun_that_waited_does_not_undo_a_change_handled_meanwhile(monkeypatch, loop):
    """The teacher's tick fired (its widget states: head 0), then the teacher picked head 5 (a full rerun, handled
    while the tick waited): the tick reaches the new runner without its old states, so head 5 stands; a click in a
    fragment keeps its states (they are the change)."""
    from streamlit.proto.WidgetStates_pb2 import WidgetStates

    started: list[RerunData] = []
    monkeypatch.setattr(AppSession, "_create_scriptrunner", lambda self, data: started.append(data))
    fragment_after_stop.install()

    def states(head: int) -> WidgetStates:
        w = WidgetStates()
        w.widgets.add(id="head", int_value=head)
        return w

    tick = RerunData(fragment_id_queue=["tick"], is_auto_rerun=True, widget_states=states(0))
    click = RerunData(fragment_id_queue=["answer"], widget_states=states(0))
    for data in (tick, click):
        taken: list[RerunData] = []
        new_runner = SimpleNamespace(_requests=SimpleNamespace(_state=ScriptRequestType.CONTINUE),
                                     request_rerun=lambda d, taken=taken: taken.append(d) or True)
        s = SimpleNamespace(_event_loop=loop, _scriptrunner=runner(ScriptRequestType.STOP))
        loop.call_soon(AppSession._create_scriptrunner, s, data)
        loop.call_soon(setattr, s, "_scriptrunner", new_runner)  # the full rerun for head 5 started it
        loop.run_until_complete(asyncio.sleep(0.05))
        assert len(taken) == 1 and taken[0].fragment_id_queue == data.fragment_id_queue
        assert taken[0].widget_states == (None if data is tick else data.widget_states)
    # the same when the full run already ended and the tick starts a runner of its own
    s = SimpleNamespace(_event_loop=loop, _scriptrunner=runner(ScriptRequestType.STOP))
    loop.call_soon(AppSession._create_scriptrunner, s, tick)
    loop.call_soon(setattr, s, "_scriptrunner", None)
    loop.run_until_complete(asyncio.sleep(0.05))
    assert started[-1].fragment_id_queue == ["tick"] and started[-1].widget_states is None
    started.clear()
    AppSession._create_scriptrunner(SimpleNamespace(_event_loop=loop, _scriptrunner=None), tick)
    assert started == [tick]  # a tick that did not wait is unchanged


def test_full_reruns_and_first_runners_start_at_once(calls, loop):
    replay(SimpleNamespace(_event_loop=loop, _scriptrunner=runner(ScriptRequestType.STOP)), calls, RerunData())
    assert calls[0] == ("new runner", "full")  # Streamlit stops the old run for a full rerun on purpose
    calls.clear()
    replay(SimpleNamespace(_event_loop=loop, _scriptrunner=None), calls, POLL, shutdown=False)
    assert calls[0] == ("new runner", ["poll"])


def test_a_fragment_rerun_is_not_lost_when_the_shutdown_never_comes(calls, loop):
    replay(SimpleNamespace(_event_loop=loop, _scriptrunner=runner(ScriptRequestType.STOP)), calls, POLL,
           shutdown=False)
    assert calls == ["element", "element", "finished", ("new runner", ["poll"])]


def test_a_fragment_rerun_that_waited_is_dropped_when_the_session_shut_down_meanwhile(calls, loop):
    s = SimpleNamespace(_event_loop=loop, _scriptrunner=runner(ScriptRequestType.STOP))
    loop.call_soon_threadsafe(setattr, s, "_state", AppSessionState.SHUTDOWN_REQUESTED)  # the tab closed
    replay(s, calls, POLL)
    assert calls == ["element", "element", "finished", "shutdown"]


def test_the_package_installs_both():
    streamlit_patches.install()  # what every page does first (viz_ui.app.page.open_page; tests/test_streamlit_pin.py)

    assert getattr(AppSession._create_scriptrunner, "_viz_waits", False)
    assert getattr(ScriptRunner._run_script, "_viz_page_left", False)


@pytest.fixture
def runs(monkeypatch):
    """ScriptRunner._run_script replaced by a recorder of the rerun data it gets, then patched by install()."""
    seen: list[RerunData] = []
    monkeypatch.setattr(ScriptRunner, "_run_script", lambda self, data: seen.append(data))
    fragment_from_page_left.install()
    return seen


def session_on(page: str):
    """A stand-in ScriptRunner of a session whose current page is ``page`` (a page script hash)."""
    return SimpleNamespace(_pages_manager=SimpleNamespace(current_page_script_hash=page))


def test_a_timed_fragment_rerun_asked_on_the_page_before_is_not_run(runs):
    stale = RerunData(fragment_id_queue=["poll"], page_script_hash="tokens", page_name="tokens",
                      query_string="class=ABC", is_auto_rerun=True)
    ScriptRunner._run_script(session_on("attention"), stale)  # the poll switched to attention meanwhile
    assert runs == []


def test_another_fragment_rerun_asked_on_the_page_before_reruns_the_current_page(runs):
    states = WidgetStates()
    states.widgets.add(id="answer_box", string_value="L1H3")
    for stale in (RerunData(fragment_id_queue=["bell"], page_script_hash="tokens", page_name="tokens",
                            query_string="class=ABC", widget_states=states),
                  RerunData(fragment_id="answer", page_script_hash="tokens", widget_states=states,
                            is_fragment_scoped_rerun=True)):  # a fragment's own widget (not yet queued) too
        ScriptRunner._run_script(session_on("attention"), stale)
        ran = runs[-1]
        assert (ran.page_script_hash, ran.page_name) == ("attention", "")
        assert not fragment_from_page_left.is_fragment_rerun(ran) and not ran.is_fragment_scoped_rerun  # the whole page
        assert ran.widget_states is states  # the click's values still reach the page
    assert len(runs) == 2


def test_full_reruns_and_fragment_reruns_on_the_current_page_are_unchanged(runs):
    switch = RerunData(page_script_hash="attention", query_string="head=5")
    poll = RerunData(fragment_id_queue=["poll"], page_script_hash="attention", query_string="head=5",
                     is_auto_rerun=True)
    unnamed = RerunData(fragment_id_queue=["poll"], page_script_hash="", is_auto_rerun=True)
    for data, current in ((switch, "tokens"), (poll, "attention"), (unnamed, "attention"), (poll, "")):
        ScriptRunner._run_script(session_on(current), data)
        assert runs[-1] is data


def test_the_current_query_string_goes_with_the_current_page():
    stale = RerunData(fragment_id_queue=["bell"], page_script_hash="tokens", query_string="class=ABC")
    assert fragment_from_page_left.from_page_left(stale, "attention", "head=5&class=ABC").query_string == "head=5&class=ABC"
    assert fragment_from_page_left.from_page_left(stale, "attention", "").query_string == "class=ABC"  # not known: kept
