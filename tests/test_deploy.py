"""deploy/local.sh: two Streamlit replicas behind HAProxy with Redis, on loopback, driven by a real browser
(Debian's Chromium through Playwright): the ready line and PIDs, the sticky cookie, a teacher and one student per
replica following a class, the failover of a student whose replica is killed (still in the class), a clean stop;
and the one-line errors of bad arguments. The compose files are checked for what can be checked without Docker."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import expect, sync_playwright

from conftest import ROOT
from test_browser import settled, until_url

LOCAL_SH = ROOT / "deploy" / "local.sh"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
COOKIE = "VIZ_REPLICA"
TEXT = "Tom saw a big red ball."
TEXT_2 = "The cat sat on the mat."  # "·cat" is one token of the shipped model

pytestmark = pytest.mark.skipif(not (Path("/usr/sbin/haproxy").exists() or Path("/usr/bin/haproxy").exists())
                                or not Path("/usr/bin/redis-server").exists(),
                                reason="Debian's haproxy and redis-server are needed (bash .ci/run installs them)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def run_local(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(LOCAL_SH), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHON": sys.executable})


class Local:
    """``deploy/local.sh --replicas N`` running in the background, its stdout read line by line."""

    def __init__(self, tmp: Path, replicas: int = 2):
        self.port, self.pids_file, self.logs = free_port(), tmp / "pids", tmp / "logs"
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            ["bash", str(LOCAL_SH), "--replicas", str(replicas), "--port", str(self.port), "--pids",
             str(self.pids_file), "--logs", str(self.logs)],
            stdout=subprocess.PIPE, stderr=open(tmp / "stderr", "wb"), text=True,
            env={**os.environ, "PYTHON": sys.executable})
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("ready "):
                self._ready.set()
        self._ready.set()

    def wait_ready(self, timeout: float = 120) -> str:
        self._ready.wait(timeout)
        ready = [line for line in self.lines if line.startswith("ready ")]
        assert ready, f"no ready line: {self.lines} {self.log_tail()}"
        return ready[0].split()[1]

    def log_tail(self) -> str:
        return " | ".join(f"{p.name}: {p.read_text(errors='replace')[-600:]}" for p in sorted(self.logs.glob("*.log")))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def replica(context) -> str:
    values = [c["value"] for c in context.cookies() if c["name"] == COOKIE]
    return values[0] if values else ""


def test_the_compose_files_agree_with_each_other_and_haproxy_accepts_its_configuration():
    import yaml
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    check = subprocess.run([haproxy, "-c", "-f", str(ROOT / "deploy" / "haproxy.cfg")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    cfg = (ROOT / "deploy" / "haproxy.cfg").read_text()
    assert f"cookie {COOKIE} insert indirect nocache" in cfg and "timeout tunnel" in cfg and "option redispatch" in cfg
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    services = compose["services"]
    assert services["app"]["deploy"]["replicas"] >= 2
    assert (ROOT / "deploy" / services["app"]["build"]["context"] / services["app"]["build"]["dockerfile"]).is_file()
    assert services["app"]["environment"]["VIZ_CLASS_STORE"] == "redis://redis:6379/0"
    # HAProxy's servers are the app service's replicas on the port the image listens on
    assert "server-template app 1-32 app:8501" in cfg and "EXPOSE 8501" in (ROOT / "deploy" / "Dockerfile").read_text()
    assert any(v.startswith("./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg") for v in services["haproxy"]["volumes"])
    assert services["redis"]["command"][-2:] == ["--appendonly", "yes"]
    volume = services["redis"]["volumes"][0].split(":")
    assert volume[1] == "/data" and volume[0] in compose["volumes"]
    # Every file the image copies is in the repository
    for line in (ROOT / "deploy" / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), line


def test_bad_arguments_and_a_busy_port_give_one_line(tmp_path):
    for args, message in [(["--replicas", "0", "--port", "8700"], "--replicas must be a whole number"),
                          (["--replicas", "2"], "--replicas and --port are required"),
                          (["--replicas", "2", "--port", "80000"], "--port must be a port number"),
                          (["--replicas", "2", "--port", "8700", "--redis-url", "http://x"],
                           "--redis-url must look like"),
                          (["--replicas", "2", "--port", "8700", "--frobnicate"], "unknown argument '--frobnicate'")]:
        done = run_local(*args)
        assert done.returncode == 2, (args, done)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (args, done.stderr)
        assert done.stdout == ""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_local("--replicas", "1", "--port", str(port))
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: port {port} is busy on 127.0.0.1 (choose another with --port)"


def open_classroom(page) -> None:
    """Unfold the sidebar's Classroom expander (the class controls are in it)."""
    page.locator("[data-testid=stSidebar] summary").filter(has_text="Classroom").click()
    expect(page.get_by_role("button", name=re.compile("Start a class|End the class"))).to_be_visible()


