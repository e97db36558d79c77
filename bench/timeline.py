"""Scrubbing the training timeline: how long a step change takes to redraw (issue 17: ≤ 300 ms at 64 tokens).

Two tables, on the shipped timeline (assets/timelines/induction-2l):

1. the server's work for one step change, in process: the snapshot's trace of the text (uncached, as at a
   step's first visit), its greedy sample, and building every figure of the step (median of N, ms);
2. in Chromium against ``streamlit run``: ArrowRight on the step slider → the frame that shows the next
   snapshot's head (timed inside the page from the keydown's own timestamp, as bench/latency.py), at the
   first visit of each step and again once every step is cached.

    .venv/bin/python bench/timeline.py [--repeats 5] [--tokens 64]
"""

from __future__ import annotations

import argparse
import statistics
import time
from urllib.parse import quote

from common import ROOT, show
from latency import timed
from server import CHROMIUM_ARGS, app_server

TIMELINE = ROOT / "assets" / "timelines" / "induction-2l"


def text_of(n_tokens: int) -> tuple[str, int]:
    """A text whose shown form on the page (the text twice, joined by a line break) has about ``n_tokens`` tokens
    under the timeline's tokenizer, cut from the tests' held-out story; and that count."""
    from viz_model.training.timeline import load_timeline
    tok = load_timeline(TIMELINE).tokenizer
    ids = tok.encode((ROOT / "tests" / "data" / "heldout.txt").read_text(encoding="utf-8")).ids
    text = tok.decode(ids[: (n_tokens - 1) // 2]).strip()
    return text, len(tok.encode(f"{text}\n{text}").ids)


def server_side(text: str, repeats: int) -> dict[str, float]:
    """Median ms of the server's work for one step change, each part measured on its own."""
    from viz_model.training.timeline import load_timeline, phase_change, snapshot_scores
    from viz_ui.figures import attention_grid, attention_heatmap
    from viz_ui.heads import overview_patterns
    from viz_ui.timeline_view import loss_curves, score_lines
    from viz_ui.trace import run_trace
    from viz_model.sampling import generate

    loaded = load_timeline(TIMELINE)
    tl, tok = loaded.timeline, loaded.tokenizer
    scores = {k: v.numpy() for k, v in snapshot_scores(loaded.models).items()}
    best = scores["induction"].reshape(len(tl.steps), -1).max(1).tolist()
    phase = phase_change(tl.steps, best)
    shown = f"{text}\n{text}"
    times: dict[str, list[float]] = {"trace (run_with_cache)": [], "greedy sample (30 tokens)": [],
                                     "figures (4)": []}
    for r in range(repeats):
        i = (r * 7) % len(tl.steps)
        model, step = loaded.models[i], tl.steps[i]
        t0 = time.perf_counter()
        trace = run_trace(model, tok, shown)
        t1 = time.perf_counter()
        generate(model, tok.encode(text).ids, 30, temperature=0.0)
        t2 = time.perf_counter()
        loss_curves(tl.steps, tl.train_loss, tl.valid_loss, step, phase)
        score_lines(tl.steps, {"previous-token": scores["previous-token"], "induction": scores["induction"]}, step, phase)
        attention_heatmap(trace.arrays["blocks.1.attn.hook_pattern"][2], trace.labels, f"at step {step:,}")
        attention_grid(*overview_patterns(trace.arrays, 2)[:1], labels=trace.labels)
        t3 = time.perf_counter()
        for name, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
            times[name].append(dt * 1000)
    return {name: statistics.median(v) for name, v in times.items()}


def browser(text: str, repeats: int) -> dict[str, float]:
    """Median ms from ArrowRight on the step slider to the frame showing the next snapshot's head."""
    import json

    from playwright.sync_api import sync_playwright
    steps = json.loads((TIMELINE / "timeline.json").read_text())["steps"]
    out = {}
    with app_server() as (url, _), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for label in ("first visit of each step", "every step cached"):
            start = len(steps) // 3
            page.goto(f"{url}/timeline?text={quote(text)}&train_step={steps[start]}&tl_layer=1&tl_head=2")
            page.get_by_text(f"Layer 1, head 2 at step {steps[start]:,}").first.wait_for(timeout=180_000)
            slider = page.get_by_role("slider", name="Training step (snapshots, log-spaced)")
            got = []
            for k in range(1, repeats + 2):
                target = steps[start + k]
                slider.focus()
                got.append(timed(page, lambda: slider.press("ArrowRight"), ".js-plotly-plot .gtitle",
                                 f"Layer 1, head 2 at step {target:,}"))
                page.wait_for_timeout(400)
            out[label] = statistics.median(got[1:])
        browser.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--tokens", type=int, default=64)
    args = p.parse_args()
    text, n = text_of(args.tokens)
    server = server_side(text, args.repeats)
    show(f"Server work for one step change ({n} tokens, median of {args.repeats}, ms)",
         [{"part": k, "ms": v} for k, v in server.items()] + [{"part": "total", "ms": sum(server.values())}])
    shown = browser(text, args.repeats)
    show(f"Step change → next snapshot drawn in Chromium ({n} tokens, median of {args.repeats}, ms; first try dropped)",
         [{"case": k, "ms": v} for k, v in shown.items()], "Target (issue 17): ≤ 300 ms at 64 tokens.")


if __name__ == "__main__":
    main()
