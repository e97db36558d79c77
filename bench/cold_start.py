"""Cold start: from launching ``streamlit run app.py`` to the first figure drawn in Debian's Chromium
(the attention page on the shipped model), median of several launches.

    .venv/bin/python bench/cold_start.py [--runs 3]

Target (issue 7): ≤ 4 s after installation.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time

from common import ROOT, save_results, show

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one(browser) -> tuple[float, float]:
    """Seconds to the server answering, and to the first Plotly figure on /attention."""
    port = free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        page = browser.new_page()
        while True:
            try:
                page.goto(f"http://127.0.0.1:{port}/attention", timeout=2000)
                break
            except Exception:
                time.sleep(0.05)
        served = time.perf_counter() - t0
        page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
        drawn = time.perf_counter() - t0
        page.close()
        return served, drawn
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        results = [one(browser) for _ in range(args.runs)]
        browser.close()
    show("Cold start (seconds from launching streamlit)", [
        {"measure": "page served", "median s": statistics.median(r[0] for r in results),
         "runs": ", ".join(f"{r[0]:.2f}" for r in results)},
        {"measure": "first figure drawn (/attention)", "median s": statistics.median(r[1] for r in results),
         "runs": ", ".join(f"{r[1]:.2f}" for r in results)}], "Target: first figure ≤ 4 s.")
    save_results()


if __name__ == "__main__":
    main()