def test_a_class_over_two_replicas_survives_the_loss_of_one(tmp_path):
    """One student per replica follows the teacher; the replica of a student (not the teacher's) is killed: that
    student's page reconnects through HAProxy to the other replica, is still in the class and follows the next
    change. Then SIGTERM stops everything local.sh started."""
    local = Local(tmp_path)
    try:
        url = local.wait_ready()
        assert url == f"http://127.0.0.1:{local.port}"
        redis_lines = [line for line in local.lines if line.startswith("redis ")]
        assert len(redis_lines) == 1 and local.lines.index(redis_lines[0]) < len(local.lines) - 1  # before "ready"
        redis_url = redis_lines[0].split()[1]
        redis_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
        pids = [int(p) for p in local.pids_file.read_text().split()]
        children = psutil.Process(local.proc.pid).children()
        assert len(pids) == 2 and set(pids) <= {c.pid for c in children}
        for pid in pids:  # each replica is `python -m streamlit run serve.py` with the Redis URL as its class store
            assert psutil.Process(pid).cmdline()[:5] == [sys.executable, "-m", "streamlit", "run", "serve.py"]
            assert psutil.Process(pid).environ()["VIZ_CLASS_STORE"] == redis_url
        assert len({psutil.Process(p).environ()["STREAMLIT_SERVER_COOKIE_SECRET"] for p in pids}) == 1

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            teacher_context = browser.new_context(viewport={"width": 1280, "height": 800})
            teacher = teacher_context.new_page()
            teacher.goto(url + "/")
            expect(teacher.get_by_role("heading", name="Inside a Transformer", level=1)).to_be_visible(timeout=90_000)
            expect(teacher.locator(".toks")).to_be_visible()
            mine = replica(teacher_context)  # the sticky cookie HAProxy set
            assert mine in ("r1", "r2"), teacher_context.cookies()
            other = {"r1": "r2", "r2": "r1"}[mine]
            settled(teacher)
            open_classroom(teacher)
            start_button = teacher.get_by_role("button", name="Start a class")
            # a click lost once in about 40 CI runs (the URL unchanged after 20 s; as in test_class_browser.py, cause
            # not found): tried again, unless the first one started the class slowly (the button is gone)
            until_url(teacher, lambda: start_button.click() if start_button.is_visible() else None,
                      re.compile(r"class=[A-Z2-9]{6}&teach="))
            code = re.search(r"class=([A-Z2-9]{6})", teacher.url).group(1)

            students = {}
            for r in ("r1", "r2"):  # one student per replica: their cookie names it
                context = browser.new_context(viewport={"width": 1024, "height": 768})
                context.add_cookies([{"name": COOKIE, "value": r, "url": url}])
                students[r] = context.new_page()
                students[r].goto(f"{url}/?class={code}")
            for r, s in students.items():
                expect(s.get_by_text(f"Following class {code}")).to_be_visible(timeout=90_000)
                assert replica(s.context) == r
            expect(teacher.get_by_text("2 students following")).to_be_visible(timeout=30_000)

            box = teacher.get_by_label("Text", exact=True)
            box.fill(TEXT)
            box.press("Control+Enter")
            for s in students.values():
                expect(s.get_by_label("Text", exact=True)).to_have_value(TEXT, timeout=30_000)

            # The other replica dies: its student's page reconnects through HAProxy to the teacher's replica.
            moved = students[other]
            with moved.expect_websocket(timeout=30_000):
                os.kill(pids[int(other[1:]) - 1], signal.SIGKILL)
            expect(moved.get_by_label("Text", exact=True)).to_be_enabled(timeout=30_000)  # disabled while offline
            assert replica(moved.context) == mine
            expect(moved.get_by_text(f"Following class {code}")).to_be_visible()
            # ... and still follows: the teacher's next change reaches both students.
            box.fill(TEXT_2)
            box.press("Control+Enter")
            for s in students.values():
                expect(s.get_by_label("Text", exact=True)).to_have_value(TEXT_2, timeout=30_000)
                expect(s.locator(".toks")).to_contain_text("·cat", timeout=30_000)
            browser.close()
        assert f"replica {other} (pid {pids[int(other[1:]) - 1]}) exited" in (tmp_path / "stderr").read_text()
    finally:
        rc = local.stop()
    assert rc == 0, (tmp_path / "stderr").read_text()
    # Nothing it started is left: replicas, HAProxy, Redis.
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, [(p.pid, p.cmdline()) for p in alive]
    assert not listening(local.port) and not listening(redis_port)
