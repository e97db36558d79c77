"""What the experts of a mixture-of-experts model specialised in, measured on held-out text: the share of the
(token, slot) assignments each expert received in each layer, and the tokens each expert receives most
consistently. Prints Markdown for a model card.

Usage::

    python scripts/moe_experts.py assets/models/tinystories-moe.safetensors ../shared/data/tinystories-valid-head.txt

The text is cut into non-overlapping windows of the model's context (up to ``--tokens`` tokens); every token of
every window is counted in every layer. "Consistency" of an expert for a token type: the fraction of that token's
occurrences (at least ``--min-count``) that the router sent to the expert, among its k experts.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from viz_model import load_model  # noqa: E402
from viz_model.training.train import encode  # noqa: E402
from viz_ui.trace import token_label  # noqa: E402


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
    frequent = [t for t, c in counts.items() if c >= args.min_count]
    for i, r in enumerate(routes):
        print(f"\nLayer {i}: the token types each expert receives most consistently (share of their occurrences, "
              f"types seen at least {args.min_count} times)\n")
        print("| expert | tokens |")
        print("|---|---|")
        for e in range(E):
            hit = (r == e).any(-1)
            share = {t: hit[ids == t].mean() for t in frequent}
            best = sorted(share, key=lambda t: -share[t])[: args.top]
            shown = ", ".join(f"`{token_label(tok, t)}` {100 * share[t]:.0f} %" for t in best)
            print(f"| E{e} | {shown} |")


if __name__ == "__main__":
    main()
