"""What one rerun of a page sends, and when: the server's side of typing → attention, without a browser.

A client of Streamlit's own protocol (``bench/st_client.py``) opens a page of ``streamlit run app.py`` (shipped model),
then types a new text of ``--tokens`` tokens into the sidebar's Text box ``--tries`` times (every text new, so no
cache answers). For each rerun: when each message arrived after the rerun request (ms), of which kind, and how big.
Prints the last rerun's timeline, then per-rerun rows (the script's end, the arrival of each figure) and their
medians. The first two reruns are dropped (warm-up).

This times the server alone: in a browser the same rerun takes about twice as long on 2 cores, because Chromium's main
thread renders the messages meanwhile (docs/performance.md).

    .venv/bin/python bench/rerun_timeline.py [--page attention] [--tokens 64] [--tries 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from common import save_results, show
from latency import texts
from server import app_server
from st_client import StClient


class TimedClient(StClient):
    """A client that logs ``(ms after t0, message type, element kind, bytes)`` for every message while ``t0`` is set."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.t0: float | None = None
        self.log: list[tuple[float, str, str, int]] = []

    def _handle(self, msg) -> None:
        if self.t0 is not None:
            which, kind = msg.WhichOneof("type"), ""
            if which == "delta":
                delta = msg.delta
                kind = (delta.new_element.WhichOneof("type") if delta.WhichOneof("type") == "new_element"
                        else delta.WhichOneof("type"))
            self.log.append(((time.perf_counter() - self.t0) * 1000, which, kind or "", msg.ByteSize()))
        super()._handle(msg)


async def measure(url: str, page: str, n_tokens: int, tries: int) -> tuple[list[dict], list[tuple]]:
    done = asyncio.Event()
    client = TimedClient(url, page, on_finished=lambda *_: done.set())
    task = asyncio.create_task(client.run())
    await asyncio.wait_for(done.wait(), 180)
    rows = []
    for i, text in enumerate(texts(n_tokens, tries + 2, skip=300)):
        await asyncio.sleep(1.0)
        done.clear()
        client.log, client.t0 = [], time.perf_counter()
        await client.set_widget("Text", string_value=text)
        await asyncio.wait_for(done.wait(), 120)
        await asyncio.sleep(0.3)
        if i < 2:
            continue
        log = client.log
        figures = [r for r in log if r[2] == "bidi_component" and r[3] > 5_000]
        rows.append({"rerun": i - 1, "messages": len(log), "MB": sum(r[3] for r in log) / 2**20,
                     "script finished ms": next(r[0] for r in log if r[1] == "script_finished"),
                     **{f"figure {k + 1} ms": r[0] for k, r in enumerate(figures)}})
    last = client.log
    await client.close()
    task.cancel()
    return rows, last


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--page", default="attention", help="the page's URL path (default: %(default)s)")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--tries", type=int, default=8)
    args = p.parse_args()
    if not 1 <= args.tries <= 150:
        p.error("--tries must be 1 to 150 (more would repeat a text, answered from the server's caches)")
    with app_server() as (url, _):
        rows, last = asyncio.run(measure(url, args.page, args.tokens, args.tries))
    show(f"The last rerun's messages, page {args.page}, {args.tokens} tokens",
         [{"ms": round(t, 1), "message": which, "element": kind, "bytes": size} for t, which, kind, size in last])
    medians = {k: statistics.median(r[k] for r in rows if k in r) for k in rows[0] if k != "rerun"}
    show(f"Each rerun on a new text (page {args.page}, {args.tokens} tokens)", [*rows, {"rerun": "median", **medians}],
         "ms after the rerun request; a figure: a live chart's message over 5 kB, in the order sent.")
    save_results()


if __name__ == "__main__":
    main()
