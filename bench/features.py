"""Sparse dictionaries and steering on the shipped model: how long the Features page's model work takes.

    .venv/bin/python bench/features.py [--tokens 64] [--rounds 5] [--threads 2]

Targets (issue 24): the features of a 64-token text for every layer <= 150 ms (one forward pass recording the six
``hook_resid_post`` and six encodes); steer -> 20 greedy tokens <= 500 ms (one steered continuation with a KV cache);
for reference the intact continuation, one feature ablation, and a feature's logit effects and head contributions.
"""

from __future__ import annotations

import argparse

import torch

from common import interleaved, save_results, show

from viz_model import load_model  # noqa: E402  (common puts the repository on the path)
from viz_model.features import head_contributions, load_dictionary, promoted_tokens, shipped_dictionaries
from viz_model.interventions.steering import ablate_features, greedy_continuation, steering_hook


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model()
    dicts = [load_dictionary(folder) for folder in shipped_dictionaries("tinystories-6l").values()]
    text = ("Once upon a time there was a little girl named Lily. She loved to play in the park with her dog Max. "
            "One day they found a big red ball under a tree. ") * 4
    ids = tok.encode(text).ids[:args.tokens]
    tokens = torch.tensor([ids])
    names = [d.hook_name for d in dicts]
    mid = dicts[len(dicts) // 2]

    def all_features():
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens, names_filter=names)
            return [d.encode(cache[d.hook_name][0]) for d in dicts]

    direction = mid.W_dec[0] * 8
    fns = {
        f"features, {len(dicts)} layers": all_features,
        "intact -> 20 greedy tokens": lambda: greedy_continuation(model, ids, 20),
        "steer -> 20 greedy tokens": lambda: greedy_continuation(model, ids, 20,
                                                                 [(mid.hook_name, steering_hook(direction, 1.0))]),
        "ablate 3 features": lambda: ablate_features(model, tokens, mid, [0, 1, 2]),
        "promoted tokens of a feature": lambda: promoted_tokens(model, mid, 0),
        "head contributions of a feature": lambda: head_contributions(model, tokens, mid, 0, len(ids) - 1),
    }
    times = interleaved(fns, rounds=args.rounds)
    rows = [{"work": name, "median ms": ms} for name, ms in times.items()]
    show(f"tinystories-6l, {len(ids)} tokens, {args.threads} threads", rows,
         "The page's side-by-side view costs the intact and the steered rows together.")
    save_results()


if __name__ == "__main__":
    main()
