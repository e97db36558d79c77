"""What the experts of a mixture-of-experts model specialised in, measured on held-out text: the share of the
(token, slot) assignments each expert received in each layer, and the tokens each expert receives most
consistently. Prints Markdown for a model card.

Usage::

    python scripts/moe_experts.py assets/models/tinystories-moe.safetensors ../shared/data/tinystories-valid-head.txt

The text is cut into non-overlapping windows of the model's context (up to ``--tokens`` tokens); every token of
every window is counted in every layer. For each expert: the share of tokens it received, the kinds of those tokens
(punctuation, line breaks, word starts, pieces inside words), and the token types it received most often with the
fraction of each type's occurrences (at least ``--min-count``) that the router sent to it.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from viz_model import load_model
from viz_model.training.train import encode
from viz_ui.analysis.text_trace import token_label


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", type=Path)
    p.add_argument("text", type=Path)
    p.add_argument("--tokens", type=int, default=50_000, help="held-out tokens to route (default 50,000)")
    p.add_argument("--min-count", type=int, default=30, help="token types seen fewer times are not listed")
    p.add_argument("--top", type=int, default=6, help="token types listed per expert")
    args = p.parse_args()
    torch.set_num_threads(1)
    model, tok = load_model(args.model)
    cfg = model.cfg
    ids = encode(tok, args.text.read_text(encoding="utf-8", errors="replace"))[: args.tokens]
    n_ctx, E, k = cfg.n_ctx, cfg.n_experts, cfg.experts_per_token
    names = [f"blocks.{i}.mlp.hook_expert_indices" for i in range(cfg.n_layers)]
    routes = [[] for _ in range(cfg.n_layers)]
    with torch.no_grad():
        for start in range(0, len(ids) - 1, n_ctx):
            window = ids[start:start + n_ctx][None]
            _, cache = model.run_with_cache(window, names_filter=names)
            for i, name in enumerate(names):
                routes[i].append(cache[name][0].numpy())
    routes = [np.concatenate(r) for r in routes]  # [n_tokens, k] per layer
    ids = ids[: len(routes[0])].numpy()
    counts = Counter(ids.tolist())
    print(f"{len(ids):,} held-out tokens of {args.text.name}, {E} experts, top-{k}\n")
    print("Share of the assignments each expert received (an even split is " f"{100 / E:.1f} %):\n")
    print("| layer | " + " | ".join(f"E{e}" for e in range(E)) + " | largest / even |")
    print("|---|" + "---|" * (E + 1))
    for i, r in enumerate(routes):
        share = np.bincount(r.ravel(), minlength=E) / r.size
        print(f"| {i} | " + " | ".join(f"{100 * s:.1f}" for s in share) + f" | {share.max() * E:.2f} |")
    labels = {t: token_label(tok, t) for t in counts}
    kinds = {t: kind(labels[t]) for t in counts}
    for i, r in enumerate(routes):
        print(f"\nLayer {i}: what each expert received. Mix: the kinds of its tokens (punctuation and quotes, line "
              "breaks, word starts ·, pieces inside a word); tokens: the types it received most often, with the share "
              f"of that type's occurrences it got (types seen at least {args.min_count} times)\n")
        print("| expert | load | mix | tokens |")
        print("|---|---|---|---|")
        for e in range(E):
            hit = (r == e).any(-1)
            got = Counter(ids[hit].tolist())
            n_got = sum(got.values())
            if not n_got:
                print(f"| E{e} | 0 | — | (no token) |")
                continue
            mix = Counter()
            for t, c in got.items():
                mix[kinds[t]] += c
            mix_text = ", ".join(f"{name} {100 * mix[name] / n_got:.0f} %" for name in KINDS if mix[name])
            best = [t for t, _ in got.most_common() if counts[t] >= args.min_count][: args.top]
            shown = ", ".join(f"`{labels[t]}` {100 * got[t] / counts[t]:.0f} %" for t in best)
            print(f"| E{e} | {100 * n_got / len(ids):.0f} % of tokens | {mix_text} | {shown} |")


KINDS = ("punctuation", "line break", "word start", "piece")


def kind(label: str) -> str:
    """A token's kind from its display label (spaces drawn as ·, line breaks as \\n)."""
    text = label.replace("·", " ").replace("\\n", "\n")
    if "\n" in text:
        return "line break"
    if not any(ch.isalnum() for ch in text):
        return "punctuation"
    return "word start" if text.startswith(" ") else "piece"

if __name__ == "__main__":
    main()
