"""Issue 25: the class store's API on both back ends (in-process, and a real Redis from Debian's package):
permissions, expiry, bounds, hostile values, one answer per student, followers, a Redis restart."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis

from viz_ui.classroom import ClassStoreUnavailable, MemoryClassStore, RedisClassStore, class_store
from viz_ui.classroom import redis_store, store as store_module
from viz_ui.classroom.store import CLASS_TTL_S, CODE_ALPHABET, CODE_LENGTH, FOLLOW_WINDOW_S

QUESTION = {"kind": "next_token", "prompt": "Which token comes next?", "context": {"text": "Once upon a"}}
CHOICE = {"kind": "choice", "prompt": "Which head is the induction head?", "choices": ["L0H1", "L1H5", "L1H6"]}


@pytest.fixture(params=["memory", "redis"])
def store(request):
    if request.param == "memory":
        return MemoryClassStore()
    server = request.getfixturevalue("redis_server")
    redis.Redis.from_url(server.url).flushdb()
    return RedisClassStore(server.url)


@pytest.fixture
def klass(store):
    code, token = store.create()
    return store, code, token


def test_create_gives_a_readable_code_and_a_secret_token(store):
    codes = {store.create() for _ in range(20)}
    assert len({c for c, _ in codes}) == 20 and len({t for _, t in codes}) == 20
    for code, token in codes:
        assert len(code) == CODE_LENGTH and set(code) <= set(CODE_ALPHABET)
        assert len(token) >= 20 and token not in code
        assert CLASS_TTL_S - 60 <= store.ttl(code) <= CLASS_TTL_S == 86_400
        assert store.view(code) is None and store.version(code) == 0 and store.question(code) is None
        assert store.followers(code) == 0


def test_publish_and_read_the_view(klass):
    store, code, token = klass
    view = {"page": "/attention", "params": {"text": "Once upon a time", "layer": "2", "head": "5"}}
    assert store.publish(code, token, view) == 1
    assert store.view(code) == view and store.version(code) == 1
    assert store.view(code.lower()) == view  # a code typed in lower case
    view2 = {"page": "/output", "params": {"temperature": "0.7", "text": "ünïcödé ✓ 日本 🙂"}}
    assert store.publish(code, token, view2) == 2
    assert store.view(code) == view2 and store.version(code) == 2


def test_only_the_teacher_publishes_asks_reveals_and_closes(klass):
    store, code, token = klass
    other_code, other_token = store.create()
    qid = store.ask(code, token, QUESTION)
    for wrong in (None, "", "x", other_token, token + "x", 12345, code):
        with pytest.raises(PermissionError, match="teacher"):
            store.publish(code, wrong, {"page": "/"})
        with pytest.raises(PermissionError):
            store.ask(code, wrong, QUESTION)
        with pytest.raises(PermissionError):
            store.reveal(code, wrong, qid)
        with pytest.raises(PermissionError):
            store.close(code, wrong)
    assert store.view(code) is None and store.question(code)["id"] == qid and not store.question(code)["revealed"]
    store.answer(code, qid, "student-1", "time")  # the code alone lets a student answer …
    assert store.tally(code, qid) == {"time": 1}  # … and read the tally


def test_an_unknown_code_is_a_key_error_everywhere(store):
    code, token = store.create()
    for bad in ("ZZZZZZ", "", "0O1I00", "A" * 7, 12, None, "A" * 1_000_000, "<b>x</b>"):
        for call in (lambda c: store.view(c), lambda c: store.version(c), lambda c: store.question(c),
                     lambda c: store.followers(c), lambda c: store.ttl(c), lambda c: store.follow(c, "s1"),
                     lambda c: store.answer(c, "1", "s1", "a"), lambda c: store.tally(c, "1"),
                     lambda c: store.publish(c, token, {}), lambda c: store.ask(c, token, QUESTION)):
            with pytest.raises(KeyError):
                call(bad)


def test_bounds_and_hostile_values(klass):
    store, code, token = klass
    with pytest.raises(TypeError):
        store.publish(code, token, ["not", "a", "dict"])
    for hostile in ({"x": {1, 2}}, {"x": object()}, {"x": float("nan")}, {"x": b"bytes"}):
        with pytest.raises(TypeError):
            store.publish(code, token, hostile)
    with pytest.raises(ValueError, match="64 KB"):
        store.publish(code, token, {"text": "a" * (64 * 1024)})
    store.publish(code, token, {"text": "a" * (60 * 1024)})  # just under the bound
    assert store.version(code) == 1
    qid = store.ask(code, token, QUESTION)
    with pytest.raises(ValueError, match="200 characters"):
        store.answer(code, qid, "s1", "a" * 201)
    for bad in (None, 3, ["a"], {"a": 1}):
        with pytest.raises(TypeError):
            store.answer(code, qid, "s1", bad)
    with pytest.raises(ValueError):
        store.answer(code, qid, "s1", "   ")
    with pytest.raises(ValueError, match="unknown question"):
        store.answer(code, "999", "s1", "a")
    with pytest.raises((TypeError, ValueError)):
        store.answer(code, qid, "s" * 65, "a")  # student ids are bounded too
    markup = "<script>alert(1)</script> **bold** ![x](x.png)"
    store.answer(code, qid, "s1", markup)  # kept verbatim: the UI shows it as plain text
    assert store.tally(code, qid) == {markup: 1}
    for bad in ({"kind": "essay", "prompt": "?"}, {"kind": "next_token", "prompt": ""},
                {"kind": "next_token", "prompt": "?" * 501}, {"kind": "choice", "prompt": "?", "choices": ["a"]},
                {"kind": "choice", "prompt": "?", "choices": ["a", "a"]},
                {"kind": "choice", "prompt": "?", "choices": [str(i) for i in range(13)]},
                {"kind": "choice", "prompt": "?", "choices": ["a", "b" * 201]},
                {"kind": "next_token", "prompt": "?", "context": "x" * 17_000}):
        with pytest.raises((TypeError, ValueError)):
            store.ask(code, token, bad)
    with pytest.raises(TypeError):
        store.ask(code, token, "which token?")


def test_one_answer_per_student_and_the_tally(klass):
    store, code, token = klass
    qid = store.ask(code, token, QUESTION)
    for student, value in [("s1", " time"), ("s2", " time"), ("s3", " day"), ("s1", " day")]:
        store.answer(code, qid, student, value)
    assert store.tally(code, qid) == {" time": 1, " day": 2}  # s1's second answer replaced the first
    mc = store.ask(code, token, CHOICE)
    assert mc != qid and store.question(code) == {"id": mc, **CHOICE, "revealed": False}
    with pytest.raises(ValueError, match="not one of"):
        store.answer(code, mc, "s1", "L2H0")
    store.answer(code, mc, "s1", "L1H5")
    store.answer(code, mc, "s2", "L1H5")
    assert store.tally(code, mc) == {"L1H5": 2} and store.tally(code, qid) == {" time": 1, " day": 2}
    store.reveal(code, token, mc)
    assert store.question(code)["revealed"] is True
    with pytest.raises(ValueError):
        store.reveal(code, token, "nope")


def test_a_class_asks_at_most_200_questions(klass):
    store, code, token = klass
    ids = [store.ask(code, token, {"kind": "next_token", "prompt": f"q{i}"}) for i in range(200)]
    assert len(set(ids)) == 200
    with pytest.raises(ValueError, match="200 questions"):
        store.ask(code, token, QUESTION)
    assert store.question(code)["prompt"] == "q199"


def test_a_class_holds_at_most_2000_students(klass):
    store, code, token = klass
    qid = store.ask(code, token, QUESTION)
    for i in range(2_000):
        store.follow(code, f"s{i}", following=i % 2 == 0)
    with pytest.raises(ValueError, match="2,000 students"):
        store.follow(code, "one-too-many")
    with pytest.raises(ValueError, match="2,000 students"):
        store.answer(code, qid, "one-too-many", "a")
    store.answer(code, qid, "s7", "a")  # a student already in the class still answers
    assert store.followers(code) == 1_000


def test_admission_is_atomic_under_concurrency(klass, monkeypatch):
    store, code, token = klass
    for module in (store_module, redis_store, __import__("viz_ui.classroom.memory_store", fromlist=["x"])):
        monkeypatch.setattr(module, "MAX_STUDENTS", 5, raising=False)
    errors = []

    def join(i):
        try:
            store.follow(code, f"s{i}")
        except ValueError:
            errors.append(i)

    threads = [threading.Thread(target=join, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.followers(code) == 5 and len(errors) == 15


def test_followers_count_only_recent_following_heartbeats(klass, monkeypatch):
    store, code, token = klass
    for s in ("a", "b", "c"):
        store.follow(code, s)
    store.follow(code, "b", following=False)  # stopped following to explore alone
    assert store.followers(code) == 2
    later = time.time() + FOLLOW_WINDOW_S + 1
    monkeypatch.setattr(time, "time", lambda: later)
    store.follow(code, "c")
    assert store.followers(code) == 1  # a's heartbeat is too old: a closed the tab


def test_everything_expires_within_a_day(klass, monkeypatch):
    store, code, token = klass
    qid = store.ask(code, token, QUESTION)
    store.publish(code, token, {"page": "/"})
    store.answer(code, qid, "s1", "a")
    store.follow(code, "s2")
    if isinstance(store, RedisClassStore):
        client = store._redis
        keys = list(client.scan_iter(match=f"viz:class:{code}*"))
        assert len(keys) == 5  # class, questions, answers, students, heartbeats
        assert all(0 < client.ttl(k) <= 86_400 for k in keys)
    else:
        later = time.time() + CLASS_TTL_S + 1
        monkeypatch.setattr(time, "time", lambda: later)
        with pytest.raises(KeyError):
            store.view(code)


def test_closing_ends_the_class(klass):
    store, code, token = klass
    qid = store.ask(code, token, QUESTION)
    store.answer(code, qid, "s1", "a")
    store.close(code, token)
    with pytest.raises(KeyError):
        store.view(code)
    if isinstance(store, RedisClassStore):
        assert list(store._redis.scan_iter(match=f"viz:class:{code}*")) == []


def _told(store):
    """Subscribe to ``store``: (the codes told so far, a function that waits until ``n`` were told, stop)."""
    told, event = [], threading.Event()

    def on_change(code):
        told.append(code)
        event.set()

    stop = store.subscribe(on_change)

    def wait_for(n, timeout=5.0):
        end = time.monotonic() + timeout
        while len(told) < n and time.monotonic() < end:
            event.wait(0.05)
            event.clear()
        return list(told)
    return told, wait_for, stop


def test_a_change_of_a_classs_news_is_told_to_subscribers(klass):
    """publish, ask, reveal and close tell subscribers the class's code (Redis: on its pub/sub channel); answers,
    heartbeats and reads do not; after stop, nothing more."""
    store, code, token = klass
    other, other_token = store.create()
    told, wait_for, stop = _told(store)
    time.sleep(0.3)  # Redis: the listening connection subscribes
    store.publish(code, token, {"page": "/attention"})
    assert wait_for(1) == [code]
    qid = store.ask(code, token, QUESTION)
    store.answer(code, qid, "s1", " time")
    store.follow(code, "s2")
    store.view(code), store.question(code), store.tally(code, qid)
    store.reveal(code, token, qid)
    store.publish(other, other_token, {"page": "/tokens"})
    assert wait_for(4) == [code, code, code, other]
    store.close(code, token)
    assert wait_for(5)[-1] == code
    with pytest.raises(PermissionError):
        store.publish(other, "not-the-token", {"page": "/x"})
    time.sleep(0.3)
    assert len(told) == 5  # a refused change tells nothing
    stop()
    time.sleep(1.2)  # Redis: the listener notices within its 1 s read
    store.publish(other, other_token, {"page": "/output"})
    time.sleep(0.3)
    assert len(told) == 5


def test_a_subscriber_hears_again_after_a_redis_restart(redis_server):
    store = RedisClassStore(redis_server.url)
    code, token = store.create()
    told, wait_for, stop = _told(store)
    time.sleep(0.3)
    store.publish(code, token, {"page": "/attention"})
    assert wait_for(1) == [code]
    redis_server.restart()
    deadline = time.monotonic() + 15
    while len(told) < 2 and time.monotonic() < deadline:  # the listener reconnects after 0.5-1 s
        store.publish(code, token, {"page": "/output"})
        time.sleep(0.5)
    stop()
    assert len(told) >= 2 and set(told) == {code}


def test_a_class_survives_a_redis_restart(redis_server):
    store = RedisClassStore(redis_server.url)
    code, token = store.create()
    store.publish(code, token, {"page": "/attention"})
    qid = store.ask(code, token, QUESTION)
    store.answer(code, qid, "s1", " time")
    redis_server.restart()  # append-only: the class is back; the client reconnects by itself
    assert store.view(code) == {"page": "/attention"} and store.tally(code, qid) == {" time": 1}
    assert store.publish(code, token, {"page": "/output"}) == 2


def test_an_unreachable_redis_is_one_clear_line():
    from redis_server import free_port
    store = RedisClassStore(f"redis://:secret-password@127.0.0.1:{free_port()}/0")
    with pytest.raises(ClassStoreUnavailable) as caught:
        store.create()
    message = str(caught.value)
    assert "cannot be reached" in message and "\n" not in message and "secret-password" not in message


def test_the_setting_picks_the_back_end(monkeypatch, redis_server):
    monkeypatch.delenv("VIZ_CLASS_STORE", raising=False)
    assert isinstance(class_store(), MemoryClassStore) and class_store() is class_store()
    monkeypatch.setenv("VIZ_CLASS_STORE", redis_server.url)
    assert isinstance(class_store(), RedisClassStore) and class_store() is class_store()
    monkeypatch.setenv("VIZ_CLASS_STORE", "http://example.com")
    with pytest.raises(ValueError, match="Redis URL"):
        class_store()


def test_both_back_ends_agree_on_a_session(redis_server):
    """The same calls give the same results on both back ends (one recorded script)."""
    redis.Redis.from_url(redis_server.url).flushdb()
    results = []
    for store in (MemoryClassStore(), RedisClassStore(redis_server.url)):
        code, token = store.create()
        out = [store.publish(code, token, {"a": [1, 2.5, None, True, "x"]}), store.view(code)]
        q1 = store.ask(code, token, CHOICE)
        q2 = store.ask(code, token, QUESTION)
        for i, v in enumerate(["L0H1", "L1H5", "L1H5", "L1H6", "L0H1"]):
            store.answer(code, q1, f"s{i % 4}", v)
        store.answer(code, q2, "s9", "x")
        store.follow(code, "s1")
        out += [q1, q2, store.tally(code, q1), store.tally(code, q2), store.question(code), store.followers(code)]
        results.append(json.dumps(out, sort_keys=True))
    assert results[0] == results[1]
