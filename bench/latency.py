"""Interaction latency in a real browser (Playwright + Debian's Chromium against ``streamlit run``, shipped model),
before and after: the app of an earlier commit (``--before``, by default the previous release) and this checkout's,
both running, measured in turns (round-robin; the order flips every round) so that the machine's load hits both
alike. Rows (issue 26):

- typing → attention: Ctrl+Enter after a new text of 16 / 64 / 256 tokens → the frame that shows the single-head
  heatmap's new first tick (page 3); and → page 3 settled: the same keydown → the end of the last chart drawing of
  that rerun (all seven charts of page 3; Plotly.react timed in the page, the page then quiet for 0.8 s);
- page switch → first figure: a click on "3 · Attention" in the navigation (from page 1) → the frame that shows the
  all-heads grid;
- temperature → chart: ArrowRight on the temperature slider (page 9) → the frame whose output chart title shows the
  new T;
- Cause and effect, head removed / chosen (24 tokens): Backspace in "Heads switched off" (the last head of two
  removed), then Enter on a typed head name (a head chosen) → the frame that shows the intact-vs-ablated output
  chart of the new set ("Intact vs L0H1, L2H3 off"). Every try on a new text, so nothing comes from a cache.

Timed inside the page, so that Playwright's polling adds nothing: from the keydown's (pointerdown's) own timestamp to
the second animation frame after the awaited text appeared in a Plotly figure (a MutationObserver sees it). Each
series' first try in a round is dropped (warm-up). Median and 90th percentile over every kept try of every round,
with the 1-minute load average (``uptime``) at each round: this machine's 2 cores are shared.

    .venv/bin/python bench/latency.py [--before COMMIT] [--rounds 3] [--repeats 3] [--tokens 16,64,256]

The before app runs from a ``git worktree add --detach`` of the commit in a temporary folder (with a link to this
checkout's ``.venv``), removed afterwards.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

import numpy as np

from common import ROOT, save_results, show
from server import CHROMIUM_ARGS, app_server

logging.getLogger("streamlit.runtime.caching").setLevel(logging.ERROR)  # no runtime here: tick_for's imports warn
BEFORE = "d94e532"  # the previous release
VIEWPORT = {"width": 1280, "height": 800}
ABLATION_TOKENS = 24
# issue 26's goals, ms (median)
GOALS = {"typing → attention, 64 tokens": 250, "typing → attention, 256 tokens": 350,
         "page switch → first figure": 300, "temperature → chart": 120,
         "Cause and effect: head removed → output": 300, "Cause and effect: head chosen → output": 300}


SOURCES = ("heldout.txt", "dictionary_heldout.txt", "stories.txt")  # tests/data: stories the model never saw
STRIDE = 7  # tokens between the starts of two texts


def texts(n_tokens: int, count: int, skip: int = 0) -> list[str]:
    """``count`` different texts of about ``n_tokens`` tokens (decoding and encoding again may merge a few), cut
    :data:`STRIDE` tokens apart from the tests' held-out stories (:data:`SOURCES`, about 3,500 tokens, read round and
    round); ``skip`` texts left out first (a new round gets new texts, so that no server cache answers).

    Raises:
        ValueError: when ``skip + count`` is more than the different texts the stories give (about 500): one would
            be a text asked for before, answered from the server's caches.
    """
    from viz_model import load_model
    _, tok = load_model()
    text = "\n\n".join((ROOT / "tests" / "data" / name).read_text(encoding="utf-8").strip() for name in SOURCES)
    ids = tok.encode(text + "\n\n").ids
    if skip + count > len(ids) // STRIDE:
        raise ValueError(f"texts {skip}..{skip + count - 1}: the stories give {len(ids) // STRIDE} different ones")
    ids = ids * (2 + n_tokens // len(ids))
    return [tok.decode(ids[i * STRIDE:i * STRIDE + n_tokens]) for i in range(skip, skip + count)]


def tick_for(text: str, query: int | None = None) -> str:
    """The first tick label ("pos token") of the text's single-head heatmap: position 0, or, for a text longer than
    128 tokens, the start of the 128-position window around the query position (``query``, the one in the page's
    link, kept from one text to the next while it fits; by default the last token), as page 3 places it."""
    from viz_model import load_model
    from viz_ui.analysis.text_trace import token_label
    from viz_ui.app.layout import SQUARE_SIDE
    _, tok = load_model()
    ids = tok.encode(text).ids
    n = len(ids)
    centre = n - 1 if query is None or not 0 <= query < n else query
    start = min(max(0, centre - SQUARE_SIDE // 2), n - SQUARE_SIDE) if n > SQUARE_SIDE else 0
    return f"{start} {token_label(tok, ids[start])}"


def query_of(page, shown: str) -> int:
    """The query position page 3 holds while it shows the text ``shown``: the one in its link, else the default
    (the last token). The page keeps it for the next text while it fits (then it is in the link)."""
    from viz_model import load_model
    value = parse_qs(urlparse(page.url).query).get("query")
    if value and value[0].isdigit():
        return int(value[0])
    return len(load_model()[1].encode(shown).ids) - 1


# The clock starts at the event's own timestamp and stops two animation frames after the awaited text appeared in a
# node inside ``selector`` (then it is drawn).
ARM = """([selector, text, event]) => {
  window.__done = null;
  let start = null;
  document.addEventListener(event, e => { if (start === null) start = e.timeStamp; }, {capture: true, once: true});
  const hit = n => { const el = n.nodeType === 1 ? n : n.parentElement;
    return el && el.closest(selector) && (n.textContent || '').includes(text); };
  if (window.__mo) window.__mo.disconnect();
  const mo = window.__mo = new MutationObserver(records => {
    for (const r of records) {
      const nodes = r.type === 'characterData' ? [r.target] : r.addedNodes;
      for (const n of nodes) if (hit(n)) {
        mo.disconnect();
        requestAnimationFrame(() => requestAnimationFrame(() => { window.__done = performance.now() - start; }));
        return;
      }
    }
  });
  mo.observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def timed(page, action, selector: str, text: str, event: str = "keydown") -> float:
    """Milliseconds from ``event`` (fired by ``action()``) to the frame that shows ``text`` in ``selector``; NaN (and
    a line on stderr) when it did not appear within 30 s (counted as a miss in the table)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    page.evaluate(ARM, [selector, text, event])
    action()
    try:
        page.wait_for_function("window.__done !== null", timeout=30_000)
    except PlaywrightTimeout:
        print(f"missed: {text!r} never appeared in {selector} ({page.url})", file=sys.stderr, flush=True)
        return math.nan
    return page.evaluate("window.__done")


# Every Plotly.react of a live chart, timed: the end of the last one after a keydown is when the page settled (every
# chart of the rerun drawn). Installed before the page's scripts run (Plotly is set on window later, by live_chart.js).
DRAWS = """(() => {
  let plotly;
  window.__drawEnds = [];
  document.addEventListener("keydown", e => { if (window.__keyAt === null) window.__keyAt = e.timeStamp; },
                            {capture: true});
  Object.defineProperty(window, "Plotly", {configurable: true, get: () => plotly, set: value => {
    plotly = value;
    const react = value.react;
    value.react = (...args) => react(...args).then(gd => { window.__drawEnds.push(performance.now()); return gd; });
  }});
})()"""


def settled(page, quiet_ms: int = 800, limit_ms: int = 15_000) -> float:
    """Milliseconds from the keydown armed by ``window.__keyAt = null`` to the end of the last chart drawing, once no
    chart has been drawn for ``quiet_ms``; NaN when nothing was drawn."""
    page.wait_for_function(f"""() => {{ const ends = window.__drawEnds.filter(t => t > window.__keyAt);
        return ends.length && performance.now() - ends[ends.length - 1] > {quiet_ms}; }}""", timeout=limit_ms)
    return page.evaluate("() => { const ends = window.__drawEnds.filter(t => t > window.__keyAt);"
                         " return ends.length ? ends[ends.length - 1] - window.__keyAt : NaN; }")


def typing(page, url: str, n: int, repeats: int, skip: int, settle: list[float] | None = None) -> list[float]:
    """Ctrl+Enter after a new text of ``n`` tokens → the single-head heatmap's new first tick (page 3); with a list
    ``settle``, each try's keydown → the end of the last chart drawn (every chart of page 3) is appended to it (the page
    needs :data:`DRAWS` installed)."""
    from playwright.sync_api import expect
    page.goto(url + "/attention")
    expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=120_000)
    box = page.get_by_label("Text", exact=True)
    expect(box).not_to_have_value("", timeout=60_000)
    shown = box.input_value()
    out, previous = [], tick_for(shown, query_of(page, shown))
    for text in texts(n, repeats * 4, skip):
        tick = tick_for(text, query_of(page, shown))
        if tick == previous:
            continue  # the view would not visibly change
        previous, shown = tick, text
        box.fill(text)
        if settle is not None:
            page.evaluate("window.__keyAt = null")
        out.append(timed(page, lambda: box.press("Control+Enter"), ".js-plotly-plot", tick))
        if settle is not None:
            settle.append(settled(page))
        page.wait_for_timeout(400)  # let the rest of the page settle before the next try
        if len(out) > repeats:
            break
    return out


def page_switch(page, url: str, repeats: int) -> list[float]:
    """A click on "3 · Attention" (from page 1) → the frame that shows the all-heads grid."""
    out = []
    page.goto(url + "/tokens")
    for _ in range(repeats + 1):
        page.get_by_role("heading", name="Tokens", exact=True).wait_for(timeout=60_000)
        page.wait_for_timeout(400)
        link = page.get_by_role("link", name="3 · Attention", exact=True)
        out.append(timed(page, link.click, ".js-plotly-plot", "All heads", event="pointerdown"))
        page.wait_for_timeout(400)
        page.get_by_role("link", name="1 · Tokens", exact=True).click()
    return out


def temperature(page, url: str, repeats: int) -> list[float]:
    """ArrowRight on the temperature slider (page 9) → the output chart's title with the new T."""
    page.goto(url + "/output")
    slider = page.get_by_role("slider", name="Temperature T (0 = greedy)")
    slider.wait_for(timeout=120_000)
    page.wait_for_timeout(1000)
    out = []
    for i in range(repeats + 1):
        slider.focus()
        out.append(timed(page, lambda: slider.press("ArrowRight"), ".js-plotly-plot .gtitle",
                         f"T = {1.0 + 0.05 * (i + 1):g}"))
        page.wait_for_timeout(400)
    return out


