"""QK attribution: how long splitting one attention score into (query source × key source) terms takes
(``attribution.qk_attribution``, one cell), the head summary over a query's keys (``qk_pattern_attribution``, every
key), and the run that records the hooks they read, on the shipped model (or a Llama-shaped random one).

    .venv/bin/python bench/qk_attribution.py [--model shipped|llama-mid] [--tokens 32 128] [--rounds 20] [--threads 2]

Target (issue 24, item 6): QK attribution of one cell ≤ 100 ms on the shipped model (the cache already recorded, as
on the page, where the text's trace is shared).
"""

from __future__ import annotations

import argparse

import torch

from common import interleaved, save_results, show
from interventions import llama_mid, story_ids


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("shipped", "llama-mid"), default="shipped")
    p.add_argument("--tokens", type=int, nargs="+", default=[32, 128])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    from viz_model import attribution, load_model
    model, tokenizer = load_model() if args.model == "shipped" else llama_mid()
    cfg = model.cfg
    layer, head = cfg.n_layers - 1, cfg.n_heads // 2  # the last layer has the most sources
    rows = []
    for n in args.tokens:
        ids = story_ids(tokenizer, n, cfg.d_vocab)
        n = ids.shape[1]
        names = attribution.qk_hooks(model, layer) + [f"blocks.{layer}.attn.hook_pattern"]
        _, cache = model.run_with_cache(ids, names_filter=names)
        q, k = n - 1, n // 2
        terms = attribution.qk_attribution(model, cache, layer, head, q, k)
        times = interleaved({
            "record the hooks (run_with_cache)": lambda: model.run_with_cache(ids, names_filter=names),
            "one cell (qk_attribution)": lambda: attribution.qk_attribution(model, cache, layer, head, q, k),
            "head summary, every key (qk_pattern_attribution)":
                lambda: attribution.qk_pattern_attribution(model, cache, layer, head, q),
        }, rounds=args.rounds)
        for what, ms in times.items():
            rows.append({"tokens": n, "what": what, "terms": len(terms), "median ms": ms})
    show(f"QK attribution, {args.model} (layer {layer}, head {head}; {args.threads} threads)", rows,
         "Target: one cell ≤ 100 ms on the shipped model.")
    save_results("" if args.model == "shipped" else args.model)


if __name__ == "__main__":
    main()
