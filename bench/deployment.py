"""The replicated deployment on this machine's loopback, for bench/class_live.py: Redis (our own, append-only, so
that the benchmark can restart it) and ``deploy/local.sh --replicas N`` (HAProxy in front of N ``streamlit run``
replicas) using it; the processes' memory and CPU time from ``/proc``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis


def proc_status(pid: int) -> dict[str, float]:
    """``rss_mb`` (VmRSS) and ``peak_mb`` (VmHWM) of a process, from /proc (NaN once it has exited)."""
    out = {"rss_mb": float("nan"), "peak_mb": float("nan")}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out["rss_mb" if line.startswith("VmRSS") else "peak_mb"] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process in seconds (utime + stime in /proc/PID/stat; 0 once it has exited)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int, name: str) -> list[int]:
    """PIDs of the direct children of ``pid`` whose command name is ``name``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            comm, rest = stat.split("(", 1)[1].rsplit(")", 1)
            if comm == name and int(rest.split()[1]) == pid:
                found.append(int(entry.name))
    return found


class Deployment:
    """Redis on ``redis_port`` (append-only, in a temporary folder) and ``deploy/local.sh`` of ``root`` with
    ``replicas`` replicas and HAProxy on ``port``. A context manager: everything is stopped at the end.
    Attributes once started: ``url`` (HAProxy's), ``redis_url``, ``replica_pids``, ``haproxy_pid``, ``logs``."""

    def __init__(self, root: Path, replicas: int, port: int, redis_port: int, start_timeout: float = 300,
                 logs: Path | None = None):
        self.root, self.replicas, self.port, self.redis_port = root, replicas, port, redis_port
        self.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        self.url = f"http://127.0.0.1:{port}"
        self.start_timeout = start_timeout
        self._tmp = tempfile.TemporaryDirectory(prefix="class-live-")
        self.logs = Path(logs or self._tmp.name)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.redis_proc: subprocess.Popen | None = None
        self.local: subprocess.Popen | None = None
        self.replica_pids: list[int] = []
        self.haproxy_pid = 0

    def __enter__(self) -> Deployment:
        try:
            self.start_redis()
            self._start_local()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.local is not None and self.local.poll() is None:
            self.local.send_signal(signal.SIGTERM)  # local.sh stops the replicas and HAProxy
            try:
                self.local.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.local.kill()
        self.stop_redis()
        self._tmp.cleanup()

    # ---- Redis ------------------------------------------------------------------------------------------
    def start_redis(self) -> float:
        """Start Redis (append-only file in the log folder, kept across restarts); seconds until it answers."""
        t0 = time.perf_counter()
        (self.logs / "redis").mkdir(exist_ok=True)
        self.redis_proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.redis_port), "--dir", str(self.logs / "redis"),
             "--appendonly", "yes", "--save", "", "--daemonize", "no"],
            stdout=open(self.logs / "redis.log", "a"), stderr=subprocess.STDOUT)
        client = redis.Redis.from_url(self.redis_url)
        while True:
            try:
                client.ping()
                return time.perf_counter() - t0
            except redis.ConnectionError:
                if self.redis_proc.poll() is not None or time.perf_counter() - t0 > 30:
                    raise RuntimeError(f"Redis did not start: {(self.logs / 'redis.log').read_text()[-300:]}")
                time.sleep(0.05)
            finally:
                client.close()

    def stop_redis(self) -> None:
        """Stop Redis as a restart does (SIGTERM: it finishes writing its append-only file)."""
        if self.redis_proc is not None and self.redis_proc.poll() is None:
            self.redis_proc.terminate()
            self.redis_proc.wait(timeout=30)

    def restart_redis(self, down_s: float = 1.0) -> float:
        """Stop Redis, leave it down ``down_s`` seconds, start it again; the seconds it was unreachable."""
        t0 = time.perf_counter()
        self.stop_redis()
        time.sleep(down_s)
        self.start_redis()
        return time.perf_counter() - t0

    # ---- the replicas -------------------------------------------------------------------------------------
    def _start_local(self) -> None:
        pids = self.logs / "pids"
        env = {**os.environ, "PYTHON": sys.executable}
        self.local = subprocess.Popen(
            ["bash", str(self.root / "deploy" / "local.sh"), "--replicas", str(self.replicas), "--port", str(self.port),
             "--pids", str(pids), "--redis-url", self.redis_url, "--logs", str(self.logs / "local")],
            stdout=subprocess.PIPE, stderr=open(self.logs / "local.err", "w"), text=True, env=env, cwd=self.root)
        t0 = time.perf_counter()
        for line in self.local.stdout:  # "redis URL", then "ready URL"
            if line.startswith("ready "):
                break
            if time.perf_counter() - t0 > self.start_timeout:
                raise RuntimeError("deploy/local.sh did not say ready")
        else:
            raise RuntimeError(f"deploy/local.sh stopped: {(self.logs / 'local.err').read_text()[-500:]}")
        self.replica_pids = [int(p) for p in pids.read_text().split()]
        self.haproxy_pid = next(iter(children(self.local.pid, "haproxy")), 0)

    def kill_replica(self, index: int) -> int:
        """SIGKILL replica ``index`` (0-based: HAProxy's server ``r{index + 1}``), as a crash; its PID."""
        pid = self.replica_pids[index]
        os.kill(pid, signal.SIGKILL)
        return pid

    def haproxy_events(self) -> list[str]:
        """HAProxy's log lines saying that a replica went down or came back up (its health checks)."""
        log = self.logs / "local" / "haproxy.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        return [line for line in lines if " is DOWN" in line or " is UP" in line]

    def processes(self) -> dict[str, int]:
        """Name → PID of every server process: ``r1`` … (replicas), ``redis``, ``haproxy``."""
        named = {f"r{i + 1}": pid for i, pid in enumerate(self.replica_pids)}
        named["redis"] = self.redis_proc.pid if self.redis_proc else 0
        named["haproxy"] = self.haproxy_pid
        return named
