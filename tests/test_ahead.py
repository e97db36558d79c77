"""Charts drawn ahead of the rerun (viz_ui/app/ahead.py): the route's answers, and page 3's head heatmap answered
for a new text exactly as the page's rerun then sends it."""

import asyncio
import base64
import json
import logging
import threading
import time

import numpy as np
import pytest
from starlette.requests import Request
from streamlit.testing.v1 import AppTest

from conftest import ROOT, component_data
from viz_model import load_model
from viz_ui.app import ahead


@pytest.fixture
def route(monkeypatch):
    """The route as serve.py installs it (ENABLED restored afterwards), with a registry of its own."""
    monkeypatch.setattr(ahead, "ENABLED", False)
    monkeypatch.setattr(ahead, "REGISTRY", ahead._Registry())
    (installed,) = ahead.routes()
    assert ahead.ENABLED and installed.path == ahead.PATH == "/" + ahead.URL and installed.methods == {"POST"}
    return installed


async def post(route, body: bytes, length: bool = True):
    """The route's answer to ``POST /viz/ahead`` with ``body`` (sent in 1 kB pieces; ``length``: with its
    Content-Length header, as a browser sends it)."""
    pieces = [body[i:i + 1024] for i in range(0, len(body), 1024)] or [b""]
    headers = [(b"content-type", b"application/json")] + ([(b"content-length", str(len(body)).encode())] if length else [])

    async def receive():
        piece = pieces.pop(0)
        return {"type": "http.request", "body": piece, "more_body": bool(pieces)}

    scope = {"type": "http", "method": "POST", "path": ahead.PATH, "query_string": b"", "headers": headers}
    return await route.endpoint(Request(scope, receive))


def ask(token: str, text) -> bytes:
    return json.dumps({"token": token, "text": text}).encode()


def test_the_route_answers_a_registered_chart_with_its_figure_and_revision(route):
    asked = []
    ahead.REGISTRY.put("tok", lambda text, deliver=None: asked.append(text) or ('{"data":[]}', f"rev:{len(text)}"))
    response = asyncio.run(post(route, ask("tok", "Once upon a time ✓")))
    assert response.status_code == 200 and response.body == b'{"data":[]}'
    assert response.headers["x-viz-revision"] == "rev:18" and response.headers["cache-control"] == "no-store"
    assert asked == ["Once upon a time ✓"]


def test_the_route_refuses_what_it_cannot_answer(route, caplog):
    ahead.REGISTRY.put("none", lambda text, deliver=None: None)
    ahead.REGISTRY.put("boom", lambda text, deliver=None: 1 / 0)
    ahead.REGISTRY.put("tok", lambda text, deliver=None: ("{}", "r"))

    async def statuses():
        return [(await post(route, body)).status_code for body in [
            b"not json", b"[1, 2]", b'{"token": "tok"}', json.dumps({"token": "tok", "text": 5}).encode(),
            json.dumps({"token": 7, "text": "x"}).encode(), b"\xff\xfe",  # not a {token, text} object: 400
            ask("nobody", "x"),  # an unknown token (another replica, a restarted server): 404
            ask("none", ""), ask("boom", "x"),  # nothing to draw ahead: 204
        ]]

    with caplog.at_level(logging.ERROR, logger=ahead.__name__):
        assert asyncio.run(statuses()) == [400] * 6 + [404, 204, 204]
    assert "could not be built" in caplog.text  # the failure is logged, not sent


def test_a_body_over_the_limit_is_refused_before_it_is_read_whole(route):
    asked = []
    ahead.REGISTRY.put("tok", lambda text, deliver=None: asked.append(text) or ("{}", "r"))
    big = ask("tok", "x" * ahead.MAX_BODY_BYTES)
    assert asyncio.run(post(route, big)).status_code == 413  # said by its Content-Length
    assert asyncio.run(post(route, big, length=False)).status_code == 413  # counted while read
    fits = ask("tok", "é" * 20_000)  # the Text box's 20,000 characters, two bytes each in UTF-8
    assert asyncio.run(post(route, fits)).status_code == 200 and asked == ["é" * 20_000]


