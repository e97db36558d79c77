"""A figure's CSV from the link inside its chart (viz_ui/app/downloads.py): the route's answers. The browser's side
(the link under every chart, its download) is in tests/test_browser.py."""

import asyncio
import gc
import logging

import pytest
from starlette.requests import Request

from viz_ui.app import downloads


OWNER = downloads.Owner()  # a session's state holds its links; the registry holds them weakly


@pytest.fixture
def route(monkeypatch):
    """The route as serve.py installs it (ENABLED restored afterwards), with a registry of its own."""
    monkeypatch.setattr(downloads, "ENABLED", False)
    monkeypatch.setattr(downloads, "LINKS", downloads._Links(limit=3))
    OWNER.clear()
    (installed,) = downloads.routes()
    assert downloads.ENABLED and installed.methods == {"GET", "HEAD"}
    return installed


def get(route, path: str):
    """The route's answer to ``GET path``, matched as Starlette matches it."""
    scope = {"type": "http", "method": "GET", "path": path, "query_string": b"", "headers": []}
    match, child = route.matches(scope)
    assert match.name == "FULL", path
    scope.update(child)
    return asyncio.run(route.endpoint(Request(scope)))


def test_a_registered_link_answers_with_its_csv_as_an_attachment(route):
    downloads.LINKS.put("tok", lambda: "row,a,b\n0,0.25,0.75\n", "tiny-gpt_attention_L0_H0.csv", OWNER)
    response = get(route, "/viz/csv/tok")
    assert response.status_code == 200 and response.body == b"row,a,b\n0,0.25,0.75\n"
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.headers["content-disposition"] == (
        "attachment; filename=\"tiny-gpt_attention_L0_H0.csv\"; filename*=UTF-8''tiny-gpt_attention_L0_H0.csv")
    assert response.headers["cache-control"] == "no-store"


def test_a_name_outside_ascii_keeps_a_safe_fallback_and_its_utf8_form(route):
    downloads.LINKS.put("tok", lambda: "x\n", 'mödel "q"\\;.csv', OWNER)
    disposition = get(route, "/viz/csv/tok").headers["content-disposition"]
    assert disposition.startswith('attachment; filename="m_del _q__;.csv"; ')  # no quote or backslash gets out
    assert disposition.endswith("filename*=UTF-8''m%C3%B6del%20%22q%22%5C%3B.csv")


def test_unknown_expired_and_dropped_links_are_not_found(route, monkeypatch):
    assert get(route, "/viz/csv/nope").status_code == 404
    downloads.LINKS.put("old", lambda: "x\n", "old.csv", OWNER)
    now = downloads.time.monotonic()
    with monkeypatch.context() as later:
        later.setattr(downloads.time, "monotonic", lambda: now + downloads.TOKEN_TTL_S + 1)
        assert get(route, "/viz/csv/old").status_code == 404
    for name in "abcd":  # the registry holds 3 here: the least recently registered goes first
        downloads.LINKS.put(name, lambda name=name: name, f"{name}.csv", OWNER)
    downloads.LINKS.put("b", lambda: "b again", "b.csv", OWNER)  # registered again: now the most recent
    assert [get(route, f"/viz/csv/{n}").status_code for n in "abcd"] == [404, 200, 200, 200]
    assert get(route, "/viz/csv/b").body == b"b again"
    assert get(route, "/viz/csv/" + "b" * 500).status_code == 404  # a long token is cut, not looked up whole


@pytest.mark.parametrize("token", ["%00", "..", "ü" * 70, "tok%2Fx", "NaN", " tok"])
def test_odd_tokens_are_not_found(route, token):
    downloads.LINKS.put("tok", lambda: "x\n", "x.csv", OWNER)
    assert get(route, "/viz/csv/" + token).status_code == 404


def test_a_link_dies_with_its_session(route):
    owner = downloads.Owner()
    downloads.LINKS.put("tok", lambda: "x\n", "x.csv", owner)
    assert get(route, "/viz/csv/tok").status_code == 200
    del owner  # the session's state is gone: so is the figure it held
    gc.collect()
    assert get(route, "/viz/csv/tok").status_code == 404 and "tok" not in downloads.LINKS.items


def test_a_csv_that_cannot_be_written_is_a_clear_error_and_a_log_line(route, caplog):
    downloads.LINKS.put("boom", lambda: 1 / 0, "boom.csv", OWNER)
    with caplog.at_level(logging.ERROR, logger=downloads.__name__):
        response = get(route, "/viz/csv/boom")
    assert response.status_code == 500 and b"could not be written" in response.body
    assert "ZeroDivisionError" in caplog.text


def test_without_the_route_nothing_is_registered(monkeypatch):
    monkeypatch.setattr(downloads, "ENABLED", False)
    assert downloads.register("chart_x", lambda: "x\n", "x.csv") is None