def heads_for(k: int) -> tuple[str, str, str]:
    """Three different heads of the shipped model (6 layers × 8 heads) for try ``k``: two to start with, and one
    to choose."""
    names = [f"L{layer}H{head}" for layer in range(6) for head in range(8)]
    a, b, c = (names[(k * 3 + j * 17) % len(names)] for j in range(3))
    return a, b, c


def in_order(*heads: str) -> list[str]:
    """Head names sorted by layer, then head (the order of the page's head sets and titles)."""
    return sorted(heads, key=lambda h: tuple(map(int, h[1:].split("H"))))


def title_of(*heads: str) -> str:
    """The intact-vs-ablated output chart's title for a head set."""
    return f"Intact vs {', '.join(in_order(*heads))} off"


def ablation(page, url: str, repeats: int, skip: int) -> tuple[list[float], list[float]]:
    """Cause and effect at 24 tokens, each try on a new text: two heads off, Backspace in "Heads switched off"
    (the last one removed) → the output chart of the other; then a third head's name typed and Enter → the output
    chart of the two. Returns (removed ms, chosen ms)."""
    removed, chosen = [], []
    for k, text in enumerate(texts(ABLATION_TOKENS, repeats + 1, skip)):
        *pair, c = heads_for(skip + k)
        a, b = in_order(*pair)  # the multiselect shows them in this order: Backspace removes b
        page.goto(f"{url}/interventions?text={quote(text)}&ablate={a},{b}")
        page.locator(".js-plotly-plot .gtitle", has_text=title_of(a, b)).first.wait_for(timeout=120_000)
        box = page.get_by_role("combobox", name="Heads switched off")  # the multiselect's input
        page.wait_for_timeout(1500)  # the effect map below is computed last
        box.focus()
        removed.append(timed(page, lambda: box.press("Backspace"), ".js-plotly-plot .gtitle", title_of(a)))
        page.wait_for_timeout(1500)
        box.focus()
        box.press_sequentially(c)
        page.get_by_role("option", name=c, exact=True).wait_for(timeout=30_000)
        chosen.append(timed(page, lambda: box.press("Enter"), ".js-plotly-plot .gtitle", title_of(a, c)))
        page.wait_for_timeout(1000)
    return removed, chosen