def test_one_answer_at_a_time_per_chart_and_a_page_run_waits_for_it(route):
    """A second text for the same chart while the first is answered: 429; the chart's page run (register) waits
    until the answer under way is done."""
    release = threading.Event()
    ahead.REGISTRY.put("slow", lambda text, deliver=None: release.wait(5) and ("{}", text))
    ahead.REGISTRY.put("fast", lambda text, deliver=None: ("{}", text))
    chart = ahead.REGISTRY.get("slow")
    waited = []

    def page_run():  # what register does for the chart before its run builds the figure
        t = time.monotonic()
        ahead.REGISTRY.put("slow", chart.answer).idle.wait(5)
        waited.append(time.monotonic() - t)

    async def scenario():
        first = asyncio.create_task(post(route, ask("slow", "one")))
        while not chart.busy or chart.idle.is_set():  # taken, then being built in a worker
            await asyncio.sleep(0.01)
        assert (await post(route, ask("slow", "two"))).status_code == 429
        assert (await post(route, ask("fast", "three"))).status_code == 200  # other charts are not held up
        run = threading.Thread(target=page_run)
        run.start()
        await asyncio.sleep(0.3)
        release.set()
        response = await first
        run.join(5)
        return response

    response = asyncio.run(scenario())
    assert response.status_code == 200 and response.headers["x-viz-revision"] == "one"
    assert chart.idle.is_set() and not chart.busy
    assert len(waited) == 1 and 0.25 < waited[0] < 4


def test_a_figure_handed_over_early_is_sent_while_its_answer_goes_on(route):
    """An answer that hands its figure over before it returns (the forward pass goes on, viz_ui.app.state.trace_early):
    the route sends that figure at once; the chart stays busy (429) and counts as pending until the answer returns;
    what the answer then returns is not sent again."""
    release, returned = threading.Event(), threading.Event()

    def answer(text, deliver=None):
        deliver(('{"early": 1}', "early"))
        release.wait(5)
        returned.set()
        return '{"late": 1}', "late"

    ahead.REGISTRY.put("tok", answer)
    chart = ahead.REGISTRY.get("tok")

    async def scenario():
        first = await asyncio.wait_for(post(route, ask("tok", "one")), 5)  # sent while the answer still runs
        still = (chart.busy, ahead._pending, returned.is_set(), (await post(route, ask("tok", "two"))).status_code)
        release.set()
        while chart.busy:
            await asyncio.sleep(0.01)
        return first, still

    first, still = asyncio.run(scenario())
    assert first.status_code == 200 and first.body == b'{"early": 1}' and first.headers["x-viz-revision"] == "early"
    assert still == (True, 1, False, 429)
    assert returned.is_set() and ahead._pending == 0 and chart.idle.is_set()


def test_an_answer_is_not_built_once_its_page_ran_again_nor_after_its_token_expired(route, monkeypatch):
    asked = []
    chart = ahead.REGISTRY.put("tok", lambda text, deliver=None: asked.append(text) or ("{}", "r"))
    runs = chart.runs
    ahead.REGISTRY.put("tok", chart.answer)  # the page ran again (its own copy of the chart is on its way)
    assert ahead._run(chart, "stale", runs) is None and asked == []
    assert ahead._run(chart, "fresh", chart.runs) == ("{}", "r") and asked == ["fresh"] and chart.idle.is_set()
    monkeypatch.setattr(ahead, "TOKEN_TTL_S", 0.05)
    time.sleep(0.1)  # the session's page has not run for longer than the tokens live
    assert asyncio.run(post(route, ask("tok", "late"))).status_code == 404 and ahead.REGISTRY.get("tok") is None


def test_hostile_bodies_and_too_many_answers_at_once_are_refused(route, monkeypatch):
    release = threading.Event()
    ahead.REGISTRY.put("slow", lambda text, deliver=None: release.wait(5) and ("{}", "r"))
    ahead.REGISTRY.put("other", lambda text, deliver=None: ("{}", "r"))
    monkeypatch.setattr(ahead, "MAX_PENDING", 1)

    async def scenario():
        nested = await post(route, b"[" * 100_000)  # deeper than Python's parser goes: refused, not a 500
        odd_length = await route.endpoint(Request(
            {"type": "http", "method": "POST", "path": ahead.PATH, "query_string": b"",
             "headers": [(b"content-length", "²".encode())]}, lambda: {"type": "http.request", "body": b""}))
        first = asyncio.create_task(post(route, ask("slow", "one")))
        while not ahead.REGISTRY.get("slow").busy:
            await asyncio.sleep(0.01)
        crowded = await post(route, ask("other", "two"))  # one answer pending already: the rerun draws this one
        release.set()
        await first
        after = await post(route, ask("other", "three"))
        return nested.status_code, odd_length.status_code, crowded.status_code, after.status_code

    assert asyncio.run(scenario()) == (400, 413, 503, 200)


def test_the_registry_keeps_the_latest_answer_and_drops_the_oldest_chart():
    registry = ahead._Registry(limit=2)
    first = registry.put("a", lambda text, deliver=None: None)
    assert registry.put("a", str) is first and first.answer is str  # the same chart, its latest answer
    registry.put("b", str)
    registry.put("a", str)  # registered again: the most recent
    registry.put("c", str)
    assert registry.get("b") is None and registry.get("a") is first and registry.get("c") is not None


