"""A ``streamlit run`` of the app on a free port, for the browser benchmarks."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextmanager
def app_server(port: int | None = None, root: Path = ROOT, args: list[str] | tuple[str, ...] = (),
               env: dict[str, str] | None = None):
    """Yield ``(url, process)`` of a running app (on ``port``, or a free one; the app in the folder ``root``, by
    default this checkout, served as the README starts it: ``serve.py``, with its routes, where the folder has one,
    else ``app.py``; ``args`` passed to the app after ``--``, e.g. ``["--model", path]``; ``env``: the server's environment, by default this process's); stopped afterwards."""
    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    script = root / "serve.py" if (root / "serve.py").is_file() else root / "app.py"
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(script), "--server.port", str(port),
                             *(["--", *args] if args else [])],
                            cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if urllib.request.urlopen(url + "/_stcore/health", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.25)
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
