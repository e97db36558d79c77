"""What drawing page 3's single-head heatmap costs in Chromium, and which part of the figure costs it.

The head heatmap of ``--texts`` new texts of ``--tokens`` tokens (shipped model, layer 3 head 6, built and written as
the app sends it to a live chart: ``attention_heatmap`` → ``plain_figure`` → ``style_plain`` → ``plotly_json``), drawn
one after the other with ``Plotly.react`` (the plotly package's own plotly.min.js, as the app serves it) in an
otherwise empty page of Debian's Chromium, 1280×800; each try is timed from the call to the next frame after its
promise.
Variants of the same figures show where the time goes: its tick labels (Plotly measures each label's box), the margins
it sizes to them (automargin: with margins too small for the labels Plotly draws the chart a second time; "wide
margins, automargin kept" is how live charts now draw, with the margins of their last drawing), the heatmap's image.
In the app the same draw costs more: the page around it is larger and Streamlit renders its messages on the same
thread.

    .venv/bin/python bench/heatmap_draw.py [--tokens 64] [--texts 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics

from common import save_results, show
from latency import texts
from server import CHROMIUM_ARGS

# figure → figure, in the page (JavaScript)
VARIANTS = {
    "as sent": "f => f",
    "every second tick label": """f => { for (const a of ['xaxis', 'yaxis']) {
        f.layout[a].tickvals = f.layout[a].tickvals.filter((_, i) => i % 2 === 0);
        f.layout[a].ticktext = f.layout[a].ticktext.filter((_, i) => i % 2 === 0); } return f; }""",
    "no x tick labels": "f => { f.layout.xaxis.showticklabels = false; return f; }",
    "no tick labels": "f => { for (const a of ['xaxis', 'yaxis']) f.layout[a].showticklabels = false; return f; }",
    "fixed margins (no automargin)": """f => { for (const a of ['xaxis', 'yaxis']) f.layout[a].automargin = false;
        f.layout.margin = {l: 110, r: 10, t: 60, b: 110}; return f; }""",
    "wide margins, automargin kept": """f => { f.layout.margin = {...f.layout.margin, l: 140, b: 140}; return f; }""",
    "zsmooth fast": "f => { f.data[0].zsmooth = 'fast'; return f; }",
}

DRAW = """async ([figures, variant, rounds]) => {
  const change = eval(variant), div = document.getElementById('chart'), times = [];
  Plotly.purge(div);
  for (let r = 0; r < rounds; r++) for (const text of figures) {
    const f = change(JSON.parse(text)), start = performance.now();
    await Plotly.react(div, f.data, {...f.layout, datarevision: Math.random()}, {});
    await new Promise(done => requestAnimationFrame(() => setTimeout(done, 0)));
    times.push(performance.now() - start);
  }
  return times;
}"""


def figures(n_tokens: int, count: int) -> list[str]:
    from viz_model import load_model
    from viz_ui.analysis.text_trace import run_trace
    from viz_ui.app.live_chart import plotly_json
    from viz_ui.views.figures import attention_heatmap, plain_figure, style_plain
    model, tokenizer = load_model()
    out = []
    for text in texts(n_tokens, count, skip=300):
        trace = run_trace(model, tokenizer, text)
        fig = attention_heatmap(trace.arrays["blocks.3.attn.hook_pattern"][6], trace.labels,
                                "Layer 3, head 6: attention weights")
        out.append(plotly_json(style_plain(plain_figure(fig))))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--texts", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    from viz_ui.app.preload import PLOTLY_JS
    sent = figures(args.tokens, args.texts)
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_content("<html><body><div id='chart' style='width:700px'></div></body></html>")
        page.add_script_tag(content=PLOTLY_JS.read_text(encoding="utf-8"))
        page.evaluate(DRAW, [sent[:2], VARIANTS["as sent"], 1])  # warm-up
        for name, variant in VARIANTS.items():
            times = page.evaluate(DRAW, [sent, variant, args.rounds])
            rows.append({"figure": name, "median ms": statistics.median(times),
                         "p90 ms": statistics.quantiles(times, n=10)[-1], "tries": len(times)})
        browser.close()
    show(f"Plotly.react of page 3's head heatmap, {args.tokens} tokens, a new text each try", rows,
         "From the call to the frame after it; Chromium 1280×800, an empty page.")
    save_results()


if __name__ == "__main__":
    main()
