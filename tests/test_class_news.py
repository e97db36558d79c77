"""The class news route (viz_ui/classroom/news.py): the long-polled answer a student's bell waits on."""

import asyncio
import json
import threading
import time

import pytest
from starlette.requests import Request

from viz_ui.classroom import MemoryClassStore, news
from viz_ui.classroom.store import ClassStoreUnavailable


def later(seconds: float, action) -> threading.Thread:
    """Run ``action`` in another thread after ``seconds`` (as the teacher's session would, on another replica)."""
    thread = threading.Thread(target=lambda: (time.sleep(seconds), action()))
    thread.start()
    return thread


def test_the_news_names_the_view_version_the_question_and_its_reveal():
    store = MemoryClassStore()
    code, token = store.create()
    assert news.news_of(store, code) == "0::0"
    store.publish(code, token, {"page": "app.py", "params": {}})
    assert news.news_of(store, code) == "1::0"
    qid = store.ask(code, token, {"kind": "next_token", "prompt": "Which token comes next?"})
    assert news.news_of(store, code) == f"1:{qid}:0"
    store.reveal(code, token, qid)
    assert news.news_of(store, code) == f"1:{qid}:1"
    store.publish(code, token, {"page": "app.py", "params": {"head": "2"}})
    assert news.news_of(store, code) == f"2:{qid}:1"
    assert news.news_string(2, store.question(code)) == news.news_of(store, code)
    with pytest.raises(KeyError):
        news.news_of(store, "ZZZZZZ")


@pytest.mark.parametrize("tells", [True, False], ids=["store tells of changes", "store read again and again"])
def test_a_wait_answers_at_once_when_the_news_differs_and_holds_until_it_changes(monkeypatch, tells):
    """A store that tells of changes (subscribe) answers the waits at once with the watcher's own reads 30 s apart;
    one that cannot is read every WATCH_S."""
    monkeypatch.setattr(news, "WATCH_S", 0.05 if not tells else 30.0)
    monkeypatch.setattr(news, "CHECK_S", 30.0)
    store = MemoryClassStore()
    if not tells:
        monkeypatch.setattr(store, "subscribe", lambda on_change: None)
    code, token = store.create()
    board = news.NewsBoard(lambda: store)

    async def scenario():
        t = time.monotonic()
        assert await board.wait(code, "something else", hold_s=5) == "0::0"
        assert time.monotonic() - t < 1
        # the same news: held until the teacher publishes (0.4 s later, from another thread)
        thread = later(0.4, lambda: store.publish(code, token, {"page": "app.py", "params": {}}))
        t = time.monotonic()
        assert await board.wait(code, "0::0", hold_s=5) == "1::0"
        assert 0.35 < time.monotonic() - t < 2
        thread.join()
        # nothing changes: answered with the same news after the hold
        t = time.monotonic()
        assert await board.wait(code, "1::0", hold_s=0.3) == "1::0"
        assert 0.25 < time.monotonic() - t < 2
        # many screens wait on one class: one change answers them all
        thread = later(0.3, lambda: store.ask(code, token, {"kind": "next_token", "prompt": "Next?"}))
        answers = await asyncio.gather(*(board.wait(code, "1::0", hold_s=5) for _ in range(50)))
        thread.join()
        assert set(answers) == {news.news_of(store, code)} and answers[0].startswith("1:1:")
        # the class ends while screens wait: they learn it
        thread = later(0.3, lambda: store.close(code, token))
        assert await board.wait(code, answers[0], hold_s=5) == news.GONE
        thread.join()
        assert await board.wait("ZZZZZZ", "", hold_s=1) == news.GONE

    asyncio.run(scenario())


def test_a_store_that_does_not_answer_keeps_the_news_as_it_was(monkeypatch):
    monkeypatch.setattr(news, "WATCH_S", 0.05)
    store = MemoryClassStore()
    code, token = store.create()
    down = threading.Event()

    class Flaky:
        def __getattr__(self, name):
            if down.is_set():
                raise ClassStoreUnavailable("the class store cannot be reached")
            return getattr(store, name)

    board = news.NewsBoard(lambda: Flaky())

    async def scenario():
        assert await board.wait(code, "", hold_s=1) == "0::0"
        down.set()
        store.publish(code, token, {"page": "app.py", "params": {}})
        assert await board.wait(code, "0::0", hold_s=0.4) == "0::0"  # not known yet: the same news, not an error
        down.clear()
        assert await board.wait(code, "0::0", hold_s=5) == "1::0"
        # a class first asked about while the store is down: no news (the route says 503)
        down.set()
        other, _ = store.create()
        assert await board.wait(other, "", hold_s=0.3) is None

    asyncio.run(scenario())