def test_nothing_is_registered_where_the_route_is_not_installed(monkeypatch):
    monkeypatch.setattr(ahead, "ENABLED", False)
    assert ahead.register("attn_head", lambda text, deliver=None: None) is None


def long_text(n_tokens: int) -> str:
    """A text of about ``n_tokens`` tokens, from the tests' held-out story."""
    _, tok = load_model()
    ids = tok.encode((ROOT / "tests" / "data" / "heldout.txt").read_text(encoding="utf-8")).ids
    return tok.decode((ids * (1 + n_tokens // len(ids)))[:n_tokens])


def positions(fig: dict) -> tuple[int, int]:
    """The first and one past the last position of a head heatmap's columns (its x, a Plotly typed array)."""
    x = fig["data"][0]["x"]
    values = np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"]) if isinstance(x, dict) else np.array(x)
    return int(values[0]), int(values[-1]) + 1


def test_the_head_drawn_ahead_is_the_figure_the_page_then_sends(monkeypatch):
    """Page 3 registers its head heatmap; for each new text, the answer computed outside the page's run (as the route
    runs it) is byte for byte the figure and revision the page's rerun on that text sends: short and long texts (a
    window of 128 positions around the query), a query kept while the text has it and moved to the last token when
    not (then the last token), weights and scores, another head."""
    monkeypatch.setattr(ahead, "ENABLED", True)
    monkeypatch.setattr(ahead, "REGISTRY", ahead._Registry())
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.switch_page("pages/attention.py").run()
    assert not at.exception, [e.value for e in at.exception]
    token = component_data(at, "attn_head")["ahead"]

    def submit(text: str) -> None:
        data = component_data(at, "attn_head")
        assert data["ahead"] == token and data["aheadUrl"] == ahead.URL  # one token per chart and session
        early = []  # handed over during the forward pass, once the head's layer has its q and k
        answered = ahead.REGISTRY.get(token).answer(text, early.append)
        at.text_area(key="text").set_value(text).run()
        assert not at.exception, [e.value for e in at.exception]
        sent = component_data(at, "attn_head")
        assert answered == (sent["figure"], sent["revision"])
        assert early == [answered]  # a new text: the figure came early, and it is the very one the page sends
        return json.loads(sent["figure"])

    n_tokens = lambda text: len(load_model()[1].encode(text).ids)  # noqa: E731
    short = "The cat sat on the mat. It was warm and the sun was out."
    assert positions(submit(short)) == (0, n_tokens(short))
    # the query stays where it was while the new text has it (the short text's last token): the first 128
    assert positions(submit(long_text(300))) == (0, 128)
    at.selectbox(key="query").set_value(100).run()
    assert positions(submit(long_text(290))) == (36, 164)  # 128 positions around query 100
    assert positions(submit("A short one now.")) == (0, n_tokens("A short one now."))  # 100 is past its end
    at.radio(key="attn_kind").set_value("scores (scaled, masked, before softmax)").run()
    at.selectbox(key="head").set_value(1).run()
    fig = submit("Scores of another head, for a text of its own.")
    assert "head 1: scores" in fig["layout"]["title"]["text"]
    assert ahead.REGISTRY.get(token) is not None


def test_trace_early_hands_over_a_layer_before_the_later_layers_run_and_then_the_same_trace():
    """state.trace_early: the values of one layer's pattern (or scores) go to on_ready once, during the forward pass
    and before the last layer runs, equal to what the finished trace returns for that hook; a cached text calls
    nothing; an on_ready that fails leaves the trace whole."""
    from viz_model import DEFAULT_MODEL
    from viz_ui.app.state import get_trace, resolve, trace_early

    path = str(DEFAULT_MODEL)
    model = resolve(path)[0]
    last = f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"
    for n, name in ((40, "blocks.1.attn.hook_pattern"), (300, "blocks.2.attn.hook_attn_scores")):
        text = long_text(n) + f" ({name})"  # a text of its own: not in the trace cache yet
        order, got = [], []

        def on_ready(values):
            order.append("ready")
            got.append(values)

        with model.hooks([(last, lambda t, hook: order.append("last layer"))]):
            trace = trace_early(path, text, name, on_ready)
        assert order == ["ready", "last layer"]
        np.testing.assert_array_equal(got[0], trace.arrays[name])  # bit for bit
        assert trace_early(path, text, name, on_ready) is trace and len(got) == 1  # cached: no second call

    text = long_text(50) + " (a failing on_ready)"
    trace = trace_early(path, text, "blocks.0.attn.hook_pattern", lambda values: 1 / 0)
    assert trace is get_trace(path, text) and trace.n_tokens > 10