def side_run(browser, url: str, args, skip: int) -> dict[str, list[float]]:
    """Every row once on the app at ``url`` (a new browser context), texts from number ``skip`` on; each series'
    first try dropped."""
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(DRAWS)
    page = context.new_page()
    got = {}
    try:
        for n in [int(n) for n in args.tokens.split(",") if n.strip()]:
            settle = []
            got[f"typing → attention, {n} tokens"] = typing(page, url, n, args.repeats, skip, settle)[1:]
            got[f"typing → page 3 settled, {n} tokens"] = settle[1:]
        got["page switch → first figure"] = page_switch(page, url, args.repeats)[1:]
        got["temperature → chart"] = temperature(page, url, args.repeats)[1:]
        if not args.no_ablation:
            removed, chosen = ablation(page, url, args.repeats, skip)
            got["Cause and effect: head removed → output"] = removed[1:]
            got["Cause and effect: head chosen → output"] = chosen[1:]
    finally:
        context.close()
    return got


def warm_up(browser, url: str) -> None:
    """The first reruns of a fresh server are slower (imports, first traces): a few texts on page 3 first."""
    from playwright.sync_api import expect
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(url + "/attention")
    box = page.get_by_label("Text", exact=True)
    expect(box).not_to_have_value("", timeout=180_000)
    for text in texts(24, 3, 480):
        box.fill(text)
        box.press("Control+Enter")
        page.wait_for_timeout(1500)
    context.close()


