"""Load time and peak memory per dtype for a ~150M-parameter model, against ``transformers`` (issue 16), and the
forward time per dtype on this machine (why the app's default is float32 on a CPU).

    .venv/bin/python bench/load_dtype.py [--rounds 3]

The model: a Llama of 153M parameters (d_model 768, 12 layers, 12 heads, 4 key/value heads, d_mlp 3072, vocabulary
32,000, untied), random weights, saved by ``transformers`` in bfloat16 (292 MB, as most hub checkpoints) and in
float32. Each load runs in a fresh process; "extra peak" is the process's peak resident memory (ru_maxrss) minus its
resident memory just before the load, "after" what stays resident once loaded. Memory-mapped weights count once
they are touched. Goal: a bfloat16 checkpoint loaded with dtype="auto" costs at most about its own size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import child_env, save_results, show

CHILD = r"""
import json, resource, sys, time
import torch
torch.set_grad_enabled(False)
import transformers
from viz_model import load_model

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

base = rss_mb()
start = time.perf_counter()
if LOADER == "transformers":
    model = transformers.AutoModelForCausalLM.from_pretrained(PATH, dtype=DTYPE if DTYPE == "auto" else getattr(torch, DTYPE))
    dtype = next(model.parameters()).dtype
else:
    model, _ = load_model(PATH, dtype=DTYPE)
    dtype = model.dtype
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
after = rss_mb()
print(json.dumps({"dtype": str(dtype).removeprefix("torch."), "load_s": seconds, "extra_peak_mb": peak - base,
                  "after_mb": after - base}))
"""


MAKE = r"""
import sys, torch, transformers
torch.manual_seed(0)
config = transformers.LlamaConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                                  num_key_value_heads=4, vocab_size=32000, tie_word_embeddings=False,
                                  max_position_embeddings=2048)
model = transformers.LlamaForCausalLM(config)
model.save_pretrained(sys.argv[1])
model.to(torch.bfloat16).save_pretrained(sys.argv[2])
"""


FORWARD = r"""
import json, statistics, sys, time
import torch
torch.set_num_threads(1)
torch.set_grad_enabled(False)
import transformers
from viz_model import load_model
path = sys.argv[1]
runs = {"ours float32": load_model(path)[0], "ours bfloat16": load_model(path, dtype="auto")[0],
        "transformers float32": transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
        "transformers bfloat16": transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)}
ids = torch.randint(0, 32000, (1, 64), generator=torch.Generator().manual_seed(0))
times = {k: [] for k in runs}
for model in runs.values():
    model(ids)
for _ in range(7):
    for name, model in runs.items():
        t = time.perf_counter(); model(ids); times[name].append(1000 * (time.perf_counter() - t))
print(json.dumps({k: round(statistics.median(v), 1) for k, v in times.items()}))
"""


def make_models(folder: Path) -> dict[str, Path]:
    """The two checkpoints, written by a child process: ru_maxrss survives fork and exec, so a parent that had held
    the model would lift every child's peak to its own."""
    out = {"float32": folder / "f32", "bfloat16": folder / "bf16"}
    subprocess.run([sys.executable, "-c", MAKE, str(out["float32"]), str(out["bfloat16"])], check=True,
                   capture_output=True)
    return out


def measure(loader: str, path: Path, dtype: str) -> dict:
    code = CHILD.replace("LOADER", repr(loader)).replace("PATH", repr(str(path))).replace("DTYPE", repr(dtype))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=child_env())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3, help="loads per row (medians are shown)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = make_models(Path(tmp))
        sizes = {k: sum(f.stat().st_size for f in p.glob("*.safetensors")) / 2**20 for k, p in files.items()}
        cases = [("bfloat16", "auto"), ("bfloat16", "float32"), ("float32", "auto"), ("float32", "bfloat16")]
        for file_dtype, dtype in cases:
            for loader in ("viz_model.load_model", "transformers"):
                runs = [measure("ours" if loader.startswith("viz") else "transformers", files[file_dtype], dtype)
                        for _ in range(args.rounds)]
                med = {k: statistics.median(r[k] for r in runs) for k in ("load_s", "extra_peak_mb", "after_mb")}
                rows.append({"file": f"{file_dtype} ({sizes[file_dtype]:.0f} MB)", "dtype=": dtype, "loader": loader,
                             "model dtype": runs[0]["dtype"], "load s": round(med["load_s"], 2),
                             "extra peak MB": round(med["extra_peak_mb"]),
                             "extra peak / file": round(med["extra_peak_mb"] / sizes[file_dtype], 2),
                             "resident after MB": round(med["after_mb"])})
        show(f"Loading a 153M-parameter Llama (medians of {args.rounds} fresh processes)", rows)
        out = subprocess.run([sys.executable, "-c", FORWARD, str(files["bfloat16"])], capture_output=True, text=True,
                             check=True, env=child_env())
        show("Forward pass at 64 tokens, ms (one process, 1 torch thread, contenders interleaved, median of 7)",
             [json.loads(out.stdout.strip().splitlines()[-1])])
    save_results()


if __name__ == "__main__":
    main()
