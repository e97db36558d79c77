"""Interventions: how long the model work behind each view of the cause-and-effect page takes, how much batching the
patched copies saves against one forward pass per cell, what prefix reuse saves against whole-model cells, and
what attribution patching costs; with each sweep's predicted cost (``batching.sweep_cost``, forward-equivalents)
beside the measured time in units of one forward pass.

    .venv/bin/python bench/interventions.py [--model shipped|llama-mid] [--tokens 32 64] [--rounds 5] [--warmup 1]
                                            [--threads 2] [--no-naive]

``shipped``: the shipped tinystories-6l. ``llama-mid``: a random Llama-shaped model (d_model 1024, 8 layers, 16 query
heads sharing 4 key/value heads, SwiGLU 2816, vocabulary 32,000: ~150 M parameters, 0.6 GB in float32).

Targets (issue 15): head ablation → updated output ≤ 300 ms median at 64 tokens; a full residual-stream patching
sweep (every layer × position) ≤ 2 s at 32 tokens. These are the server-side costs; the page adds Streamlit's
rerun and Plotly's redraw (about 100–200 ms on this machine, see bench/latency.py).
"""

from __future__ import annotations

import argparse

import torch

from common import interleaved, save_results, show


def story_ids(tokenizer, n: int, d_vocab: int) -> torch.Tensor:
    if tokenizer is None:  # a random model: random ids
        return torch.randint(0, d_vocab, (1, n), generator=torch.Generator().manual_seed(0))
    text = ("Once upon a time there was a little girl named Lily. She loved to play in the park with her dog Max. "
            "One day they found a big red ball under a tree. ") * 8
    return torch.tensor([tokenizer.encode(text).ids[:n]])


def llama_mid():
    from viz_model import Config, VizTransformer
    cfg = Config(n_layers=8, d_model=1024, n_heads=16, n_kv_heads=4, d_head=64, d_mlp=2816, d_vocab=32000, n_ctx=512,
                 positional="rotary", norm="rmsnorm", mlp="swiglu", attn_bias=False, mlp_bias=False,
                 tied_embeddings=False, family="llama")
    model = VizTransformer(cfg)
    model.init_weights(seed=0)
    return model.eval(), None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("shipped", "llama-mid"), default="shipped")
    p.add_argument("--tokens", type=int, nargs="+", default=[32, 64])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-naive", action="store_true", help="skip the one-pass-per-cell row (slow on big models)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    from viz_model import ablation, attribution, load_model, patching
    from viz_model.interventions import batching
    model, tokenizer = load_model() if args.model == "shipped" else llama_mid()
    cfg = model.cfg
    rows = []
    for n in args.tokens:
        ids = story_ids(tokenizer, n, cfg.d_vocab)
        corrupted = ids.clone()
        corrupted[0, n // 2] = (corrupted[0, n // 2] + 1) % cfg.d_vocab
        logits, clean_cache = model.run_with_cache(ids)
        answer, wrong = logits[0, -1].topk(2).indices.tolist()
        metric = patching.logit_diff_metric(answer, wrong)
        heads = [(1, 0), (3, 2)]
        L, H = cfg.n_layers, cfg.n_heads

        def one_per_cell():  # the naive way: one forward pass per (layer, position)
            for layer in range(cfg.n_layers):
                for pos in range(n):
                    def fn(x, hook, pos=pos, layer=layer):
                        x = x.clone()
                        x[:, pos] = clean_cache[f"blocks.{layer}.hook_resid_pre"][:, pos]
                        return x
                    metric(model.run_with_hooks(corrupted, [(f"blocks.{layer}.hook_resid_pre", fn)]))

        sweep = lambda fn, **kw: lambda: fn(model, corrupted, clean_cache, metric, **kw)  # noqa: E731
        # (row name, function, predicted forward-equivalents or None)
        work = [
            ("forward pass (the unit)", lambda: model(ids), 1.0),
            ("ablate 2 heads → output probabilities", lambda: torch.softmax(
                ablation.ablate_heads(model, ids, heads)[0, -1], -1), None),
            (f"head ablation effects ({L}×{H}), whole-model cells",
             lambda: ablation.head_ablation_effects(model, ids, answer, reuse_prefix=False),
             batching.sweep_cost(model, n, "ablation", reuse_prefix=False)),
            (f"head ablation effects ({L}×{H}), prefix reuse", lambda: ablation.head_ablation_effects(model, ids, answer),
             batching.sweep_cost(model, n, "ablation")),
            (f"resid_pre patching ({L}×{n}), whole-model cells", sweep(patching.get_act_patch_resid_pre, reuse_prefix=False),
             batching.sweep_cost(model, n, "resid_pre", reuse_prefix=False)),
            (f"resid_pre patching ({L}×{n}), prefix reuse", sweep(patching.get_act_patch_resid_pre),
             batching.sweep_cost(model, n, "resid_pre")),
            (f"resid_pre attribution patching ({L}×{n})", sweep(patching.get_attr_patch_resid_pre),
             batching.sweep_cost(model, n, "resid_pre", "attribution")),
            (f"head patching ({L}×{H}), whole-model cells",
             sweep(patching.get_act_patch_attn_head_out_all_pos, reuse_prefix=False),
             batching.sweep_cost(model, n, "head", reuse_prefix=False)),
            (f"head patching ({L}×{H}), prefix reuse", sweep(patching.get_act_patch_attn_head_out_all_pos),
             batching.sweep_cost(model, n, "head")),
            (f"head attribution patching ({L}×{H})", sweep(patching.get_attr_patch_attn_head_out_all_pos),
             batching.sweep_cost(model, n, "head", "attribution")),
            ("direct logit attribution (cache + split)", lambda: attribution.direct_logit_attribution(
                model, model.run_with_cache(ids, names_filter=attribution.attribution_hooks(model))[1], answer), None),
        ]
        if not args.no_naive:
            work.append((f"resid_pre patching ({L}×{n}), one forward per cell", one_per_cell, float(L * n)))
        times = interleaved({name: fn for name, fn, _ in work}, rounds=args.rounds, warmup=args.warmup)
        unit = times["forward pass (the unit)"]
        for name, _, predicted in work:
            rows.append({"tokens": n, "work": name, "median ms": times[name], "measured fwd-eq": times[name] / unit,
                         "predicted fwd-eq": predicted if predicted is not None else float("nan")})
    title = "tinystories-6l" if args.model == "shipped" else "a random mid-size Llama"
    show(f"Interventions on {title} ({cfg.n_layers} layers × {cfg.n_heads} heads, d_model {cfg.d_model}, "
         f"d_vocab {cfg.d_vocab}), {torch.get_num_threads()} threads", rows,
         "fwd-eq: time in units of one forward pass of one copy (measured: median ms / the forward's median ms; "
         "predicted: batching.sweep_cost, matrix-multiply FLOPs; batched copies run faster per copy than one alone, "
         "so measured is lower than predicted for the batched sweeps).\n"
         "Targets: ablation → output ≤ 300 ms at 64 tokens; residual sweep ≤ 2,000 ms at 32 tokens.")
    save_results("" if args.model == "shipped" else args.model)


if __name__ == "__main__":
    main()
