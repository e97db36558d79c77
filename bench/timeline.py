"""Scrubbing the training timeline: how long a step change takes to redraw (issue 17: ≤ 300 ms at 64 tokens).

Two tables, on the shipped timeline (assets/timelines/induction-2l):

1. the server's work for one step change, in process: the snapshot's trace of the text (uncached, as at a
   step's first visit), its greedy sample, and building every figure of the step (median of N, ms);
2. in Chromium against ``streamlit run``: ArrowRight on the step slider → the frame that shows the next
   snapshot's head (timed inside the page from the keydown's own timestamp, as bench/latency.py), at the
   first visit of each step and again once every step is cached; and, in the same run, bench/latency.py's
   typing → attention page at the same length, as a reference for the machine's load.

    .venv/bin/python bench/timeline.py [--repeats 5] [--tokens 64]
"""

from __future__ import annotations

import argparse
import statistics
import time
from urllib.parse import quote

from common import ROOT, show
from latency import texts, tick_for, timed
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
    """Median ms of the server's work for one step change, each part measured on its own: what the page caches per
    (snapshot, text) at a step's first visit, and what it builds at every step change (the three figures, styled and
    serialised as ``st.plotly_chart`` does)."""
    import plotly.io
    import plotly.tools

    from viz_model.sampling import generate
    from viz_model.training.timeline import load_timeline, phase_change, snapshot_scores
    from viz_ui.figures import attention_grid, attention_heatmap, style_for_display
    from viz_ui.timeline_state import step_view
    from viz_ui.timeline_view import training_curves

    loaded = load_timeline(TIMELINE)
    tl, tok = loaded.timeline, loaded.tokenizer
    scores = {k: v.numpy() for k, v in snapshot_scores(loaded.models).items()}
    phase = phase_change(tl.steps, scores["induction"].reshape(len(tl.steps), -1).max(1).tolist())
    lines = {k: scores[k] for k in ("previous-token", "induction")}
    times: dict[str, list[float]] = {"attention patterns (first visit)": [], "greedy sample, 30 tokens (first visit)": [],
                                     "loss and scores figure": [], "head + all-heads figures": []}
    for r in range(repeats + 1):
        i = (r * 7) % len(tl.steps)
        model, step = loaded.models[i], tl.steps[i]
        t0 = time.perf_counter()
        view = step_view(model, tok, f"{text}\n{text}")
        t1 = time.perf_counter()
        generate(model, tok.encode(text).ids, 30, temperature=0.0)
        t2 = time.perf_counter()
        figs = [training_curves(tl.steps, tl.train_loss, tl.valid_loss, lines, step, phase)]
        t3 = time.perf_counter()
        figs += [attention_heatmap(view.patterns[1, 2], view.labels, f"at step {step:,}"),
                 attention_grid(view.patterns, labels=view.labels)[0]]
        t4 = time.perf_counter()
        for f in figs:  # as show_figure and st.plotly_chart do
            style_for_display(f)
            plotly.io.to_json(plotly.tools.return_figure_from_figure_or_data(f, True), validate=False)
        t5 = time.perf_counter()
        share = (t5 - t4) / 3  # styling and serialising, split evenly between the three figures
        if r:  # the first round warms up
            for name, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2 + share, t4 - t3 + 2 * share)):
                times[name].append(dt * 1000)
    return {name: statistics.median(v) for name, v in times.items()}


def browser(text: str, repeats: int, n_tokens: int) -> dict[str, float]:
    """Median ms from ArrowRight on the step slider to the frame showing the next snapshot's head."""
    import json

    from playwright.sync_api import expect, sync_playwright
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
        # the same measure on the attention page (bench/latency.py's typing → attention), in the same run: this
        # machine's load changes from hour to hour, the ratio much less
        page.goto(url + "/attention")
        box = page.get_by_label("Text", exact=True)
        expect(box).not_to_have_value("", timeout=120_000)
        typing, previous = [], tick_for(box.input_value())
        for other in texts(n_tokens, repeats * 3):
            tick = tick_for(other)
            if tick == previous or len(typing) > repeats:
                continue
            previous = tick
            box.fill(other)
            typing.append(timed(page, lambda: box.press("Control+Enter"), ".js-plotly-plot", tick))
            page.wait_for_timeout(300)
        out[f"reference: typing → attention page at {n_tokens} tokens"] = statistics.median(typing[1:])
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
    shown = browser(text, args.repeats, args.tokens)
    show(f"Step change → next snapshot drawn in Chromium ({n} tokens, median of {args.repeats}, ms; first try dropped)",
         [{"case": k, "ms": v} for k, v in shown.items()], "Target (issue 17): ≤ 300 ms at 64 tokens.")


if __name__ == "__main__":
    main()
