"""Interaction latency in a real browser (Playwright + Debian's Chromium against ``streamlit run``), on the
shipped model: Ctrl+Enter after typing → the attention view shows the new text; temperature slider moved →
the output chart shows the new T; page switch → first figure. At 16, 64 and 256 tokens, median of N.

    .venv/bin/python bench/latency.py [--repeats 5]

Targets (issue 7): typing → updated attention ≤ 300 ms median at 64 tokens; temperature → updated chart ≤ 150 ms.
Issue 13: typing → the landing page's whole-model figure and output chart redrawn, within the same 300 ms at 64.
"""

from __future__ import annotations

import argparse
import statistics

from common import ROOT, show
from server import CHROMIUM_ARGS, app_server


def texts(n_tokens: int, count: int) -> list[str]:
    """``count`` different texts of about ``n_tokens`` tokens (decoding and encoding again may merge a few), cut
    from the tests' held-out story (140 tokens), repeated as often as needed."""
    from viz_model import load_model
    _, tok = load_model()
    ids = tok.encode((ROOT / "tests" / "data" / "heldout.txt").read_text(encoding="utf-8")).ids
    ids = ids * (2 + n_tokens // len(ids))
    return [tok.decode(ids[i * 7:i * 7 + n_tokens]) for i in range(count)]


def last_label(text: str) -> str:
    """The label of the text's last token, which the landing page's output chart names in its title."""
    from viz_model import load_model
    from viz_ui.analysis.text_trace import token_label
    _, tok = load_model()
    return token_label(tok, tok.encode(text).ids[-1])


def tick_for(text: str) -> str:
    """The first tick label ("pos token") of the text's single-head heatmap: position 0, or the start of the
    128-position window around the last token for longer texts."""
    from viz_model import load_model
    from viz_ui.app.layout import SQUARE_SIDE
    from viz_ui.analysis.text_trace import token_label
    _, tok = load_model()
    ids = tok.encode(text).ids
    start = max(0, len(ids) - SQUARE_SIDE)
    return f"{start} {token_label(tok, ids[start])}"


# Timed inside the page, so that Playwright's polling (which waits for the busy page) adds nothing: the clock
# starts at the keydown/pointerdown event's own timestamp and stops at the first frame painted after the
# awaited text appeared in a Plotly figure (a MutationObserver sees it; two animation frames later it is drawn).
ARM = """([selector, text, event]) => {
  window.__done = null;
  let start = null;
  document.addEventListener(event, e => { if (start === null) start = e.timeStamp; }, {capture: true, once: true});
  const hit = n => { const el = n.nodeType === 1 ? n : n.parentElement;
    return el && el.closest(selector) && (n.textContent || '').includes(text); };
  const mo = new MutationObserver(records => {
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
    """Milliseconds from ``event`` (fired by ``action()``) to the frame that shows ``text`` in ``selector``."""
    page.evaluate(ARM, [selector, text, event])
    action()
    page.wait_for_function("window.__done !== null", timeout=120_000)
    return page.evaluate("window.__done")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--tokens", default="16,64,256", help="text lengths to time, comma-separated")
    args = p.parse_args()
    from playwright.sync_api import expect, sync_playwright
    rows = []
    with app_server() as (url, _), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url + "/attention")  # warm-up: the first reruns of a fresh server are slower
        box = page.get_by_label("Text", exact=True)
        expect(box).not_to_have_value("", timeout=120_000)
        for text in texts(24, 3):
            box.fill(text)
            box.press("Control+Enter")
            page.wait_for_timeout(1500)
        for n in map(int, args.tokens.split(",")):
            page.goto(url + "/attention")
            expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=120_000)
            box = page.get_by_label("Text", exact=True)
            expect(box).not_to_have_value("", timeout=60_000)
            typing, previous = [], tick_for(box.input_value())
            for text in texts(n, args.repeats * 3):
                tick = tick_for(text)
                if tick == previous or len(typing) > args.repeats:
                    continue  # the view would not visibly change
                previous = tick
                box.fill(text)
                typing.append(timed(page, lambda: box.press("Control+Enter"), ".js-plotly-plot", tick))
                page.wait_for_timeout(300)  # let the rest of the page settle before the next try
            page.goto(url + "/")  # the landing page: the model map, then the output chart titled by the last token
            expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=120_000)
            box = page.get_by_label("Text", exact=True)
            landing, previous = [], last_label(box.input_value())
            for text in texts(n, args.repeats * 3):
                label = last_label(text)
                if label == previous or len(landing) > args.repeats:
                    continue
                previous = label
                box.fill(text)
                landing.append(timed(page, lambda: box.press("Control+Enter"), ".js-plotly-plot .gtitle", f"after “{label}”"))
                page.wait_for_timeout(300)
            page.goto(url + "/output")
            slider = page.get_by_role("slider", name="Temperature T (0 = greedy)")
            slider.wait_for(timeout=120_000)
            temps = []
            for i in range(args.repeats + 1):
                slider.focus()
                temps.append(timed(page, lambda: slider.press("ArrowRight"), ".js-plotly-plot .gtitle",
                                   f"T = {1.0 + 0.05 * (i + 1):g}"))
                page.wait_for_timeout(300)
            switches = []
            for i in range(args.repeats + 1):
                page.get_by_role("link", name="1 · Tokens").click()
                page.get_by_role("heading", name="Tokens", exact=True).wait_for(timeout=60_000)
                page.wait_for_timeout(300)
                switches.append(timed(page, lambda: page.get_by_role("link", name="3 · Attention", exact=True).click(),
                                      ".js-plotly-plot", "All heads", event="pointerdown"))
            rows.append({"tokens": n, "typing → attention ms": statistics.median(typing[1:]),
                         "typing → landing ms": statistics.median(landing[1:]),
                         "temperature → chart ms": statistics.median(temps[1:]),
                         "page switch → figure ms": statistics.median(switches[1:])})
        browser.close()
    show("Interaction latency (median ms, timed in the page; first try of each dropped as warm-up)", rows,
         "Targets: typing → attention ≤ 300 ms at 64 tokens; temperature → chart ≤ 150 ms.")


if __name__ == "__main__":
    main()
