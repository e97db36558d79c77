"""Interventions: how long the model work behind each view of the cause-and-effect page takes on the shipped
model (tinystories-6l), and how much batching the patched copies saves against one forward pass per cell.

    .venv/bin/python bench/interventions.py [--rounds 5] [--threads 2]

Targets (issue 15): head ablation → updated output ≤ 300 ms median at 64 tokens; a full residual-stream patching
sweep (every layer × position) ≤ 2 s at 32 tokens. These are the server-side costs; the page adds Streamlit's
rerun and Plotly's redraw (about 100–200 ms on this machine, see bench/latency.py).
"""

from __future__ import annotations

import argparse

import torch

from common import interleaved, show


def story_ids(tokenizer, n: int) -> torch.Tensor:
    text = ("Once upon a time there was a little girl named Lily. She loved to play in the park with her dog Max. "
            "One day they found a big red ball under a tree. ") * 8
    return torch.tensor([tokenizer.encode(text).ids[:n]])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    from viz_model import ablation, attribution, load_model, patching
    model, tokenizer = load_model()
    cfg = model.cfg
    rows = []
    for n in (32, 64):
        ids = story_ids(tokenizer, n)
        corrupted = ids.clone()
        corrupted[0, n // 2] = (corrupted[0, n // 2] + 1) % cfg.d_vocab
        logits, clean_cache = model.run_with_cache(ids)
        answer, wrong = logits[0, -1].topk(2).indices.tolist()
        metric = patching.logit_diff_metric(answer, wrong)
        heads = [(1, 0), (3, 2)]

        def one_per_cell():  # the naive way: one forward pass per (layer, position)
            for layer in range(cfg.n_layers):
                for pos in range(n):
                    def fn(x, hook, pos=pos, layer=layer):
                        x = x.clone()
                        x[:, pos] = clean_cache[f"blocks.{layer}.hook_resid_pre"][:, pos]
                        return x
                    metric(model.run_with_hooks(corrupted, [(f"blocks.{layer}.hook_resid_pre", fn)]))

        fns = {
            "intact forward + softmax": lambda: torch.softmax(model(ids)[0, -1], -1),
            "ablate 2 heads → output probabilities": lambda: torch.softmax(
                ablation.ablate_heads(model, ids, heads)[0, -1], -1),
            f"per-head effect map ({cfg.n_layers * cfg.n_heads} heads, batched)": lambda: ablation.head_ablation_effects(
                model, ids, answer),
            f"residual patching sweep ({cfg.n_layers}×{n} cells, batched)": lambda: patching.get_act_patch_resid_pre(
                model, corrupted, clean_cache, metric),
            f"residual patching sweep ({cfg.n_layers}×{n} cells, one pass per cell)": one_per_cell,
            "head patching (all heads, batched)": lambda: patching.get_act_patch_attn_head_out_all_pos(
                model, corrupted, clean_cache, metric),
            "direct logit attribution (cache + split)": lambda: attribution.direct_logit_attribution(
                model, model.run_with_cache(ids, names_filter=attribution.attribution_hooks(model))[1], answer),
        }
        for name, ms in interleaved(fns, rounds=args.rounds).items():
            rows.append({"tokens": n, "work": name, "median ms": ms})
    show(f"Interventions on tinystories-6l ({cfg.n_layers} layers × {cfg.n_heads} heads, d_model {cfg.d_model}), "
         f"{torch.get_num_threads()} threads", rows,
         "Targets: ablation → output ≤ 300 ms at 64 tokens; residual sweep ≤ 2,000 ms at 32 tokens.")


if __name__ == "__main__":
    main()