async def call(route, path: str, query: str = "", closes_after: float | None = None) -> tuple[int, dict | None]:
    """The route's answer to ``GET path?query``: (status, JSON body or None). The connection stays open, or the
    client closes it after ``closes_after`` seconds."""
    code = path.split("/")[2]
    scope = {"type": "http", "method": "GET", "path": path, "query_string": query.encode(), "headers": [],
             "path_params": {"code": code}}
    sent = []

    async def receive():
        if not sent:
            sent.append(1)
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(3600 if closes_after is None else closes_after)
        return {"type": "http.disconnect"}

    response = await route.endpoint(Request(scope, receive))
    return response.status_code, json.loads(response.body) if response.body else None


def test_the_route_answers_json_and_refuses_bad_codes(monkeypatch):
    monkeypatch.setattr(news, "ENABLED", False)
    monkeypatch.setattr(news, "HOLD_S", 0.3)
    store = MemoryClassStore()
    code, token = store.create()
    (route,) = news.routes(lambda: store)
    assert news.ENABLED and route.path == news.PATH and route.methods == {"GET", "HEAD"}

    async def scenario():
        assert await call(route, f"/class/{code}/news", "seen=x") == (200, {"news": "0::0"})
        t = time.monotonic()
        assert await call(route, f"/class/{code}/news", "seen=0::0") == (200, {"news": "0::0"})  # held, then the same
        assert time.monotonic() - t > 0.25
        assert (await call(route, "/class/ZZZZZZ/news"))[0] == 404  # no such class
        for bad in ("<script>", "AB", "ABCDEFGHIJ", "ABC%00D"):
            status, body = await call(route, f"/class/{bad}/news")
            assert status == 404 and body == {"error": "not a class code"}
        status, _ = await call(route, f"/class/{code}/news", "seen=" + "9" * 10_000)  # a huge parameter: cut, answered
        assert status == 200
        news.HOLD_S = 30.0
        t = time.monotonic()  # a held request whose screen closes the connection is let go at once (a stopping
        assert await call(route, f"/class/{code}/news", "seen=0::0", closes_after=0.2) == (204, None)  # server waits
        assert time.monotonic() - t < 5  # for the requests it holds: a closed tab's kept it up for the whole hold)

    asyncio.run(scenario())


def test_a_full_run_after_a_poll_reuses_its_answers_and_the_heartbeat_is_not_sent_at_every_poll(monkeypatch):
    from viz_ui.classroom import follow
    from viz_ui.classroom.session import ClassSession

    store = MemoryClassStore()
    code, token = store.create()
    store.publish(code, token, {"page": "app.py", "params": {}})
    calls = []

    class Counting:
        def __getattr__(self, name):
            calls.append(name)
            return getattr(store, name)

    monkeypatch.setattr(news, "ENABLED", True)
    cls = ClassSession(code, "student")
    assert follow._news(cls, Counting(), reuse=True) == (1, None)  # nothing to reuse yet
    assert calls == ["version", "follow", "question"] and store.followers(code) == 1
    calls.clear()
    assert follow._news(cls, Counting(), reuse=True) == (1, None)  # the full run right after: no store call
    assert calls == []
    store.publish(code, token, {"page": "app.py", "params": {"head": "1"}})
    assert follow._news(cls, Counting(), reuse=False) == (2, None)  # a fragment run (the bell's): asks again
    assert calls == ["version", "question"]  # the heartbeat was sent under HEARTBEAT_SECONDS / 2 ago
    calls.clear()
    monkeypatch.setattr(follow, "FRESH_S", 0.0)
    cls.beat -= follow.HEARTBEAT_SECONDS
    assert follow._news(cls, Counting(), reuse=True) == (2, None)  # too old to reuse; the heartbeat is due
    assert calls == ["version", "follow", "question"]
    calls.clear()
    monkeypatch.setattr(news, "ENABLED", False)  # polling every second: a heartbeat at every poll
    follow._news(cls, Counting(), reuse=False)
    assert calls == ["version", "follow", "question"]
