"""The server's class watch (viz_ui/classroom/watch.py): which students it wakes, and when; both store back ends.
A real server and browser, with the students' own polls slowed to 10 s, are in test_class_browser.py."""

import pytest

import viz_ui.classroom.watch as watch
from viz_ui.classroom import ClassStoreUnavailable, MemoryClassStore, RedisClassStore

QUESTION = {"kind": "choice", "prompt": "Which head is the induction head?", "choices": ["L0H1", "L1H5"]}
VIEW = {"page": "pages/attention.py", "params": {"head": "2"}}


@pytest.fixture(params=["memory", "redis"])
def store(request):
    if request.param == "memory":
        return MemoryClassStore()
    return RedisClassStore(request.getfixturevalue("redis_server").url)


def watcher(store):
    woken = []
    w = watch.Watcher(store=lambda: store, wake=woken.append)
    w.thread = object()  # no thread: the test runs each round itself
    return w, woken


def test_followers_are_woken_for_a_new_view_and_every_student_for_a_question(store):
    code, token = store.create()
    other, other_token = store.create()
    w, woken = watcher(store)
    w.register(code, "s1", True)
    w.register(code, "s2", True)
    w.register(code, "explorer", False)  # stopped following: a new view is not for this screen
    w.register(other, "s4", True)
    assert w.check() == 0 and woken == []  # a class seen for the first time: nothing to compare with
    store.publish(code, token, VIEW)
    assert w.check() == 2 and sorted(woken) == ["s1", "s2"]
    woken.clear()
    assert w.check() == 0 and woken == []  # unchanged
    qid = store.ask(code, token, QUESTION)
    assert w.check() == 3 and sorted(woken) == ["explorer", "s1", "s2"]  # a question is for every screen
    store.answer(code, qid, "student-1", "L1H5")  # an answer is no news for the other screens
    assert w.check() == 0 and len(woken) == 3
    store.reveal(code, token, qid)
    assert w.check() == 3 and len(woken) == 6
    store.publish(other, other_token, VIEW)
    woken.clear()
    assert w.check() == 1 and woken == ["s4"]
    w.register(code, "explorer", True)  # Catch up: followed again
    store.publish(code, token, {"page": "pages/tokens.py", "params": {}})
    woken.clear()
    assert w.check() == 3 and sorted(woken) == ["explorer", "s1", "s2"]


def test_a_class_that_ends_wakes_its_students_and_a_silent_store_wakes_nobody(store, monkeypatch):
    code, token = store.create()
    w, woken = watcher(store)
    w.register(code, "s1", True)
    w.register(code, "explorer", False)
    w.check()

    def down(code):
        raise ClassStoreUnavailable("Redis is restarting")
    monkeypatch.setattr(store, "version", down)
    store.publish(code, token, VIEW)
    assert w.check() == 0 and woken == []  # the store did not answer: nothing known, nothing woken
    monkeypatch.undo()
    assert w.check() == 1 and woken == ["s1"]  # answered again: the change made meanwhile wakes the follower
    store.close(code, token)
    assert w.check() == 2 and sorted(woken[1:]) == ["explorer", "s1"]  # ended: each poll says so and leaves


def test_a_student_whose_poll_stops_is_forgotten_and_a_new_class_moves_it(store, monkeypatch):
    code, token = store.create()
    other, _ = store.create()
    w, woken = watcher(store)
    clock = [1000.0]
    monkeypatch.setattr(watch.time, "monotonic", lambda: clock[0])
    w.register(code, "s1", True)
    w.register(code, "s2", True)
    w.check()
    clock[0] += watch.FORGET_SECONDS / 2
    w.register(code, "s2", True)  # s2 polled again
    clock[0] += watch.FORGET_SECONDS / 2 + 1
    store.publish(code, token, VIEW)
    assert w.check() == 1 and woken == ["s2"] and set(w.students) == {"s2"}
    w.register(other, "s2", True)  # joined another class: no longer woken for the first
    store.publish(code, token, {"page": "pages/tokens.py", "params": {}})
    assert w.check() == 0 and code not in w.seen


def test_waking_a_session_this_server_does_not_have_forgets_it(monkeypatch):
    forgotten = []
    monkeypatch.setattr(watch, "_session", lambda sid: None)
    monkeypatch.setattr(watch.WATCHER, "forget", forgotten.append)
    watch.wake("gone")
    assert forgotten == ["gone"]
