"""What one student's poll costs the server (issue 25): N students (Playwright contexts in Debian's Chromium) follow
a class on one ``streamlit run`` whose class store is a Redis started here (Debian's redis-server), while nobody
changes anything. The server's CPU time over a window, less its idle CPU over as long, divided by the polls the
browsers sent (websocket frames counted in the browsers), is the server's cost of one poll (the fragment's run and
Streamlit's handling of the rerun request and its answer). Also: the three store calls of a poll, timed here.

    .venv/bin/python bench/class_poll.py [--students 6] [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import time

import psutil
from common import save_results, show
from server import CHROMIUM_ARGS, app_server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--students", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ["VIZ_CLASS_STORE"] = f"redis://127.0.0.1:{port}/0"
    try:
        time.sleep(0.5)
        from viz_ui.classroom import class_store
        store = class_store()
        code, token = store.create()
        store.publish(code, token, {"page": "app.py", "params": {}})
        started = time.perf_counter()
        for i in range(300):
            store.version(code)
            store.follow(code, f"bench{i % 10}", True)
            store.question(code)
        store_ms = (time.perf_counter() - started) / 300 * 1000
        from playwright.sync_api import sync_playwright
        with app_server() as (url, proc), sync_playwright() as p:
            server = psutil.Process(proc.pid)
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            warm = browser.new_page()
            warm.goto(url + "/")  # the model loaded and the landing page's caches filled before the baseline
            warm.get_by_role("heading", name="Inside a Transformer", level=1).wait_for(timeout=120_000)
            warm.close()
            time.sleep(3)
            c0 = cpu_seconds(server)
            time.sleep(args.seconds)
            idle = cpu_seconds(server) - c0
            sent = [0]
            pages = []
            for _ in range(args.students):
                page = browser.new_context().new_page()
                page.on("websocket", lambda ws: ws.on("framesent", lambda _: sent.__setitem__(0, sent[0] + 1)))
                page.goto(f"{url}/?class={code}")
                pages.append(page)
            for page in pages:
                try:
                    page.get_by_text(f"Following class {code}").wait_for(timeout=120_000)
                except Exception:
                    page.screenshot(path="/tmp/class_poll_failed.png")
                    raise
            pages[0].wait_for_timeout(5000)  # (Playwright's sync API delivers the frame events while it waits)
            c1, f1 = cpu_seconds(server), sent[0]
            pages[0].wait_for_timeout(args.seconds * 1000)
            busy, polls = cpu_seconds(server) - c1, sent[0] - f1
            following = store.followers(code)
            browser.close()
        per_poll = (busy - idle) / max(polls, 1) * 1000
        show("One poll's cost to the server (nobody changes anything)",
             [{"students": args.students, "following": following, "window s": args.seconds, "polls": polls,
               "server CPU s (idle)": round(idle, 2), "server CPU s (polling)": round(busy, 2),
               "server CPU ms / poll": round(per_poll, 2), "store calls ms / poll": round(store_ms, 2),
               "load avg": round(os.getloadavg()[0], 1)}],
             "polls: websocket frames the browsers sent in the window (each poll is one rerun request).")
    finally:
        redis.terminate()
        redis.wait(timeout=10)
    save_results()


if __name__ == "__main__":
    main()
