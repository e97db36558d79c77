"""Turns for the runs that show a class's new view (viz_ui/classroom/turns.py)."""

import threading
import time

import pytest

from viz_ui.classroom import turns


@pytest.fixture
def one_turn(monkeypatch):
    monkeypatch.setattr(turns, "FOLLOW_RUNS", 1)
    monkeypatch.setattr(turns, "_TURNS", threading.BoundedSemaphore(1))
    monkeypatch.setattr(turns, "_HOLDERS", set())


def run(events: list, name: str, hold_s: float, again: bool = False) -> threading.Thread:
    """A script run in its own thread: takes a turn (twice when ``again``, as a run that reruns itself), works."""
    def body():
        events.append((name, "asks", time.monotonic()))
        assert turns.take_turn()
        if again:
            assert turns.take_turn()  # the same thread: no wait for its own turn
        events.append((name, "runs", time.monotonic()))
        time.sleep(hold_s)
        events.append((name, "ends", time.monotonic()))
    thread = threading.Thread(target=body)
    thread.start()
    return thread


def test_runs_take_turns_and_a_turn_comes_back_when_its_thread_ends(one_turn):
    events = []
    first = run(events, "a", 0.4, again=True)
    time.sleep(0.1)
    assert turns.held() == 1
    second = run(events, "b", 0.1)
    first.join()
    second.join()
    time.sleep(0.1)
    assert turns.held() == 0
    at = {(name, what): t for name, what, t in events}
    assert at["b", "asks"] < at["a", "ends"] <= at["b", "runs"]  # b waited for a's thread to end
    assert at["b", "runs"] - at["a", "ends"] < 0.2


def test_a_run_that_waits_too_long_goes_on_without_a_turn(one_turn, monkeypatch):
    monkeypatch.setattr(turns, "WAIT_S", 0.2)
    events, results = [], []
    holder = run(events, "a", 1.0)
    time.sleep(0.1)
    waiter = threading.Thread(target=lambda: results.append((turns.take_turn(), time.monotonic())))
    t = time.monotonic()
    waiter.start()
    waiter.join()
    assert results[0][0] is False and 0.15 < results[0][1] - t < 0.6
    holder.join()
    time.sleep(0.1)
    assert turns.held() == 0


def test_the_setting_is_read_within_bounds(monkeypatch):
    for value, expected in [("3", 3), ("0", 1), ("65", 1), ("many", 1), ("64", 64)]:
        monkeypatch.setenv("VIZ_CLASS_FOLLOW_RUNS", value)
        assert turns._follow_runs() == expected
