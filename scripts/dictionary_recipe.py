"""The recipe of the shipped sparse dictionaries of tinystories-6l, shared by its two stages:
``scripts/train_dictionaries.py`` (training; its docstring explains every number) and
``scripts/evaluate_dictionaries.py`` (evaluation, index and the card that states this recipe)."""

from __future__ import annotations

import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "assets" / "dictionaries" / "tinystories-6l"
TRAIN_TOKENS = 102_400
EVAL_TOKENS = 102_400
WINDOW = 128
D_SAE, K, STEPS, BATCH, LR, SEED, DEAD_TOKENS = 1024, 24, 150, 2048, 1e-3, 0, 50_000
STEPS_BY_LAYER = {0: 450}  # layer 0: after 150 steps 15 % of its features were dead on held-out text


def hooks(n_layers: int) -> list[str]:
    """The hook each dictionary reads: the residual stream after every block."""
    return [f"blocks.{layer}.hook_resid_post" for layer in range(n_layers)]


def log(msg: str) -> None:
    """One line of progress, with the time of day."""
    print(time.strftime("%H:%M:%S"), msg, flush=True)
