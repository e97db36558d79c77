"""The app at a real size: a Llama-3.2-1B-shaped model (1.24 B parameters, random weights), side by side with
``transformers`` (eager) on the same weights. Not a test: prints a table.

    python bench/real_size.py build [--out /work/models/llama-1b]     # write the checkpoint once (~2.4 GB bf16)
    python bench/real_size.py [--only load,forward,trace,typing,ablate,sweeps] [--model DIR] [--repeats 3]
    python bench/real_size.py --device cuda --only load,forward,ablate,sweeps     # the same on a GPU (float32)

``--device cuda`` runs ours and ``transformers`` on the GPU (times wait for the GPU: ``torch.cuda.synchronize``);
the trace and typing parts measure host memory and the browser and stay on the CPU. ``REAL_SIZE_DATA`` names
another folder holding ``tinystories-train-head.txt`` / ``tinystories-valid-head.txt`` (a machine without /work/shared).

Every 1 B process runs alone (ours, then transformers', in fresh subprocesses one after the other): a float32
1 B model takes ~5 GB. No memory setting is needed: ``load_model`` and ``--model`` are limited by the memory free.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from common import save_results, show

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_OUT = Path("/work/models/llama-1b")
DATA = Path(os.environ.get("REAL_SIZE_DATA", "/work/shared/data")) / "tinystories-train-head.txt"
DEVICE = os.environ.get("REAL_SIZE_DEVICE", "cpu")  # set by --device for the child processes
MARKER = ".complete"  # written last: a folder without it is half-written
TOKENIZER_VOCAB = 8_000  # the tokenizer's own vocabulary (the model keeps Llama 3's 128,256 rows)

LLAMA_1B = dict(
    hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
    intermediate_size=8192, vocab_size=128_256, tie_word_embeddings=True, rope_theta=500_000.0,
    rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=8192),
    max_position_embeddings=131_072, rms_norm_eps=1e-5, hidden_act="silu", bos_token_id=1, eos_token_id=2,
)


# ------------------------------------------------------------------------------------------------- build


def train_tokenizer(path: Path, vocab: int = TOKENIZER_VOCAB):
    """A byte-level BPE (GPT-2 / Llama 3 style pre-tokenizer) trained on the TinyStories head, ``vocab`` tokens
    with ``<unk>``, ``<s>``, ``</s>`` as ids 0, 1, 2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([str(path)], trainer)
    return tok


def build(out: Path, seed: int = 0, std: float = 0.02) -> None:
    """Write a Llama-3.2-1B-shaped Hugging Face folder to ``out``: config.json, model.safetensors (bf16, every
    matrix normal(0, ``std``), norms 1; the embedding is tied, so no lm_head), tokenizer.json, then the marker
    ``.complete``. The model is built on the meta device (no init) and each tensor drawn in bf16 chunks."""
    import torch
    import transformers
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).unlink(missing_ok=True)
    config = transformers.LlamaConfig(**LLAMA_1B, dtype="bfloat16")
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    gen = torch.Generator().manual_seed(seed)
    state = {}
    t0 = time.perf_counter()
    for name, p in model.state_dict().items():
        if name == "lm_head.weight":  # tied to model.embed_tokens.weight
            continue
        if name.endswith("norm.weight"):
            state[name] = torch.ones(p.shape, dtype=torch.bfloat16)
            continue
        t = torch.empty(p.shape, dtype=torch.bfloat16)
        flat = t.view(-1)
        step = 1 << 24
        for i in range(0, flat.numel(), step):  # float32 draws in 64 MB chunks
            n = min(step, flat.numel() - i)
            flat[i:i + n] = torch.randn(n, generator=gen) * std
        state[name] = t
    n_params = sum(t.numel() for t in state.values())
    print(f"drew {n_params / 1e9:.3f} B parameters in {time.perf_counter() - t0:.0f} s", flush=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out)
    train_tokenizer(DATA).save(str(out / "tokenizer.json"))
    (out / MARKER).write_text(json.dumps({"params": n_params, "seed": seed, "std": std}) + "\n")
    size = (out / "model.safetensors").stat().st_size
    print(f"wrote {out} ({size / 1e9:.2f} GB) in {time.perf_counter() - t0:.0f} s")


