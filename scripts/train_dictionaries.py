"""Train, evaluate and index the shipped sparse dictionaries of the default model (tinystories-6l).

    .venv/bin/python scripts/train_dictionaries.py [--data ../shared/data] [--stage all|train|evaluate]

Recipe (what ``--stage train`` does; the dictionaries' quality: docs/features.md):

- Training text: ``tinystories-train-head.txt`` (the stories the model itself was trained on; TinyStories,
  CDLA-Sharing-1.0, see the team's ``shared/data/README.md``), its first ``TRAIN_TOKENS`` tokens cut into
  windows of ``WINDOW`` tokens, each run through the model from position 0. The data files are not in this repo.
- One SAE per layer on ``blocks.{l}.hook_resid_post`` (the residual stream after block l), ``D_SAE`` features,
  TopK with ``K`` (Gao et al. 2024), ``STEPS`` Adam steps of ``BATCH`` activations, learning rate ``LR``,
  the dead-feature auxiliary loss (features not active over the last ``DEAD_TOKENS`` activations);
  :func:`viz_model.features.train_on_activations` states the whole recipe.
- Saved as float16 in SAELens's layout in ``assets/dictionaries/tinystories-6l/<hook name>/``.

``--stage evaluate`` measures each saved dictionary (as shipped, float16 weights computed in float32) on held-out
text, ``tinystories-valid-head.txt`` (never seen by the model or the dictionaries): its first ``EVAL_TOKENS`` tokens
in windows of ``WINDOW``. It writes the fraction of variance unexplained (FVU), the mean L0 and the dead features
(never active on those tokens) into the folder's card (``README.md``) and ``quality.json``, stores those tokens as
the shipped corpus (``corpus.safetensors``: int16 ids, ``WINDOW`` per row) and each dictionary's index of top
contexts (``top_contexts.safetensors``, see :mod:`viz_model.features.index`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from dictionary_recipe import (BATCH, D_SAE, DEAD_TOKENS, EVAL_TOKENS, K, LR, OUT, SEED, STEPS, STEPS_BY_LAYER,
                               TRAIN_TOKENS, WINDOW, hooks, log, stage_args)
from evaluate_dictionaries import evaluate  # the second stage lives beside this script
from viz_model import load_model
from viz_model.features import collect_activations, save_dictionary, token_windows, train_on_activations


def train(model, tok, data: Path, layers: list[int]) -> None:
    text = (data / "tinystories-train-head.txt").read_text(encoding="utf-8")
    ids = tok.encode(text).ids[:TRAIN_TOKENS]
    windows = token_windows(ids, WINDOW)
    log(f"collecting activations of {windows.numel():,} training tokens")
    names = [hooks(model.cfg.n_layers)[layer] for layer in layers]
    acts = collect_activations(model, windows, names, batch_size=32, dtype=torch.float16)
    for layer, name in zip(layers, names):
        steps = STEPS_BY_LAYER.get(layer, STEPS)
        log(f"training {name} ({steps} steps)")
        d, res = train_on_activations(acts.pop(name), None, D_SAE, name, "topk", K, steps=steps, batch_size=BATCH,
                                      lr=LR, dead_tokens=DEAD_TOKENS, seed=SEED, progress=lambda f, m: log(f"  {m}"))
        log(f"  done: {res}")
        save_dictionary(d, OUT / name, torch.float16, model_name="tinystories-6l", context_size=WINDOW,
                        training_tokens=steps * BATCH, training_text="tinystories-train-head.txt")


def main() -> None:
    args = stage_args(__doc__.splitlines()[0], ("all", "train", "evaluate"))
    torch.manual_seed(SEED)
    model, tok = load_model()
    model.eval()
    if args.stage in ("all", "train"):
        train(model, tok, args.data, args.layers or list(range(model.cfg.n_layers)))
    if args.stage in ("all", "evaluate"):
        evaluate(model, tok, args.data, OUT, hooks(model.cfg.n_layers), EVAL_TOKENS, WINDOW)


if __name__ == "__main__":
    main()
