"""Attribution and contribution graphs: how long they take and what they hold. Not a test: prints tables and saves
them to ``bench/results/circuits.json`` (``common.save_results``).

    python bench/circuits.py [--only graph,page,contribution] [--repeats 3]

- ``graph``: the attribution graph of a 32-token prompt on the shipped model with its shipped transcoders, every
  active feature a node (no cap): wall time (median of ``--repeats``), its parts (clean run, frozen forward pass,
  rows), nodes, features, rows per second, and the graph's scores. Goal: <= 3 s on a 2-core CPU.
- ``page``: the Circuits page in Chromium (``streamlit run`` on 127.0.0.1): the graph computed once, then a switch to
  the page from another page, timed from the click to the graph's first drawing (every node and the strongest edges
  in the DOM) and to the drawing of every edge. Goal: <= 1 s to the first drawing.
- ``contribution``: the contribution graph of a Llama-3.2-1B-shaped model (1.24 B parameters, random weights built in
  memory, float32) at 64 tokens, against one forward pass of the same model; and the peak memory it adds. Goal:
  <= 5 forward passes, never a ``[pos, pos, n_heads, d_model]`` tensor (64 x 64 x 32 x 2048 x 4 bytes = 1 GiB).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch

from common import ROOT, child_env, save_results, show
from server import CHROMIUM_ARGS, app_server
from viz_model import load_model
from viz_model.circuits import attribute, graph_scores, load_transcoders, prune_graph

PROMPT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
          "friends. One day, she saw a big")


def bench_graph(repeats: int) -> dict:
    model, tok = load_model()
    tcs = load_transcoders(ROOT / "assets" / "dictionaries" / "tinystories-6l")
    ids = torch.tensor(tok.encode(PROMPT).ids[:32])
    times, parts = [], []
    graph = None
    for _ in range(repeats + 1):  # the first run warms up
        marks = []
        t0 = time.perf_counter()
        graph = attribute(model, ids, tcs, progress=lambda f, m: marks.append((time.perf_counter() - t0, m)))
        times.append(time.perf_counter() - t0)
        parts.append(marks)
    times = times[1:]
    rows = graph.n_features + graph.n_logits
    first_row = next(t for t, m in parts[-1] if "rows" in m and not m.startswith("0 "))
    replacement, completeness = graph_scores(graph)
    pruned, edges, _ = prune_graph(graph)
    return {"tokens": len(ids), "features": graph.n_features, "nodes": graph.n_nodes, "rows": rows,
            "seconds_median": round(statistics.median(times), 3), "seconds_all": [round(t, 3) for t in times],
            "seconds_to_first_rows": round(first_row, 3), "rows_per_second": round(rows / statistics.median(times)),
            "replacement_score": round(replacement, 4), "completeness_score": round(completeness, 4),
            "pruned_nodes": int(pruned.sum()), "pruned_edges": int(edges.sum())}


def bench_page() -> dict:
    from playwright.sync_api import sync_playwright

    with app_server(env=child_env(VIZ_GATE_SECONDS="inf")) as (url, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(url + "/circuits")
        page.wait_for_selector(".viz-cg .js-plotly-plot .scatterlayer .trace", timeout=300_000)  # computed
        times, complete = [], []
        for _ in range(5):
            page.goto(url + "/tokens")
            page.wait_for_selector("[data-testid=stSidebar] summary", timeout=120_000)
            time.sleep(1.0)  # the tokens page settled; its sidebar section for the Circuits page opened by hand
            page.locator("[data-testid=stSidebar] summary", has_text="Cause and effect").click()
            page.wait_for_selector("[data-testid=stSidebar] a[href$='circuits']", state="visible", timeout=60_000)
            t0 = time.perf_counter()
            page.click("[data-testid=stSidebar] a[href$='circuits']")
            page.wait_for_selector(".viz-cg .js-plotly-plot .scatterlayer .trace", timeout=120_000)
            times.append(time.perf_counter() - t0)
            page.wait_for_selector(".viz-cg .cg-plot[data-complete=true]", timeout=120_000)
            complete.append(time.perf_counter() - t0)
        browser.close()
    return {"switch_to_first_drawing_seconds_median": round(statistics.median(times), 3),
            "switch_to_first_drawing_seconds_all": [round(t, 3) for t in times],
            "switch_to_every_edge_drawn_seconds_median": round(statistics.median(complete), 3)}


def bench_contribution(repeats: int) -> dict:
    from viz_model.circuits.contribution import contribution_graph
    from viz_model.config import Config
    from viz_model.model import VizTransformer

    cfg = Config(n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8, d_head=64, d_mlp=8192, d_vocab=128_256,
                 n_ctx=2048, positional="rotary", norm="rmsnorm", mlp="swiglu", rotary_base=500_000.0,
                 tied_embeddings=True, attn_bias=False, final_norm=True)
    with torch.device("meta"):
        model = VizTransformer(cfg)
    model = model.to_empty(device="cpu")
    model.init_weights(seed=0)
    model.eval()
    ids = torch.randint(0, 8000, (64,), generator=torch.Generator().manual_seed(0))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with torch.no_grad():
        model(ids[None], logit_positions=[63])  # warm-up
        fwd, cg = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(ids[None], logit_positions=[63])
            fwd.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            graph = contribution_graph(model, ids)
            cg.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    f, c = statistics.median(fwd), statistics.median(cg)
    return {"parameters": sum(p.numel() for p in model.parameters()), "tokens": 64,
            "forward_seconds": round(f, 3), "contribution_seconds": round(c, 3), "ratio": round(c / f, 2),
            "peak_rss_added_mb": round((peak - before) / 1024),
            "whole_tensor_mb": round(64 * 64 * 32 * 2048 * 4 / 2 ** 20), "edges_at_0.04": len(graph.edges())}


TITLES = {"graph": ("Attribution graph: shipped model and transcoders, 32 tokens, every active feature a node "
                     "(goal: at most 3 s)"),
          "page": "Circuits page in Chromium: page switch to the graph's first drawing, graph computed (goal: at most 1 s)",
          "contribution": ("Contribution graph: Llama-3.2-1B-shaped model (1.24 B parameters, float32), 64 tokens "
                           "(goal: at most 5 forward passes)")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="graph,page,contribution")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for part in args.only.split(","):
        value = {"graph": lambda: bench_graph(args.repeats), "page": bench_page,
                 "contribution": lambda: bench_contribution(args.repeats)}[part]()
        show(f"{TITLES[part]}; {args.threads} threads",
             [{"measure": k.replace("_", " "), "value": str(v) if isinstance(v, list) else v} for k, v in value.items()])
    save_results()


if __name__ == "__main__":
    main()
