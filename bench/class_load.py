"""A class at once: N browser sessions (Playwright contexts in Debian's Chromium) on one server, each typing
its own text at the same moment, as when a teacher shares the link. Checks that no session sees an error
or another session's text, and reports median / 95th-percentile latency and the server's peak memory.

    .venv/bin/python bench/class_load.py [--sessions 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from common import show
from server import CHROMIUM_ARGS, app_server, peak_rss_mb

from viz_model import load_model  # noqa: E402  (common puts the project on the path)

TOKENIZER = load_model()[1]

NAMES = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "Max", "Nia", "Oli",
         "Pia", "Quin", "Rosa", "Sam", "Tom", "Uma", "Vic", "Wes", "Xia", "Yan", "Zoe", "Abe", "Bea", "Cy", "Dot"]


async def student(browser, url: str, i: int, start: asyncio.Event, results: list) -> None:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    await page.goto(url + "/tokens", timeout=300_000)  # 30 browsers open at once on the same 2 cores
    box = page.get_by_label("Text", exact=True)
    await box.wait_for(timeout=300_000)
    text = f"{NAMES[i % len(NAMES)]} {i} saw a big red ball in the park."
    await start.wait()
    await box.fill(text)
    t0 = time.perf_counter()
    await box.press("Control+Enter")
    ok = True
    ids = TOKENIZER.encode(text).ids
    try:  # every token chip of this session's own sentence, with its id, in place
        for k in range(len(ids)):
            await page.locator(f'.tok[title="position {k}, id {ids[k]}"]').first.wait_for(timeout=300_000)
    except Exception:
        ok = False
    elapsed = (time.perf_counter() - t0) * 1000
    titles = await page.locator(".tok").evaluate_all("els => els.map(e => e.title)")
    others = [] if titles == [f"position {k}, id {t}" for k, t in enumerate(ids)] else titles
    errors = await page.locator("[data-testid=stException], [data-testid=stAlertContentError]").count()
    results.append({"session": i, "ms": elapsed, "own text": ok, "other tokens seen": others, "errors": errors})
    await context.close()


async def run(n: int) -> None:
    from playwright.async_api import async_playwright
    with app_server() as (url, proc):
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            start, results = asyncio.Event(), []
            tasks = [asyncio.create_task(student(browser, url, i, start, results)) for i in range(n)]
            await asyncio.sleep(0)
            while sum(1 for t in tasks if not t.done()) and len(results) == 0 and not start.is_set():
                await asyncio.sleep(2)
                start.set()  # everyone types at (nearly) the same moment once the pages are open
            await asyncio.gather(*tasks)
            await browser.close()
        peak = peak_rss_mb(proc.pid)
    ms = sorted(r["ms"] for r in results)
    bad = [r for r in results if not r["own text"] or r["other tokens seen"] or r["errors"]]
    show(f"{n} sessions typing at once", [{
        "sessions": n, "median ms": statistics.median(ms), "p95 ms": ms[max(0, int(0.95 * len(ms)) - 1)],
        "sessions with errors or another's text": len(bad), "server peak RSS MB": peak}],
        "Each session types its own sentence; latency is from Ctrl+Enter to its own tokens shown.")
    for r in bad:
        print("problem:", r)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=30)
    asyncio.run(run(p.parse_args().sessions))


if __name__ == "__main__":
    main()