# ------------------------------------------------------------------------------------------------- measures
# Each runs in a fresh child process (``real_size.py child PART IMPL``) and prints one JSON line.


def rss_mb() -> float:
    """The process's resident memory now, MB."""
    import psutil
    return psutil.Process().memory_info().rss / 2**20


def reset_peak() -> None:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS (Linux: ``/proc/self/clear_refs``)."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def text_ids(folder: Path, n: int, offset: int = 0) -> list[int]:
    """``n`` token ids of the TinyStories validation head under the checkpoint's tokenizer."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = tok.encode(DATA.with_name("tinystories-valid-head.txt").read_text(encoding="utf-8")[:200_000]).ids
    return ids[offset:offset + n]


def text_of(folder: Path, n: int, offset: int = 0) -> str:
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(folder / "tokenizer.json")).decode(text_ids(folder, n, offset))


def sync() -> None:
    """Wait for the GPU's queued work (no-op on the CPU), so that a time covers the computation."""
    if DEVICE != "cpu":
        import torch
        torch.cuda.synchronize()


def timed(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls after one warm-up call."""
    import statistics
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ids_of(folder: Path, n: int, offset: int = 0):
    """``[1, n]`` token ids on the benchmark's device."""
    import torch
    return torch.tensor([text_ids(folder, n, offset)], device=DEVICE)


def load(folder: Path, impl: str):
    import torch
    if impl == "ours":
        from viz_model import load_model
        return load_model(folder, device=DEVICE)[0]
    import transformers
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                             attn_implementation="eager").eval().to(DEVICE)


def child_load(folder: Path, impl: str, repeats: int) -> dict:
    t0 = time.perf_counter()
    load(folder, impl)
    sync()
    return {"load s": time.perf_counter() - t0, "load peak MB": peak_mb()}


def child_forward(folder: Path, impl: str, repeats: int) -> dict:
    import torch
    model = load(folder, impl)
    out = {}
    for n in (64, 512):
        ids = ids_of(folder, n)
        with torch.no_grad():
            if impl == "ours":
                out[f"forward {n} s"] = timed(lambda: model(ids), repeats)
                out[f"capture {n} s"] = timed(lambda: model.run_with_cache(ids), repeats)
            else:
                out[f"forward {n} s"] = timed(lambda: model(ids), repeats)
                out[f"capture {n} s"] = timed(lambda: model(ids, output_attentions=True, output_hidden_states=True),
                                              repeats)
    return out


def child_trace(folder: Path, impl: str, repeats: int, n: int = 1024) -> dict:
    """The app's trace at ``n`` tokens: ``impl`` "bounded" or "plain" (the capture before bounded traces)."""
    import gc

    from viz_model.tokenizer import IdTokenizer
    from viz_ui.analysis.text_trace import run_trace
    model = load(folder, "ours")
    text = " ".join(map(str, text_ids(folder, n)))  # ids typed as numbers: exactly n tokens
    gc.collect()
    base = rss_mb()
    reset_peak()
    t0 = time.perf_counter()
    trace = run_trace(model, IdTokenizer(model.cfg.d_vocab), text, bounded=impl == "bounded")
    run_s = time.perf_counter() - t0
    gc.collect()
    out = {"trace s": run_s, "trace stored MB": trace.arrays.nbytes() / 2**20, "trace RSS MB": rss_mb() - base,
           "trace peak MB": peak_mb() - base}
    reset_peak()
    t0 = time.perf_counter()
    layer = model.cfg.n_layers // 2
    trace.arrays[f"blocks.{layer}.mlp.hook_post"]
    out["read layer s"] = time.perf_counter() - t0
    pattern = trace.arrays[f"blocks.{layer}.attn.hook_pattern"]
    trace.arrays["hook_logits"][0], trace.arrays["hook_logits"][-1]
    del pattern
    gc.collect()
    out.update({"after reads stored MB": trace.arrays.nbytes() / 2**20, "after reads RSS MB": rss_mb() - base,
                "reads peak MB": peak_mb() - base, "model RSS MB": base})
    return out


