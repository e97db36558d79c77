"""What each costly view would take on a model, estimated as the app estimates it (viz_ui/app/gate.py, viz_ui/analysis/costs.py)
and, with --measure, measured: which views a page computes as it opens (estimate ≤ the threshold) and which wait
for a button.

    .venv/bin/python bench/gate_costs.py [--model PATH ...] [--tokens 64] [--measure VIEW,VIEW|all] [--threads 2]

Without --model: the shipped models. Views: trace, lens, scores, pca, stats, ablation, effects, corruption,
patch_exact, patch_attr. "patch_exact" runs the four exact patching maps (minutes on a 1 B model).
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import torch

from common import ROOT, save_results, show

VIEWS = ("trace", "lens", "scores", "pca", "stats", "ablation", "effects", "corruption", "patch_exact", "patch_attr")
TEXT = ("Once upon a time there was a little girl named Lily. She loved to play in the park with her dog Max. "
        "One day they found a big red ball under a tree. Lily said she was happy and her mom said") * 4


def rows_for(path: str, n_tokens: int, measure: set[str]) -> list[dict]:
    from viz_model import load_model
    from viz_model.interventions.cost import sweep_cost
    from viz_ui.analysis import costs
    from viz_ui.analysis.block import logit_lens
    from viz_ui.app.gate import copy_seconds, flops_per_second, gate_seconds
    from viz_ui.analysis.heads import repeated_head_scores
    from viz_ui.analysis.inspector import weight_stats
    from viz_ui.analysis.interventions import (N_GENERATE, ablation_view, default_corruption, fitting_corruptions,
                                      head_effects, patching_sweep, prompt_of, corrupted_prompt)
    from viz_ui.analysis.numeric import fit_pca
    from viz_ui.analysis.text_trace import run_trace

    model, tokenizer = load_model(path)
    ids = tokenizer.encode(TEXT).ids[:n_tokens]
    text = tokenizer.decode(ids)
    started = time.perf_counter()
    trace = run_trace(model, tokenizer, text)
    trace_s = time.perf_counter() - started
    n = trace.n_tokens
    per_copy = copy_seconds(model, path, n, trace_s)
    prompt = prompt_of(trace)
    cands, _ = fitting_corruptions(model, tokenizer, prompt, text)
    corrupted = corrupted_prompt(prompt, run_trace(model, tokenizer, cands[0])) if cands else None
    sites = ("resid_pre", "attn_out", "mlp_out", "head")
    w = sum(p.numel() for b in model.blocks for m in (b.attn, b.mlp) for k, p in m.named_parameters()
            if k.startswith("W_"))
    last = n - 1
    views = {
        "trace": (per_copy, lambda: run_trace(model, tokenizer, text)),
        "lens": (costs.logit_lens_copies(model) * per_copy, lambda: logit_lens(model, trace)),
        "scores": (costs.head_scores_copies(model, n) * per_copy, lambda: repeated_head_scores(model, trace)),
        "pca": (costs.pca_seconds(*model.embed.W_E.shape, flops_per_second(model, path, n, trace_s)), lambda: fit_pca(model.embed.W_E.detach().float().numpy())),
        "stats": (costs.weight_stats_seconds(w), lambda: weight_stats(model)),
        "ablation": (costs.ablation_copies(model, N_GENERATE) * per_copy,
                     lambda: ablation_view(model, prompt, [(0, 0)], "zero", None, last)),
        "effects": (costs.head_effects_copies(model, n) * per_copy,
                    lambda: head_effects(model, prompt, int(trace.ids[-1]), last, "zero", None, [])),
        "corruption": (costs.corruption_copies(len(cands)) * per_copy,
                       lambda: default_corruption(model, tokenizer, prompt, text)),
        "patch_exact": (sum(costs.patching_copies(model, n, s) for s in sites) * per_copy,
                        lambda: [patching_sweep(model, prompt, corrupted, "prob", 0, 0, last, s) for s in sites]),
        "patch_attr": (sum(costs.patching_copies(model, n, s, "attribution") for s in sites) * per_copy,
                       lambda: [patching_sweep(model, prompt, corrupted, "prob", 0, 0, last, s, "attribution")
                                for s in sites]),
    }
    rows = []
    for view, (estimate, fn) in views.items():
        row = {"model": Path(path).stem, "params (M)": round(model.n_params() / 1e6, 1), "tokens": n, "view": view,
               "estimate (s)": round(estimate, 2), "gated": "button" if estimate > gate_seconds() else "on open"}
        if view in measure and (corrupted is not None or not view.startswith("patch")):
            t0 = time.perf_counter()
            fn()
            row["measured (s)"] = round(time.perf_counter() - t0, 2)
        rows.append(row)
    print(f"{Path(path).stem}: {sweep_cost(model, n, 'resid_pre'):.0f} forward-equivalents in the exact resid_pre "
          f"sweep, {per_copy * 1000:.0f} ms per copy, trace {trace_s:.2f} s")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", default=[])
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--measure", default="", help="comma-separated views, or 'all'")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    measure = set(VIEWS) if args.measure == "all" else set(filter(None, args.measure.split(",")))
    paths = args.model or [str(p) for p in sorted((ROOT / "assets" / "models").glob("*.safetensors"))
                           if "dates" not in p.name]
    rows = [r for path in paths for r in rows_for(path, args.tokens, measure)]
    show("Costly views: the app's estimate and the time measured", rows,
         "gated: 'button' where the estimate exceeds the threshold (VIZ_GATE_SECONDS, default 1 s).")
    save_results("-".join(Path(p).stem for p in args.model))


if __name__ == "__main__":
    main()
