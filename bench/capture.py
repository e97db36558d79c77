"""Capture overhead: ``run_with_cache`` with every hook vs the same model's plain forward, and vs
``transformers``' eager forward with ``output_attentions=True, output_hidden_states=True`` on the same
weights, for the shipped model and a GPT-2-small-shaped model (random weights), at 32 … 1024 tokens.

    .venv/bin/python bench/capture.py [--rounds 5] [--lengths 32 128 512 1024]

Targets (issue 7): full capture ≤ 1.15 × our plain forward, and ≤ 1.0 × the transformers capture.
Measured round-robin in one process, medians; ratios are what to compare across machines.
"""

from __future__ import annotations

import argparse

import torch

from common import gpt2_small, interleaved, save_results, show


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--lengths", type=int, nargs="+", default=[32, 128, 512, 1024])
    args = p.parse_args()
    from viz_model import load_model
    torch.set_grad_enabled(False)
    rows = []
    shipped, _ = load_model()
    hf, gpt2 = gpt2_small()
    for name, model, ref in (("tinystories-6l", shipped, None), ("GPT-2-small shape", gpt2, hf)):
        for n in args.lengths:
            if n > model.cfg.n_ctx:
                rows.append({"model": name, "tokens": n, "plain ms": None, "capture ms": None,
                             "capture / plain": None, "transformers ms": None, "capture / transformers": None,
                             "note": f"beyond the context ({model.cfg.n_ctx})"})
                continue
            ids = torch.randint(0, model.cfg.d_vocab, (1, n), generator=torch.Generator().manual_seed(n))
            fns = {"plain": lambda: model(ids), "capture": lambda: model.run_with_cache(ids)}
            if ref is not None:
                fns["transformers"] = lambda: ref(ids, output_attentions=True, output_hidden_states=True)
            t = interleaved(fns, rounds=args.rounds)
            rows.append({"model": name, "tokens": n, "plain ms": t["plain"], "capture ms": t["capture"],
                         "capture / plain": t["capture"] / t["plain"],
                         "transformers ms": t.get("transformers"),
                         "capture / transformers": t["capture"] / t["transformers"] if ref is not None else None,
                         "note": ""})
    show("Capture overhead (median ms, round-robin)", rows,
         f"torch {torch.__version__}, {torch.get_num_threads()} threads. Targets: capture / plain ≤ 1.15, "
         "capture / transformers ≤ 1.0.")
    save_results()


if __name__ == "__main__":
    main()