def child_ablate(folder: Path, impl: str, repeats: int) -> dict:
    import torch

    from viz_model.interventions.ablation import ablate_heads, head_ablation_effects
    model = load(folder, "ours")
    out = {}
    ids = ids_of(folder, 64)
    out["ablate 1 head 64 s"] = timed(lambda: ablate_heads(model, ids, [(0, 0)]), repeats)
    if impl == "sweeps":
        ids = ids_of(folder, 32)
        t0 = time.perf_counter()
        head_ablation_effects(model, ids, int(ids[0, -1]), pos=-2)
        sync()
        out["effect map 32 s"] = time.perf_counter() - t0
        out.update(_patch_sweeps(model, folder))
    return out


def _patch_sweeps(model, folder: Path) -> dict:
    """Exact head-output patching and, when the branch ``patchattr`` is merged, its attribution counterparts
    (``get_attr_patch_*``) at 32 tokens; "n/a" when a function is absent or refuses these arguments."""
    import torch

    from viz_model.interventions import patching
    clean, corrupt = (ids_of(folder, 32, off) for off in (0, 500))
    answer, wrong = int(clean[0, -1]), int(corrupt[0, -1])
    metric = patching.logit_diff_metric(answer, wrong, pos=-2)
    _, cache = model.run_with_cache(clean)
    out = {}
    t0 = time.perf_counter()
    patching.get_act_patch_attn_head_out_all_pos(model, corrupt, cache, metric)
    sync()
    out["exact head sweep 32 s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    reused = patching.get_act_patch_resid_pre(model, corrupt, cache, metric)
    sync()
    out["exact resid_pre sweep 32 s"] = time.perf_counter() - t0
    if os.environ.get("REAL_SIZE_NAIVE"):  # the whole-model cells of before, for the same machine's comparison
        t0 = time.perf_counter()
        whole = patching.get_act_patch_resid_pre(model, corrupt, cache, metric, reuse_prefix=False)
        out["exact resid_pre sweep, whole-model cells 32 s"] = time.perf_counter() - t0
        out["max |reused - whole|"] = float((reused - whole).abs().max())
    attr = sorted(n for n in dir(patching) if n.startswith("get_attr_patch_"))
    if not attr:
        out["attribution sweep 32 s"] = "n/a"
    for name in attr:
        t0 = time.perf_counter()
        try:
            getattr(patching, name)(model, corrupt, cache, metric)
            sync()
            out[f"{name} 32 s"] = time.perf_counter() - t0
        except (TypeError, ValueError, KeyError) as exc:
            out[f"{name} 32 s"] = f"n/a ({type(exc).__name__})"
    return out


def child_typing(folder: Path, impl: str, repeats: int) -> dict:
    """Typing → attention in Chromium at 64 tokens against ``streamlit run app.py -- --model folder``."""
    import statistics

    from playwright.sync_api import expect, sync_playwright
    from tokenizers import Tokenizer
    from latency import timed as timed_in_page
    from server import CHROMIUM_ARGS, app_server

    from viz_ui.app.layout import SQUARE_SIDE
    from viz_ui.analysis.text_trace import token_label
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))

    def tick_for(text: str) -> str:
        ids = tok.encode(text).ids
        start = max(0, len(ids) - SQUARE_SIDE)
        return f"{start} {token_label(tok, ids[start])}"

    texts = [text_of(folder, 64, 37 * i) for i in range(1, 4 * repeats + 8)]
    typing = []
    with app_server(args=["--model", str(folder)]) as (url, proc), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url + "/attention")
        expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=600_000)
        box = page.get_by_label("Text", exact=True)
        previous = tick_for(box.input_value())
        for text in texts:
            tick = tick_for(text)
            if tick == previous:
                continue
            previous = tick
            box.fill(text)
            typing.append(timed_in_page(page, lambda: box.press("Control+Enter"), ".js-plotly-plot", tick))
            page.wait_for_timeout(500)
            if len(typing) > repeats:
                break
        browser.close()
    return {"typing → attention 64 s": statistics.median(typing[1:]) / 1000}


CHILDREN = {"load": child_load, "forward": child_forward, "trace": child_trace, "typing": child_typing,
            "ablate": child_ablate}
