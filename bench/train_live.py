"""Training live on the server (viz_model.training.live): memory against the estimate, speed, and how the server's
own work slows down while trainings run. Prints three tables.

    .venv/bin/python bench/train_live.py [--steps 60]

1. Memory: each size in a fresh process (peak RSS of the process after training ``--steps`` steps with every
   snapshot, less its RSS before the job) against :func:`viz_model.training.live.train_bytes`.
2. Speed on the shipped text: seconds until the first step, milliseconds per step (median), at 1 and 2 threads.
3. The server's own work while trainings run: one forward pass of the shipped model on 64 tokens with every hook
   recorded (what a page rerun does), median of 15 in the main thread, with 0, 1 or 2 jobs running.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from common import child_env, save_results, show

# as the app (viz_ui/__init__.py), before torch loads: with spinning OpenMP threads a page's forward pass took
# 677 ms instead of 71 ms while two trainings ran on the 2 cores
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

SIZES = {  # name -> TrainSettings fields (the fit of train_bytes' coefficients used these)
    "1×1, d16, ctx 16, vocab 300": {"n_layers": 1, "n_heads": 1, "d_model": 16, "n_ctx": 16, "vocab_size": 300},
    "default: 2×4, d128, ctx 64, vocab 512": {},
    "2×4, d128, ctx 256": {"n_ctx": 256},
    "2×8, d128, ctx 256": {"n_heads": 8, "n_ctx": 256},
    "4×4, d128, ctx 256": {"n_layers": 4, "n_ctx": 256},
    "2×4, d256, ctx 64, vocab 4096": {"d_model": 256, "vocab_size": 4096},
    "4×8, d256, ctx 128, vocab 2048": {"n_layers": 4, "n_heads": 8, "d_model": 256, "n_ctx": 128, "vocab_size": 2048},
}

CHILD = """
import json, resource, sys, time
from viz_model.training.live import SHIPPED_TEXT, TrainJob, TrainSettings, train_bytes
settings = TrainSettings(**json.loads({fields!r}), steps={steps})
text = SHIPPED_TEXT.read_text(encoding="utf-8")
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
before = rss()
job = TrainJob(text, settings, max_seconds=600).start()
job.wait()
p = job.progress()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"estimate": train_bytes(settings), "grew": peak - before, "status": p.status, "step": p.step}}))
"""


def memory(steps: int) -> None:
    rows = []
    for name, fields in SIZES.items():
        code = CHILD.format(fields=json.dumps(fields), steps=steps)
        env = child_env(VIZ_MAX_TRAIN_MB="100000")  # measure sizes above the cap too
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
        r = json.loads(out.strip().splitlines()[-1])
        rows.append({"size": name, "estimate MB (train_bytes)": r["estimate"] / 2**20, "peak RSS growth MB": r["grew"] / 2**20,
                     "estimate / measured": r["estimate"] / r["grew"]})
    show(f"1. Memory of one job ({steps} steps, fresh process each)", rows)


def speed(steps: int) -> None:
    from viz_model.training.live import SHIPPED_TEXT, TrainJob, TrainSettings

    text = SHIPPED_TEXT.read_text(encoding="utf-8")
    rows = []
    for threads in (1, 2):
        job = TrainJob(text, TrainSettings(steps=steps), threads=threads).start()
        t0, first, times = time.monotonic(), None, []
        last = 0
        while not job.wait(0.01):
            step = job.progress().step
            if step and first is None:
                first = time.monotonic() - t0
            if step > last:
                times.append((time.monotonic(), step))
                last = step
        per = [(b[0] - a[0]) / (b[1] - a[1]) for a, b in zip(times, times[1:]) if b[1] > a[1]]
        ms = statistics.median(per) * 1000
        rows.append({"threads": threads, "s to the first step": first, "ms per step (median)": ms,
                     "500 steps, extrapolated s": first + 500 * ms / 1000})
    show(f"2. Speed, default size on the shipped text ({steps} steps)", rows)


def responsiveness() -> None:
    import torch

    from viz_model import load_model
    from viz_model.training.live import SHIPPED_TEXT, TrainJob, TrainSettings

    model, tok = load_model()
    ids = torch.tensor([tok.encode(SHIPPED_TEXT.read_text(encoding="utf-8")[:400]).ids[:64]])
    text = SHIPPED_TEXT.read_text(encoding="utf-8")

    def forward_ms() -> float:
        times = []
        for _ in range(15):
            t = time.perf_counter()
            model.run_with_cache(ids)
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1000

    rows = [{"trainings running": 0, "threads each": "–", "forward ms (median of 15)": forward_ms()}]
    for n, threads in ((1, 1), (2, 1), (1, 2)):
        jobs = [TrainJob(text, TrainSettings(steps=3000, seed=i), threads=threads).start() for i in range(n)]
        while any(j.progress().step < 3 for j in jobs):
            time.sleep(0.1)
        rows.append({"trainings running": n, "threads each": threads, "forward ms (median of 15)": forward_ms()})
        for j in jobs:
            j.cancel()
            j.wait()
    show("3. A page's forward pass (shipped model, 64 tokens, every hook) in the main thread while jobs run", rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60, help="steps per measurement (tables 1 and 2)")
    args = ap.parse_args()
    memory(args.steps)
    speed(args.steps)
    responsiveness()
    save_results()


if __name__ == "__main__":
    main()
