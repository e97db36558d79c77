"""A lean client of Streamlit's own websocket protocol: one browser tab without a browser, for load benchmarks.

It speaks what Streamlit's frontend speaks (Streamlit 1.67; ``streamlit.proto`` BackMsg / ForwardMsg over the
websocket ``/_stcore/stream``, subprotocol ``streamlit``), as read from the frontend's source (``App.tsx``:
``sendRerunBackMsg``, ``handleAutoRerun``, ``handleConnectionStateChanged``, ``handlePageInfoChanged``;
``AppRoot``'s stale-element clearing):

- opens a page like a browser: GET of the page first (so that a load balancer's sticky cookie, e.g. HAProxy's
  ``cookie SRV insert``, is kept and sent with the websocket's handshake), then a full-app ``rerun_script`` with
  the URL's page name and query string;
- follows the session: ``page_info_changed`` replaces the query string (the frontend's ``history.pushState``),
  ``navigation`` gives the current page (its ``page_script_hash``) and the app's pages;
- honours ``auto_rerun``: like the frontend's ``setInterval``, it sends ``rerun_script(fragment_id,
  is_auto_rerun=True)`` every ``interval`` seconds until a full run, a ``stop_auto_rerun`` or a page change ends it
  (this is how ``st.fragment(run_every=...)`` works: the *frontend* drives the fragment's reruns);
- reconnects as the browser does when the socket closes: a new websocket to the same URL (with the cookie, so a
  load balancer may send it to another replica), a new session there, and a full rerun of the current page with
  the current query string (the frontend requests one when fragments were auto-rerunning);
- keeps what is on screen: every element by its delta path, dropped when stale after a run (a full run drops
  what it did not redraw; a fragment run, what its fragments did not redraw), summarised as ``(kind, text)``:
  markdown / caption / heading / html / alert / exception bodies, a Plotly figure's title, widget labels;
- calls ``on_finished(client)`` after each script run (``script_finished``), with the run's status;
- runs a class bell as bell.js does (``viz_ui/classroom/bell.py``): while a ``viz_class_bell`` component is on
  screen, one long-polled ``GET`` of its news URL at a time (with the cookies, as the browser's ``fetch``); when the
  news differs as bell.js decides, its trigger (``{"event": "news"}`` in the component's trigger aggregator) in a
  rerun of its fragment. A new draw of the bell (new data) replaces the request, as the frontend's cleanup does.

Widget values are sent only for widgets this client set with :meth:`StClient.set_widget` (and forgotten when the
server sets the widget's value itself): the server keeps every other widget's value from the previous run, as it
does for a browser that did not touch them. Message caching is not offered (no ``cached_message_hashes``), so the
server always sends whole messages.

    client = StClient("http://127.0.0.1:8501", "attention", "class=ABC123", on_finished=print)
    task = asyncio.create_task(client.run())   # connects, reruns, reconnects until client.close()
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from streamlit.components.v2.bidi_component.main import _make_trigger_id
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, WebSocketException

from viz_ui.app.live_chart import unpack

FINISHED = {ForwardMsg.FINISHED_SUCCESSFULLY: "ok", ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY: "fragment ok",
            ForwardMsg.FINISHED_WITH_COMPILE_ERROR: "compile error", ForwardMsg.FINISHED_EARLY_FOR_RERUN: "rerun"}
WIDGETS = {"text_area", "text_input", "selectbox", "slider", "number_input", "checkbox", "radio", "multiselect",
           "button", "toggle", "button_group", "segmented_control", "pills", "select_slider"}


@dataclass
class Shown:
    """One element on screen: ``kind`` (e.g. ``"markdown"``, ``"heading"``, ``"alert:error"``, ``"plotly"``,
    ``"widget:selectbox"``), ``text`` (its body, label, or a figure's title: read from the figure's JSON when
    asked), the run that drew it and its fragment."""
    kind: str
    raw: str
    run_id: str
    fragment_id: str
    widget_id: str = ""
    hash: str = ""  # a figure: the SHA-1 of its JSON; any other element: the server's hash of its message

    @property
    def text(self) -> str:
        return _plotly_title(self.raw) if self.kind == "plotly" else self.raw


@dataclass
class Run:
    """A finished script run: wall time (``time.perf_counter()``), status (see FINISHED), whether it was a
    fragment run, the page it ran."""
    t: float
    status: str
    fragment: bool
    page_hash: str


@dataclass
class StClient:
    """One tab of ``base`` (e.g. ``http://127.0.0.1:8501``) on page ``path`` (``""`` = main page) with ``query``
    (the URL's query string without ``?``). State: ``page_hash``, ``pages`` (hash → url path), ``query``,
    ``shown`` (delta path → :class:`Shown`), ``runs``, ``connections`` (websockets opened), ``session_id``,
    ``errors`` (one line each: a connection that failed, an exception element)."""
    base: str
    path: str = ""
    query: str = ""
    on_finished: Callable[[StClient, Run], None] | None = None
    name: str = ""
    page_hash: str = ""
    pages: dict[str, str] = field(default_factory=dict)
    shown: dict[tuple, Shown] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    connections: int = 0
    session_id: str = ""
    errors: list[str] = field(default_factory=list)
    cookies: dict[str, str] = field(default_factory=dict)
    widget_values: dict[str, WidgetState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._ws = None
        self._closing = False
        self._auto: dict[str, tuple[float, asyncio.Task]] = {}
        self._run_id = ""
        self._fragments: tuple[str, ...] = ()
        self._connected = asyncio.Event()
        self.bytes_received = 0
        self._bell: dict | None = None  # the class bell on screen: its path, data, ids and request loop
        self.rings = 0  # the bell's triggers sent

    # ---- what is on screen -----------------------------------------------------------------------------
    def texts(self, *kinds: str) -> list[str]:
        """The texts on screen in delta-path order, of the given kinds (prefixes; all when none)."""
        return [s.text for _, s in sorted(self.shown.items()) if not kinds or s.kind.startswith(kinds)]

    def figures(self) -> list[str]:
        """The hashes of the figures on screen, sorted: two screens showing the same figures have equal lists."""
        return sorted(s.hash for s in self.shown.values() if s.kind == "plotly")

    def widget_id(self, label: str) -> str | None:
        """The id of the widget on screen whose label is ``label`` (None when absent)."""
        return next((s.widget_id for s in self.shown.values() if s.widget_id and s.text == label), None)

    @property
    def auto_reruns(self) -> dict[str, float]:
        """The fragments rerun at an interval now: fragment id → interval in seconds."""
        return {fid: interval for fid, (interval, _) in self._auto.items()}

    @property
    def page(self) -> str:
        """The current page's url path (``""`` for the main page)."""
        return self.pages.get(self.page_hash, self.path)

    # ---- actions ------------------------------------------------------------------------------------------
    async def set_widget(self, label: str, **value) -> None:
        """Give the widget labelled ``label`` a value (``string_value=…``, ``int_value=…``, … as the frontend
        would send it) and rerun the app, as a user's change does. Raises KeyError when no such widget is shown."""
        wid = self.widget_id(label)
        if wid is None:
            raise KeyError(f"no widget labelled {label!r} on screen")
        self.widget_values[wid] = WidgetState(id=wid, **value)
        await self.rerun()

    async def click(self, label: str, values: dict[str, dict] | None = None) -> None:
        """Click the button labelled ``label`` as the browser does: its trigger, with ``values`` (``{widget label:
        {"string_value": …}}``, e.g. the other widgets of its form), in a rerun of the button's fragment (of the page
        when it is in none). Raises KeyError when a widget is not on screen."""
        button = self.widget_id(label)
        if button is None:
            raise KeyError(f"no widget labelled {label!r} on screen")
        for other, value in (values or {}).items():
            wid = self.widget_id(other)
            if wid is None:
                raise KeyError(f"no widget labelled {other!r} on screen")
            self.widget_values[wid] = WidgetState(id=wid, **value)
        self.widget_values[button] = WidgetState(id=button, trigger_value=True)
        await self.rerun(fragment_id=next(x.fragment_id for x in self.shown.values() if x.widget_id == button))
        del self.widget_values[button]  # a trigger counts once

    async def open_page(self, url_path: str) -> None:
        """Switch to the app page at ``url_path`` (as a click on its link: auto-reruns stop, the query string is
        dropped). Raises KeyError for an unknown page."""
        page = next((h for h, p in self.pages.items() if p == url_path), None)
        if page is None:
            raise KeyError(f"no page {url_path!r}")
        self._stop_auto()
        self.query = ""
        await self.rerun(page_hash=page)

    async def rerun(self, fragment_id: str = "", auto: bool = False, page_hash: str | None = None) -> bool:
        """Send a ``rerun_script`` (a full run of the current page unless ``fragment_id``); False when
        disconnected (the frontend then drops the request too)."""
        if self._ws is None:
            return False
        msg = BackMsg()
        state = msg.rerun_script
        state.query_string = self.query
        state.widget_states.widgets.extend(self.widget_values.values())
        if page_hash or self.page_hash:
            state.page_script_hash = page_hash or self.page_hash
        else:
            state.page_name = self.path
        state.fragment_id = fragment_id
        state.is_auto_rerun = auto
        info = state.context_info
        info.timezone, info.timezone_offset, info.locale = "UTC", 0, "en-US"
        info.url, info.is_embedded, info.color_scheme = self.url, False, "light"
        try:
            await self._ws.send(msg.SerializeToString())
        except ConnectionClosed:
            return False
        return True

    async def close(self) -> None:
        """Stop: no reconnection; the websocket is closed."""
        self._closing = True
        self._stop_auto()
        if self._bell is not None:
            self._bell["task"].cancel()
        if self._ws is not None:
            await self._ws.close()

    @property
    def url(self) -> str:
        return f"{self.base}/{self.page}" + (f"?{self.query}" if self.query else "")

    # ---- the connection -----------------------------------------------------------------------------------
    async def _get_page(self) -> None:
        """GET the page, as the browser loads index.html: keeps the Set-Cookie headers (a load balancer's)."""
        parts = urlsplit(self.url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
        try:
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            writer.write(f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n{self._cookie_line()}"
                         "\r\n".encode())
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            self._keep_cookies(line.split(":", 1)[1] for line in head.split("\r\n")
                               if line.lower().startswith("set-cookie:"))
            if not head.startswith("HTTP/1.1 200"):
                raise OSError(head.split("\r\n", 1)[0])
        finally:
            writer.close()

    def _cookie_line(self) -> str:
        return f"Cookie: {'; '.join(f'{k}={v}' for k, v in self.cookies.items())}\r\n" if self.cookies else ""

    def _keep_cookies(self, headers) -> None:
        for header in headers:
            name, _, value = header.split(";", 1)[0].strip().partition("=")
            self.cookies[name] = value

    async def run(self, retry: float = 0.5, max_retry: float = 4.0) -> None:
        """Connect and follow the session until :meth:`close`; reconnect when the socket closes (waiting
        ``retry`` s, doubling up to ``max_retry``). The first connection's failures go to ``errors`` too."""
        wait = retry
        first = True
        while not self._closing:
            try:
                if first:
                    await self._get_page()
                ws_url = urlsplit(self.base)._replace(scheme="ws", path="/_stcore/stream").geturl()
                async with connect(ws_url, subprotocols=["streamlit"], max_size=None, open_timeout=60,
                                   additional_headers={"Cookie": self._cookie_line()[8:-2]} if self.cookies else None
                                   ) as ws:
                    self._keep_cookies(ws.response.headers.get_all("Set-Cookie"))
                    self._ws, first, wait = ws, False, retry
                    self.connections += 1
                    self._connected.set()
                    await self.rerun()  # a new session: the frontend asks for a full run of the current page
                    async for data in ws:
                        self.bytes_received += len(data)
                        self._handle(ForwardMsg.FromString(data))
            except (OSError, WebSocketException, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
                if not self._closing:  # refused, reset, a proxy's 503 …: the browser tries again too
                    self.errors.append(f"connection {self.connections}: {type(exc).__name__}: {exc}")
            finally:
                self._ws = None
                self._connected.clear()
            if not self._closing:
                await asyncio.sleep(wait)
                wait = min(2 * wait, max_retry)

    # ---- messages -----------------------------------------------------------------------------------------
    def _handle(self, msg: ForwardMsg) -> None:
        kind = msg.WhichOneof("type")
        if kind == "new_session":
            ns = msg.new_session
            self._run_id = msg.metadata.run.script_run_id
            self._fragments = tuple(msg.metadata.run.fragment_ids)
            if ns.initialize.session_id:
                self.session_id = ns.initialize.session_id
            if not self._fragments:
                self._stop_auto()  # a full run: its fragments register their auto-reruns again
        elif kind == "navigation":  # the page that runs (new_session's page_script_hash is the main script's)
            self.page_hash = msg.navigation.page_script_hash
            self.pages = {page.page_script_hash: page.url_pathname for page in msg.navigation.app_pages}
        elif kind == "page_info_changed":
            self.query = msg.page_info_changed.query_string
        elif kind == "delta":
            self._delta(msg)
        elif kind == "auto_rerun":
            self._start_auto(msg.auto_rerun.fragment_id, msg.auto_rerun.interval)
        elif kind == "stop_auto_rerun":
            for fid in msg.stop_auto_rerun.fragment_ids:
                self._stop_auto(fid)
        elif kind == "script_finished":
            status = FINISHED.get(msg.script_finished, str(msg.script_finished))
            if status != "rerun":  # a run cut short for a rerun leaves the screen as it is
                run = msg.metadata.run
                run_id, frags = (run.script_run_id, set(run.fragment_ids)) if run.script_run_id else (
                    self._run_id, set(self._fragments))
                self.shown = {p: s for p, s in self.shown.items()
                              if s.run_id == run_id or (frags and s.fragment_id not in frags)}
            finished = Run(time.perf_counter(), status, bool(self._fragments), self.page_hash)
            self.runs.append(finished)
            if self.on_finished is not None:
                self.on_finished(self, finished)

    def _delta(self, msg: ForwardMsg) -> None:
        path = tuple(msg.metadata.delta_path)
        delta = msg.delta
        which = delta.WhichOneof("type")
        if which == "add_block":
            self.shown[path] = Shown("block", "", self._run_id, delta.fragment_id)
            return
        if which != "new_element":
            return
        for p in [p for p in self.shown if p[:len(path)] == path and len(p) > len(path)]:
            del self.shown[p]  # an element replaces a block and what was in it
        el = delta.new_element
        etype = el.WhichOneof("type")
        wid = ""
        if etype == "markdown":
            kind, text = ("caption" if el.markdown.element_type == el.markdown.CAPTION else "markdown"), el.markdown.body
        elif etype in ("heading", "html", "text", "code"):
            kind, text = etype, getattr(el, etype).body if etype != "code" else el.code.code_text
        elif etype == "alert":
            kind, text = f"alert:{el.alert.Format.Name(el.alert.format).lower()}", el.alert.body
        elif etype == "exception":
            kind, text = "exception", f"{el.exception.type}: {el.exception.message}"
            self.errors.append(f"exception on screen: {text.splitlines()[0] if text else ''}")
        elif etype == "plotly_chart":
            kind, text = "plotly", el.plotly_chart.spec
        elif etype == "bidi_component" and "viz_live_chart" in el.bidi_component.component_name:
            try:  # a live chart (viz_ui/app/live_chart.py): the figure is in the component's packed data
                kind, text = "plotly", unpack(el.bidi_component.bytes).get("figure", "")
            except (ValueError, AttributeError):
                kind, text = "plotly", ""
        elif etype == "bidi_component" and "viz_class_bell" in el.bidi_component.component_name:
            kind, text = "bell", ""
            self._draw_bell(path, el.bidi_component.id, delta.fragment_id, el.bidi_component.json)
        elif etype in WIDGETS:
            widget = getattr(el, etype)
            kind, text, wid = f"widget:{etype}", widget.label, widget.id
            if getattr(widget, "set_value", False):
                self.widget_values.pop(wid, None)  # the server set it: it knows the value
        else:
            kind, text = etype or "", ""
        # a figure is known by its JSON (the message's hash also covers a live chart's revision, Python's str hash,
        # which differs between replicas)
        digest = hashlib.sha1(text.encode()).hexdigest() if kind == "plotly" else msg.hash
        self.shown[path] = Shown(kind, text, self._run_id, delta.fragment_id, wid, digest)

    # ---- auto-reruns (st.fragment(run_every=...)) -----------------------------------------------------------
    def _start_auto(self, fragment_id: str, interval: float) -> None:
        old = self._auto.get(fragment_id)
        if old is not None and old[0] == interval:
            return
        self._stop_auto(fragment_id)
        self._auto[fragment_id] = (interval, asyncio.create_task(self._tick(fragment_id, interval)))

    async def _tick(self, fragment_id: str, interval: float) -> None:
        start = time.perf_counter()
        k = 0
        while True:  # setInterval: a fixed rate, whether or not the last rerun has finished
            k += 1
            await asyncio.sleep(max(0.0, start + k * interval - time.perf_counter()))
            await self.rerun(fragment_id, auto=True)

    def _stop_auto(self, fragment_id: str | None = None) -> None:
        for fid in ([fragment_id] if fragment_id else list(self._auto)):
            entry = self._auto.pop(fid, None)
            if entry is not None:
                entry[1].cancel()

    # ---- the class bell (viz_ui/classroom/bell.js) --------------------------------------------------------
    def _draw_bell(self, path: tuple, component_id: str, fragment_id: str, data_json: str) -> None:
        data = json.loads(data_json)
        if self._bell is not None and self._bell["path"] == path and not self._bell["task"].done() \
                and self._bell["data"]["url"] == data["url"]:
            self._bell.update(data=data, component_id=component_id, fragment_id=fragment_id)  # the same loop
            return
        if self._bell is not None:
            self._bell["task"].cancel()
        self._bell = {"path": path, "data": data, "component_id": component_id, "fragment_id": fragment_id}
        self._bell["task"] = asyncio.get_running_loop().create_task(self._ring(self._bell))

    def _bell_shown(self, path: tuple) -> bool:
        return self.shown.get(path) is not None and self.shown[path].kind == "bell" and not self._closing

    async def _ring(self, bell: dict) -> None:
        seen, rung, delay = bell["data"]["news"], None, 0.0
        connection = None  # kept alive between requests, as the browser's fetch does
        try:
            while True:
                try:
                    if connection is None:
                        parts = urlsplit(self.base)
                        connection = await asyncio.open_connection(parts.hostname, parts.port or 80)
                    status, body, keep = await self._get(connection, f"/{bell['data']['url']}?seen={seen}")
                    if not keep:
                        connection[1].close()
                        connection = None
                    delay = 0.0
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    if connection is not None:
                        connection[1].close()
                        connection = None
                    delay = min(10.0, 2 * delay if delay else 0.5)
                    await asyncio.sleep(delay)
                    continue
                if not self._bell_shown(bell["path"]):
                    return  # left the page: the frontend's cleanup aborted the request
                if status == 404:
                    news = "gone"
                elif status == 200:
                    news = json.loads(body).get("news")
                else:
                    delay = min(10.0, 2 * delay if delay else 0.5)
                    await asyncio.sleep(delay)
                    continue
                if news != rung and (news == "gone" or _bell_differs(news, bell["data"])):
                    rung = news
                    aggregator = _make_trigger_id(bell["component_id"], "events")
                    self.widget_values[aggregator] = WidgetState(
                        id=aggregator, json_trigger_value=json.dumps([{"event": "news", "value": news}]))
                    self.rings += 1
                    await self.rerun(fragment_id=bell["fragment_id"])
                    del self.widget_values[aggregator]  # a trigger counts once
                if news == "gone":
                    return
                seen = news
        finally:
            if connection is not None:
                connection[1].close()

    async def _get(self, connection, target: str) -> tuple[int, bytes, bool]:
        """A GET of ``target`` (a path with its query) on an open keep-alive ``connection`` (reader, writer) to this
        client's server, with its cookies: (status, body, whether the connection stays open)."""
        reader, writer = connection
        parts = urlsplit(self.base)
        writer.write(f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\n{self._cookie_line()}\r\n".encode())
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        length = next((int(line.split(":", 1)[1]) for line in head.split("\r\n")
                       if line.lower().startswith("content-length:")), None)
        if length is None:
            raise ValueError("a news answer without Content-Length")
        body = await reader.readexactly(length)
        return int(head.split(" ", 2)[1]), body, "connection: close" not in head.lower()


def _bell_differs(news: str, data: dict) -> bool:
    """bell.js's ``differs``: a new view (while following), question or reveal."""
    if news == data["news"]:
        return False
    view, _, question = news.partition(":")
    shown, _, asked = data["news"].partition(":")
    return (data["following"] and view != shown) or question != asked


def _plotly_title(spec: str) -> str:
    """A Plotly figure's title text from its JSON spec ("" when none)."""
    try:
        title = json.loads(spec).get("layout", {}).get("title", "")
    except (ValueError, AttributeError):
        return ""
    return title.get("text", "") if isinstance(title, dict) else str(title)
