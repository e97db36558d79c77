"""The recipe of the shipped sparse dictionaries of tinystories-6l, shared by its two stages:
``scripts/train_dictionaries.py`` (training; its docstring explains every number) and
``scripts/evaluate_dictionaries.py`` (evaluation, index and the card that states this recipe); and what the
transcoders' script (``scripts/train_transcoders.py``) shares with them: the command line, the log, encoding held-out
activations in chunks."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

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


def stage_args(description: str, stages: tuple[str, ...]) -> argparse.Namespace:
    """``--data`` (the folder of the TinyStories files, default ``../shared/data``), ``--stage`` (one of ``stages``,
    default the first) and ``--layers`` (default: all)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--stage", choices=stages, default=stages[0])
    parser.add_argument("--layers", type=int, nargs="*", help="train only these layers (default: all)")
    return parser.parse_args()


@torch.no_grad()
def encode_all(d, x: torch.Tensor, chunk: int = 8192) -> tuple[torch.Tensor, torch.Tensor]:
    """``(features [n, d_sae] float16, reconstruction [n, d_out])`` of the dictionary ``d`` on activations ``x``
    ``[n, d_in]``, ``chunk`` rows at a time (the features of 102,400 tokens stay in float16)."""
    parts, recon = [], []
    for i in range(0, len(x), chunk):
        f = d.encode(x[i:i + chunk])
        recon.append(d.decode(f))
        parts.append(f.to(torch.float16))
    return torch.cat(parts), torch.cat(recon)
