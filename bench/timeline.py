"""Scrubbing the training timeline: how long a step change takes to redraw (issue 17: ≤ 300 ms at 64 tokens).

On the shipped timeline (assets/timelines/induction-2l), with the text twice (63 tokens):

1. the server's work for one step change, in process: the snapshot's attention patterns and greedy sample (a step's
   first visit), building the page's figures of the step (the grid and the head; a step's first visit, then cached;
   and the losses' marks) and serialising them as the live charts do (every visit) (median of N, ms);
2. in Chromium at 1280×800 against ``streamlit run``, before and after: the page of an earlier commit (``--before``,
   by default the release before the live charts) and this checkout's, run in turns (ABBA) so that the
   machine's load hits both alike. ArrowRight on the step slider, then: the frame that shows the next snapshot's
   head (timed inside the page from the keydown's own timestamp, as bench/latency.py), the frame after the last
   figure stopped changing (Streamlit's own Plotly element draws each new chart twice), and the main-thread CPU time
   for the change (thread time from a Chrome trace: the part that another process's load inflates least). At a
   step's first visit, and again once every step is cached. Each with the 1-minute load average (``uptime``):
   this machine's 2 cores are shared, so run several rounds and read the spread.

    .venv/bin/python bench/timeline.py [--repeats 5] [--rounds 3] [--tokens 64] [--before REV] [--port P]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote

from common import ROOT, show
from server import CHROMIUM_ARGS, app_server

TIMELINE = ROOT / "assets" / "timelines" / "induction-2l"
BEFORE = "4f0084a"  # page 6 before the live charts: three st.plotly_chart figures drawn anew at each step (4825ddf: four)
VIEWPORT = {"width": 1280, "height": 800}
TRACE_CATEGORIES = ["toplevel", "devtools.timeline", "disabled-by-default-devtools.timeline", "blink.user_timing"]


def text_of(n_tokens: int) -> tuple[str, int]:
    """A text whose shown form on the page (the text twice, joined by a line break) has about ``n_tokens`` tokens
    under the timeline's tokenizer, cut from the tests' held-out story; and that count."""
    from viz_model.training.timeline import load_timeline
    tok = load_timeline(TIMELINE).tokenizer
    ids = tok.encode((ROOT / "tests" / "data" / "heldout.txt").read_text(encoding="utf-8")).ids
    text = tok.decode(ids[: (n_tokens - 1) // 2]).strip()
    return text, len(tok.encode(f"{text}\n{text}").ids)


def server_side(text: str, repeats: int) -> dict[str, float]:
    """Median ms of the server's work for one step change, each part measured on its own, as the page does it: what
    it computes and builds per (snapshot, text) at a step's first visit (viz_ui.timeline_state caches it), and what
    it sends at every visit (the grid and the head serialised as the live charts do, the losses' figure with the
    step's marks; the scores figure and the losses' own figure, the same at every step, are built once)."""
    import plotly.io

    from viz_model.sampling import generate
    from viz_model.training.timeline import load_timeline, phase_change, snapshot_scores
    from viz_ui.figures import attention_grid, attention_heatmap
    from viz_ui.timeline_state import step_view
    from viz_ui.timeline_view import curves_height, grid_margins, head_margins, loss_curves, loss_step

    loaded = load_timeline(TIMELINE)
    tl, tok, cfg = loaded.timeline, loaded.tokenizer, loaded.models[0].cfg
    scores = {k: v.numpy() for k, v in snapshot_scores(loaded.models).items()}
    phase = phase_change(tl.steps, scores["induction"].reshape(len(tl.steps), -1).max(1).tolist())
    display = (1.0, "light")
    base = loss_curves(tl.steps, tl.train_loss, tl.valid_loss, None, phase, curves_height(cfg.n_layers * cfg.n_heads),
                       display)
    times: dict[str, list[float]] = defaultdict(list)
    for r in range(repeats + 1):
        i = (r * 7) % len(tl.steps)
        model, step = loaded.models[i], tl.steps[i]
        t0 = time.perf_counter()
        view = step_view(model, tok, f"{text}\n{text}")
        t1 = time.perf_counter()
        generate(model, tok.encode(text).ids, 30, temperature=0.0)
        t2 = time.perf_counter()
        figs = [attention_grid(view.patterns, labels=view.labels, display=display,
                               patch=dict(title=dict(text=f"All heads at step {step:,}"),
                                          margin=grid_margins(cfg.n_layers)))[0],
                attention_heatmap(view.patterns[1, 2], view.labels, f"Layer 1, head 2 at step {step:,}",
                                  patch=dict(margin=head_margins(view.labels)), display=display)]
        marks = loss_step(tl.steps, tl.train_loss, tl.valid_loss, step, phase)
        t3 = time.perf_counter()
        for f in figs + [base]:  # as viz_ui.live_chart does (the losses' figure is sent again with its marks)
            plotly.io.to_json(f, validate=False)
        json.dumps(marks)
        t4 = time.perf_counter()
        if r:  # the first round warms up
            for name, dt in (("attention patterns (first visit)", t1 - t0),
                             ("greedy sample, 30 tokens (first visit)", t2 - t1),
                             ("building the grid, the head and the losses' marks (first visit)", t3 - t2),
                             ("serialising the step's 3 changed charts (every visit)", t4 - t3)):
                times[name].append(dt * 1000)
    return {name: statistics.median(v) for name, v in times.items()}


# Timed inside the page (see bench/latency.py): from the keydown's timestamp to the frame after ``text`` appeared in a
# figure title ("shown"), and to the frame after the last change inside any Plotly figure ("settled"; read once
# nothing changed there for QUIET ms).
ARM = """([text]) => {
  window.__shown = null; window.__paint = null; window.__last = null;
  let start = null;
  document.addEventListener('keydown', e => { if (start === null) start = e.timeStamp; }, {capture: true, once: true});
  if (window.__mo) window.__mo.disconnect();
  const frame = f => requestAnimationFrame(() => requestAnimationFrame(f));
  const plotted = () => {
    window.__last = performance.now();
    frame(() => { window.__paint = performance.now() - start; });
  };
  window.__mo = new MutationObserver(records => {
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


def step_change(page, slider, text: str) -> tuple[float, float]:
    """ArrowRight on ``slider``: ms until the frame showing ``text`` in a figure title, and until every figure
    settled."""
    page.evaluate(ARM, [text])
    slider.press("ArrowRight")
    page.wait_for_function("window.__shown > 0", timeout=120_000)
    page.wait_for_function(f"performance.now() - window.__last > {QUIET} && window.__paint !== null", timeout=120_000)
    return page.evaluate("[window.__shown, window.__paint]")


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
            shown, settled = [], []
            for k in range(1, repeats + 2):
                slider.focus()
                page.evaluate("performance.mark('s')")
                a, b = step_change(page, slider, f"Layer 1, head 2 at step {steps[start + k]:,}")
                page.evaluate("performance.mark('e')")
                shown.append(a)
                settled.append(b)
            cpu = main_thread_cpu(browser.stop_tracing())
            out[case] = {"shown": statistics.median(shown[1:]), "settled": statistics.median(settled[1:]),
                         "cpu": statistics.median(cpu[1:])}
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
    args = p.parse_args()
    text, n = text_of(args.tokens)
    if not args.no_server:
        server = server_side(text, args.repeats)
        show(f"Server work for one step change ({n} tokens, median of {args.repeats}, ms)",
             [{"part": k, "ms": v} for k, v in server.items()])
    rows, results = [], defaultdict(lambda: defaultdict(list))
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
                                 "shown ms": v["shown"], "settled ms": v["settled"], "main-thread CPU ms": v["cpu"]})
                    for k, x in v.items():
                        results[case, label][k].append(x)
                    results[case, label]["load"].append(load)
    show(f"Each round: step change → next snapshot in Chromium, 1280×800 ({n} tokens, median of {args.repeats} "
         "step changes; first dropped)", rows)

    def spread(v: list[float]) -> str:
        return f"{statistics.median(v):,.0f} ({min(v):,.0f}–{max(v):,.0f})"

    summary = []
    for (case, label), v in results.items():
        summary.append({"case": case, "page": label, "shown ms": spread(v["shown"]),
                        "settled ms": spread(v["settled"]), "main-thread CPU ms": spread(v["cpu"]),
                        "load (1 min)": f"{min(v['load']):.1f}–{max(v['load']):.1f}"})
    show(f"Before / after over {args.rounds} rounds: median of the rounds' medians (min–max)", summary,
         "shown: the frame that shows the next snapshot's head (the last figure); settled: the frame after the last "
         "figure stopped changing. Target (issue 17): ≤ 300 ms at 64 tokens.")


if __name__ == "__main__":
    main()
