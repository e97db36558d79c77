"""Helpers for the benchmarks: GPT-2-small-shaped weights, interleaved timing, tables (not tests)."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent  # the project's checkout (the benchmarks import it installed: README)

GPT2_SMALL = dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024)


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child Python (``python -c``) that imports the project: ``PYTHONPATH`` names
    this checkout first, so that the child measures the same code as the benchmark that starts it."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **extra}


def gpt2_small(seed: int = 0):
    """A GPT-2-small-shaped ``transformers`` model with random weights (eager attention) and the same
    weights converted into this project's model: ``(hf_model, viz_model)``."""
    import torch
    import transformers

    from viz_model import load_model
    torch.manual_seed(seed)
    config = transformers.GPT2Config(**GPT2_SMALL)
    config._attn_implementation = "eager"
    hf = transformers.GPT2LMHeadModel(config).eval()
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)
        ours, _ = load_model(tmp)
    return hf, ours


def interleaved(fns: dict[str, Callable[[], object]], rounds: int = 5, warmup: int = 1) -> dict[str, float]:
    """Median wall time in ms of each function, measured round-robin (A B C A B C …) so that machine noise
    hits every contender alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1000)
    return {name: statistics.median(v) for name, v in times.items()}


def show(title: str, rows: list[dict], note: str = "") -> pd.DataFrame:
    """Print a table (and a note) and return it."""
    frame = pd.DataFrame(rows)
    print(f"\n## {title}\n")
    print(frame.to_string(index=False, float_format=lambda x: f"{x:,.2f}"))
    if note:
        print(f"\n{note}")
    return frame
