"""Helpers for the benchmarks: GPT-2-small-shaped weights, interleaved timing, tables, and their results saved as JSON
(``bench/results/NAME.json``, from which ``bench/report.py`` writes the tables of ``bench/README.md``). Not tests."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent  # the project's checkout (the benchmarks import it installed: README)
RESULTS = ROOT / "bench" / "results"
_SHOWN: list[dict] = []  # the tables show() printed in this process, in order, for save_results()
_LOAD_AT_START = os.getloadavg()

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
    """Print a table (and a note) and return it; :func:`save_results` saves every table shown so far."""
    frame = pd.DataFrame(rows)
    print(f"\n## {title}\n")
    print(frame.to_string(index=False, float_format=lambda x: f"{x:,.2f}"))
    if note:
        print(f"\n{note}")
    table = json.loads(frame.to_json(orient="split", index=False))  # numpy values → JSON, NaN → null
    _SHOWN.append({"title": title, "columns": table["columns"], "rows": table["data"], "note": note})
    return frame


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def run_info() -> dict:
    """What a result depends on besides the code's arguments: the commit measured (``+changes`` when the working tree
    differs from it outside ``bench/results``), the time (UTC), and the machine: CPU model and count, memory, Python
    and torch versions, and the 1-minute load average when the script started and when it saved (others' work on
    the same cores shows there)."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() \
        else platform.processor()
    try:
        memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory_gb = float("nan")
    torch = sys.modules.get("torch")
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench/results")
    return {"commit": _git("rev-parse", "--short", "HEAD") + ("+changes" if changed else ""),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(["python", os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
            "machine": {"cpu": cpu, "cpus": os.cpu_count(), "memory_gb": round(memory_gb, 1),
                        "python": platform.python_version(), "torch": getattr(torch, "__version__", None),
                        "load_average": [round(_LOAD_AT_START[0], 2), round(os.getloadavg()[0], 2)]}}


def save_results(variant: str = "", tables: list[dict] | None = None, name: str | None = None) -> Path:
    """Write the tables :func:`show` printed (or ``tables``: dicts of ``title``, ``columns``, ``rows``, ``note``) to
    ``bench/results/NAME[-VARIANT].json`` with :func:`run_info`, replacing that file, and return its path. ``NAME``
    is the script's name; ``variant`` names a setting whose results are kept apart (another model, a GPU).
    ``bench/report.py`` turns the files into the tables of ``bench/README.md``."""
    name = name or Path(sys.argv[0]).stem
    path = RESULTS / (f"{name}-{variant}.json" if variant else f"{name}.json")
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {"benchmark": name, "variant": variant, **run_info(), "tables": list(_SHOWN if tables is None else tables)}
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nsaved {path.relative_to(ROOT)} (python bench/report.py writes it into bench/README.md)")
    return path
