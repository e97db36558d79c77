"""Scrubbing the training timeline: how long a step change takes to redraw (issue 17: ≤ 300 ms at 64 tokens).

On the shipped timeline (assets/timelines/induction-2l), with the text twice (63 tokens):

1. the server's work, in process: what page 6 computes when a text is first shown (every snapshot's attention
   patterns, and the frames of the grid and the head for every step, which the browser draws step changes from), a
   step's greedy sample (computed when the user stops on a step), and what it sends again at each rerun;
2. in Chromium at 1280×800 against ``streamlit run``, before and after: the page of an earlier commit (``--before``,
   by default the release before the step scrubber) and this checkout's, run in turns (ABBA) so that the machine's
   load hits both alike. ArrowRight on the step slider, then: the frame that shows the next snapshot's head (timed
   inside the page from the keydown's own timestamp, as bench/latency.py), the frame after the last figure stopped
   changing, the frame where the server's part shows the step (the heading of the step's greedy sample: the server
   has heard of the step and rerun), and the main-thread CPU time from the keydown until then (thread time from a
   Chrome trace: the part that another process's load inflates least). At a step's first visit, and again once
   every step is cached. Each with the 1-minute load average (``uptime``): this machine's 2 cores are shared, so
   run several rounds and read the spread.

    .venv/bin/python bench/timeline.py [--repeats 5] [--rounds 3] [--tokens 64] [--before REV] [--port P] [--busy N]

``--busy N`` keeps N more processes busy during the browser runs (another class's work on the same server).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote

from common import ROOT, save_results, show
from server import CHROMIUM_ARGS, app_server

TIMELINE = ROOT / "assets" / "timelines" / "induction-2l"
BEFORE = "ff6124a"  # page 6 before the step scrubber: a step change went to the server, which sent new figures
# (4f0084a: three st.plotly_chart figures drawn anew at each step; 4825ddf: four)
VIEWPORT = {"width": 1280, "height": 800}
TRACE_CATEGORIES = ["toplevel", "devtools.timeline", "disabled-by-default-devtools.timeline", "blink.user_timing"]


def text_of(n_tokens: int) -> tuple[str, int]:
    """A text whose shown form on the page (the text twice, joined by a line break) has about ``n_tokens`` tokens
    under the timeline's tokenizer, cut from the tests' held-out story; and that count."""
    from viz_model.loading.timeline import load_timeline
    tok = load_timeline(TIMELINE).tokenizer
    ids = tok.encode((ROOT / "tests" / "data" / "heldout.txt").read_text(encoding="utf-8")).ids
    text = tok.decode(ids[: (n_tokens - 1) // 2]).strip()
    return text, len(tok.encode(f"{text}\n{text}").ids)


def server_side(text: str, repeats: int) -> dict[str, float]:
    """Median ms of the server's work on page 6, each part measured on its own (caches cleared between repeats):
    at a text's first view, every snapshot's attention patterns and the frames of every step (the grid's and the
    head's; the losses' are built once per timeline); a step's greedy sample (at a step's first stop); and, at every
    rerun, serialising the charts' data as Streamlit does (``json.dumps`` of each component's data)."""
    import plotly.io

    from viz_model.sampling import generate
    from viz_ui.app import timeline as ts

    key = str(TIMELINE)
    shown = f"{text}\n{text}"
    loaded = ts.get_timeline(key)
    tl, tok = loaded.timeline, loaded.tokenizer
    ts.get_timeline_scores(key)
    display = (1.0, "light")
    times: dict[str, list[float]] = defaultdict(list)
    for r in range(repeats + 1):
        for cache in (ts.get_step_view, ts.get_grid_frames, ts.get_head_frames, ts.get_grid_figure, ts.get_head_figure):
            cache.clear()
        t0 = time.perf_counter()
        for i in range(len(tl.steps)):
            ts.get_step_view(key, i, shown)
        t1 = time.perf_counter()
        lo, hi = ts.step_window(key, len(tl.steps) - 1, shown)
        grid, head = ts.get_grid_frames(key, shown, lo, hi), ts.get_head_frames(key, shown, 1, 2, lo, hi)
        figs = [ts.get_grid_figure(key, lo, shown, display), ts.get_head_figure(key, lo, shown, 1, 2, display)]
        t2 = time.perf_counter()
        i = (r * 7) % len(tl.steps)
        generate(loaded.models[i], tok.encode(text).ids, 30, temperature=0.0)
        t3 = time.perf_counter()
        for fig, frames in zip(figs, (grid, head)):  # as viz_ui.app.live_chart and Streamlit do at every rerun
            json.dumps({"figure": plotly.io.to_json(fig, validate=False), "frames": frames})
        t4 = time.perf_counter()
        if r:  # the first round warms up
            for name, dt in ((f"attention patterns of all {len(tl.steps)} snapshots, ms (a text's first view)", t1 - t0),
                             (f"frames of the grid and the head, {hi - lo} steps, ms (a text's first view)", t2 - t1),
                             ("greedy sample, 30 tokens, ms (a step's first stop)", t3 - t2),
                             ("serialising the grid's and the head's data, ms (every rerun)", t4 - t3)):
                times[name].append(dt * 1000)
    times["the grid's and the head's frames, MB of JSON (sent once per text)"] = [(len(grid) + len(head)) / 1e6]
    return {name: statistics.median(v) for name, v in times.items()}


# Timed inside the page (see bench/latency.py): from the keydown's timestamp to the frame after ``text`` appeared in a
# figure title ("shown"), to the frame after the last change inside any Plotly figure ("settled"; read once
# nothing changed there for QUIET ms), and to the frame after a heading showed ``synced`` ("synced": the server's
# rerun for the step drawn).
ARM = """([text, synced]) => {
  window.__shown = null; window.__paint = null; window.__last = null; window.__synced = null;
  let start = null;
  document.addEventListener('keydown', e => { if (start === null) start = e.timeStamp; }, {capture: true, once: true});
  if (window.__mo) window.__mo.disconnect();
  const frame = f => requestAnimationFrame(() => requestAnimationFrame(f));
  const plotted = () => {
    window.__last = performance.now();
    frame(() => { window.__paint = performance.now() - start; });
  };
  window.__mo = new MutationObserver(records => {
    if (window.__synced === null && [...document.querySelectorAll('h3')].some(h => h.textContent.includes(synced))) {
      window.__synced = 0;
      frame(() => { window.__synced = performance.now() - start; });
    }
    let inPlot = false;
    for (const r of records) {
      const nodes = r.type === 'characterData' ? [r.target] : r.addedNodes;
      for (const n of nodes) {
        const e = n.nodeType === 1 ? n : n.parentElement;
        if (!e || !e.closest('.js-plotly-plot')) continue;
        inPlot = true;
        if (window.__shown === null && e.closest('.gtitle') && (n.textContent || '').includes(text)) {
          window.__shown = 0;
          frame(() => { window.__shown = performance.now() - start; });
        }
      }
    }
    if (inPlot) plotted();
  });
  window.__mo.observe(document.body, {subtree: true, childList: true, characterData: true});
}"""
QUIET = 600


def step_change(page, slider, text: str, synced: str) -> tuple[float, float, float]:
    """ArrowRight on ``slider``: ms until the frame showing ``text`` in a figure title, until every figure settled,
    and until a heading shows ``synced``."""
    page.evaluate(ARM, [text, synced])
    slider.press("ArrowRight")
    page.wait_for_function("window.__shown > 0", timeout=120_000)
    page.wait_for_function("window.__synced > 0", timeout=120_000)
    page.wait_for_function(f"performance.now() - window.__last > {QUIET} && window.__paint !== null", timeout=120_000)
    return page.evaluate("[window.__shown, window.__paint, window.__synced]")


def main_thread_cpu(raw: bytes) -> list[float]:
    """The renderer main thread's CPU time (ms, thread time of its tasks) in each window between the user-timing
    marks ``s`` and ``e`` of a Chrome trace."""
    data = json.loads(raw)
    events = data["traceEvents"] if isinstance(data, dict) else data
    tasks = [e for e in events if e.get("name") == "RunTask" and e.get("ph") == "X"]
    busy: dict = defaultdict(float)
    for e in tasks:
        busy[e["pid"], e["tid"]] += e.get("dur", 0)
    main = max(busy, key=busy.get)
    marks = sorted((e["ts"], e["name"]) for e in events
                   if e.get("name") in ("s", "e") and "user_timing" in e.get("cat", ""))
    starts, ends = [t for t, n in marks if n == "s"], [t for t, n in marks if n == "e"]
    mine = [e for e in tasks if (e["pid"], e["tid"]) == main]
    return [sum(e.get("tdur", e.get("dur", 0)) for e in mine if a <= e["ts"] <= z) / 1000 for a, z in zip(starts, ends)]


def browser_run(url: str, text: str, repeats: int) -> dict[str, dict[str, float]]:
    """Medians over ``repeats`` step changes (one more first, dropped): {case: {"shown", "settled", "cpu"}}, for a
    step's first visit and for a step already visited (the server's caches warm; a new browser session)."""
    from playwright.sync_api import sync_playwright
    steps = json.loads((TIMELINE / "timeline.json").read_text())["steps"]
    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        for case in ("first visit of each step", "every step cached"):
            start = len(steps) // 3
            page.goto(f"{url}/timeline?text={quote(text)}&train_step={steps[start]}&tl_layer=1&tl_head=2")
            page.get_by_text(f"Layer 1, head 2 at step {steps[start]:,}").first.wait_for(timeout=180_000)
            page.wait_for_timeout(1500)
            slider = page.get_by_role("slider", name="Training step (snapshots, log-spaced)")
            browser.start_tracing(page=page, categories=TRACE_CATEGORIES)
            shown, settled, synced = [], [], []
            for k in range(1, repeats + 2):
                slider.focus()
                page.evaluate("performance.mark('s')")
                a, b, c = step_change(page, slider, f"Layer 1, head 2 at step {steps[start + k]:,}",
                                      f"What the model writes at step {steps[start + k]:,}")
                page.evaluate("performance.mark('e')")
                shown.append(a)
                settled.append(b)
                synced.append(c)
            cpu = main_thread_cpu(browser.stop_tracing())
            out[case] = {"shown": statistics.median(shown[1:]), "settled": statistics.median(settled[1:]),
                         "synced": statistics.median(synced[1:]), "cpu": statistics.median(cpu[1:])}
        browser.close()
    return out


def checkout(rev: str, into: Path) -> Path:
    """The files of commit ``rev`` of this repository, extracted into ``into`` (``git archive``)."""
    with subprocess.Popen(["git", "-C", str(ROOT), "archive", rev], stdout=subprocess.PIPE) as git:
        with tarfile.open(fileobj=git.stdout, mode="r|") as tar:
            tar.extractall(into, filter="data")
    if git.wait():
        raise SystemExit(f"git archive {rev} failed")
    return into


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5, help="step changes per case (median; one more as warm-up)")
    p.add_argument("--rounds", type=int, default=3, help="before/after rounds, run in turns")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--before", default=BEFORE, help="the commit to compare with (default: %(default)s)")
    p.add_argument("--port", type=int, default=None,
                   help="the app's port (the before app's: the next one); default: a free one")
    p.add_argument("--no-server", action="store_true", help="skip the in-process table")
    p.add_argument("--busy", type=int, default=0,
                   help="processes that keep a core busy during the browser runs (a class server's other work)")
    args = p.parse_args()
    text, n = text_of(args.tokens)
    if not args.no_server:
        server = server_side(text, args.repeats)
        show(f"Server work on page 6 ({n} tokens, median of {args.repeats})",
             [{"part": k, "value": v} for k, v in server.items()])
    rows, results = [], defaultdict(lambda: defaultdict(list))
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        browser_rounds(args, text, rows, results)
    finally:
        for proc in busy:
            proc.kill()
    show(f"Each round: step change → next snapshot in Chromium, 1280×800 ({n} tokens, median of {args.repeats} "
         f"step changes; first dropped; {args.busy} busy processes)", rows)
    summary(args, results)
    save_results()


def browser_rounds(args, text: str, rows: list, results: dict) -> None:
    """``args.rounds`` rounds of :func:`browser_run` on the before and after pages, in turns; rows and results
    appended to ``rows`` and ``results[case, page][measure]``."""
    with tempfile.TemporaryDirectory() as tmp:
        roots = {f"before ({args.before})": checkout(args.before, Path(tmp)), "after (this checkout)": ROOT}
        for r in range(args.rounds):
            order = list(roots) if r % 2 == 0 else list(reversed(roots))  # ABBA: neither side always goes first
            for label in order:
                load = os.getloadavg()[0]
                port = None if args.port is None else args.port + (label.startswith("before"))
                with app_server(port, roots[label]) as (url, _):
                    got = browser_run(url, text, args.repeats)
                for case, v in got.items():
                    rows.append({"round": r + 1, "page": label, "case": case, "load (1 min)": load,
                                 "shown ms": v["shown"], "settled ms": v["settled"], "server's part ms": v["synced"],
                                 "main-thread CPU ms": v["cpu"]})
                    for k, x in v.items():
                        results[case, label][k].append(x)
                    results[case, label]["load"].append(load)


def summary(args, results: dict) -> None:
    """The table of the rounds' medians per case and page."""
    def spread(v: list[float]) -> str:
        return f"{statistics.median(v):,.0f} ({min(v):,.0f}–{max(v):,.0f})"

    table = []
    for (case, label), v in results.items():
        table.append({"case": case, "page": label, "shown ms": spread(v["shown"]),
                      "settled ms": spread(v["settled"]), "server's part ms": spread(v["synced"]),
                      "main-thread CPU ms": spread(v["cpu"]), "load (1 min)": f"{min(v['load']):.1f}–{max(v['load']):.1f}"})
    show(f"Before / after over {args.rounds} rounds ({args.busy} busy processes): median of the rounds' medians "
         "(min–max)", table,
         "shown: the frame that shows the next snapshot's head (the last figure); settled: the frame after the last "
         "figure stopped changing; server's part: the frame that shows the step's greedy sample (the server heard of "
         "the step: after the user stopped for 250 ms, on the scrubber); main-thread CPU: from the keydown until the "
         "server's part settled. Target (issue 17): ≤ 300 ms at 64 tokens.")


if __name__ == "__main__":
    main()