@contextmanager
def worktree(rev: str):
    """A detached ``git worktree`` of ``rev`` in a temporary folder, with a link to this checkout's ``.venv``;
    removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), rev], check=True,
                       capture_output=True)
        try:
            (where / ".venv").symlink_to(ROOT / ".venv")
            yield where
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], check=False,
                           capture_output=True)


def revision(rev: str, root: Path = ROOT) -> str:
    """The short hash of ``rev`` (with "+ changes" for a checkout whose tracked files differ from it)."""
    short = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", rev], check=True, capture_output=True,
                           text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return short + (" + changes" if rev == "HEAD" and dirty else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default=BEFORE, help="the commit to compare with (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each side once per round, in turns")
    p.add_argument("--repeats", type=int, default=3, help="kept tries per series and round (one more first, dropped)")
    p.add_argument("--tokens", default="16,64,256", help="text lengths for typing → attention, comma-separated (empty: no typing rows)")
    p.add_argument("--no-ablation", action="store_true", help="leave out the Cause and effect rows")
    args = p.parse_args()
    from playwright.sync_api import sync_playwright
    sides = {"before": revision(args.before), "now": revision("HEAD")}
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    rounds = []
    with ExitStack() as stack:
        roots = {"before": stack.enter_context(worktree(args.before)), "now": ROOT}
        urls = {side: stack.enter_context(app_server(None, root))[0] for side, root in roots.items()}
        pw = stack.enter_context(sync_playwright())
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for side in sides:
            warm_up(browser, urls[side])
        for r in range(args.rounds):
            for side in (list(sides) if r % 2 == 0 else list(reversed(sides))):
                load = os.getloadavg()[0]
                got = side_run(browser, urls[side], args, skip=r * max(40, 4 * args.repeats))
                for row, v in got.items():
                    times[row, side] += v
                    kept = [x for x in v if not math.isnan(x)]
                    rounds.append({"round": r + 1, "side": side, "row": row, "load (1 min)": load,
                                   "median ms": statistics.median(kept) if kept else math.nan, "tries": len(kept),
                                   "missed": len(v) - len(kept)})
                    print(rounds[-1], file=sys.stderr, flush=True)
        browser.close()
    show("Each round (median of its tries)", rounds)
    table = []
    for row in dict.fromkeys(row for row, _ in times):
        line = {"interaction": row}
        for side in sides:
            v = [x for x in times[row, side] if not math.isnan(x)]
            line[f"{side} median"] = statistics.median(v) if v else math.nan
            line[f"{side} p90"] = float(np.percentile(v, 90)) if v else math.nan
        line["goal ≤ ms"] = GOALS.get(row, "")
        line["tries"] = len(times[row, "now"])
        line["missed (before / now)"] = " / ".join(str(sum(map(math.isnan, times[row, side]))) for side in sides)
        table.append(line)
    loads = [x["load (1 min)"] for x in rounds]
    show(f"Interaction latency, ms: before = {sides['before']}, now = {sides['now']}; Chromium {VIEWPORT['width']}×"
         f"{VIEWPORT['height']}, {args.rounds} rounds in turns, load average {min(loads):.1f}–{max(loads):.1f}", table,
         "Timed in the page: keydown (pointerdown for the page switch) → the frame showing the awaited text.")
    save_results()


if __name__ == "__main__":
    main()