PLAN = {  # part -> the implementations run, one fresh process each, one after the other
    "load": ["ours", "transformers"], "forward": ["ours", "transformers"], "trace": ["bounded", "plain"],
    "typing": ["ours"], "ablate": ["ours"], "sweeps": ["sweeps"],
}


def run_child(part: str, impl: str, folder: Path, repeats: int) -> dict:
    import subprocess
    # OMP_WAIT_POLICY=PASSIVE and THP_MEM_ALLOC_ENABLE=1 as the app sets them (viz_ui/__init__.py), for ours and for
    # transformers alike: spinning OpenMP threads slow everything on shared cores; huge pages make fresh memory cheap
    # no memory setting: a model named by whoever runs the app is limited by the memory free (viz_model.limits)
    env = {"OMP_WAIT_POLICY": "PASSIVE", "THP_MEM_ALLOC_ENABLE": "1", **os.environ, "PYTHONPATH": str(ROOT),
           "REAL_SIZE_DEVICE": DEVICE if part not in ("trace", "typing") else "cpu"}
    cmd = [sys.executable, __file__, "child", "--part", "ablate" if part == "sweeps" else part, "--impl", impl,
           "--model", str(folder), "--repeats", str(repeats)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": tail[0][:200]}
    return json.loads(lines[-1])


def table(results: dict) -> None:
    """One row per measure: ours, transformers (or the plain trace), the ratio and the goal."""
    goals = {"capture 64 s": "≤ 1.1× eager+attentions", "capture 512 s": "≤ 1.1× eager+attentions",
             "after reads RSS MB": "≤ 1,024 MB above the model", "typing → attention 64 s": "≤ 2 s",
             "ablate 1 head 64 s": "≤ 2 s"}
    rows = []
    pairs = {"load": ("ours", "transformers"), "forward": ("ours", "transformers"), "trace": ("bounded", "plain")}
    for part, by_impl in results.items():
        a, b = pairs.get(part, (next(iter(by_impl)), None))
        for key, value in by_impl.get(a, {}).items():
            other = by_impl.get(b, {}).get(key, "") if b else ""
            ratio = (f"{value / other:.2f}×" if isinstance(value, float) and isinstance(other, float) and other
                     else "")
            rows.append({"part": part, "measure": key, "value": value, "of": a if part in pairs else "ours",
                         "vs": f"{b}: {other:,.2f}" if isinstance(other, float) else (f"{b}: {other}" if other else ""),
                         "ratio": ratio, "goal": goals.get(key, "")})
    show(f"Real size: {DEFAULT_OUT.name}-shaped model, float32, {DEVICE} (load average "
         f"{', '.join(f'{x:.2f}' for x in os.getloadavg())})", rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", nargs="?", default="bench", choices=["build", "bench", "child"])
    parser.add_argument("--out", "--model", dest="out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", default="load,forward,trace,typing,ablate",
                        help=f"parts, comma-separated, of: {', '.join(PLAN)} (sweeps: the effect map and the exact and "
                             "attribution sweeps at 32 tokens, minutes on a CPU)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=os.environ.get("REAL_SIZE_DEVICE", "cpu"),
                        help="cpu (default) or cuda: where ours and transformers run")
    parser.add_argument("--part")
    parser.add_argument("--impl")
    args = parser.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    if args.step == "build":
        build(args.out)
        return
    if args.step == "child":
        print(json.dumps(CHILDREN[args.part](args.out, args.impl, args.repeats)), flush=True)
        return
    if not (args.out / MARKER).is_file():
        sys.exit(f"no complete checkpoint at {args.out}: run `python bench/real_size.py build --out {args.out}` first")
    results: dict[str, dict] = {}
    for part in args.only.split(","):
        if part not in PLAN:
            sys.exit(f"unknown part {part!r} (one of: {', '.join(PLAN)})")
        for impl in PLAN[part]:
            print(f"running {part} / {impl} …", file=sys.stderr, flush=True)
            results.setdefault(part, {})[impl] = run_child(part, impl, args.out, args.repeats)
            print(f"  {results[part][impl]}", file=sys.stderr, flush=True)
    table(results)
    save_results("" if DEVICE == "cpu" else DEVICE.split(":")[0])


if __name__ == "__main__":
    main()
