"""Memory and payload: peak resident memory of a full capture of the GPT-2-small shape at 1,024 tokens (each
scenario in a fresh process), and the bytes sent to the browser for the attention overview at 256 tokens
with 12 × 12 heads.

    .venv/bin/python bench/memory.py

Targets (issue 7): capture peak ≤ 2 GB; overview payload ≤ 2 MB.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys

from common import ROOT, save_results, show

SCENARIOS = {
    "model loaded, no forward": "",
    "plain forward": "model(ids)",
    "run_with_cache, every hook": "_, cache = model.run_with_cache(ids)",
    "every hook, read all (scores, probs too)": "_, cache = model.run_with_cache(ids); [cache[n] for n in cache]",
    "every hook, stored as float16": "import torch; _, cache = model.run_with_cache(ids, store_dtype=torch.float16)",
    "app trace (viz_ui.analysis.text_trace.run_trace)": "from viz_ui.analysis.text_trace import run_trace; run_trace(model, tok, text)",
    "app trace + all-heads overview": "from viz_ui.analysis.text_trace import run_trace; from viz_ui.analysis.heads import overview_patterns; "
                                      "overview_patterns(run_trace(model, tok, text).arrays, 12)",
    "app trace pickled + one copy (st.cache_data did this; now cache_resource)":
        "import pickle; from viz_ui.analysis.text_trace import run_trace; stored = pickle.dumps(run_trace(model, tok, text)); "
        "copy = pickle.loads(stored)",
}


def child(code: str, n: int) -> None:
    import torch

    from viz_model import Config, VizTransformer
    from viz_model.tokenizer import IdTokenizer
    torch.set_grad_enabled(False)
    # the GPT-2-small shape built directly (random weights), so the peak is not that of a conversion
    model = VizTransformer(Config(n_layers=12, d_model=768, n_heads=12, d_head=64, d_mlp=3072, d_vocab=50257,
                                  n_ctx=1024, positional="learned", mlp="gelu_tanh", family="gpt2")).eval()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ids = torch.randint(0, 50257, (1, n), generator=torch.Generator().manual_seed(0))
    tok, text = IdTokenizer(50257), " ".join(map(str, ids[0].tolist()))
    exec(code, {"model": model, "ids": ids, "tok": tok, "text": text})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"base_mb": base / 1024, "peak_mb": peak / 1024}))


def payload() -> dict:
    import numpy as np

    from viz_ui.views.figures import attention_grid
    rng = np.random.default_rng(0)
    p = rng.random((12, 12, 256, 256)).astype(np.float32)
    p /= p.sum(-1, keepdims=True)
    fig, pooled = attention_grid(np.tril(p))
    return {"bytes": len(fig.to_json().encode()), "pooled": pooled}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(SCENARIOS[sys.argv[2]], int(sys.argv[3]))
        return
    rows = []
    for name in SCENARIOS:
        out = subprocess.run([sys.executable, __file__, "--child", name, "1024"], capture_output=True, text=True,
                             cwd=ROOT / "bench")
        res = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {}
        rows.append({"GPT-2-small shape, 1,024 tokens": name, "peak RSS MB": res.get("peak_mb"),
                     "after loading MB": res.get("base_mb"), "error": "" if res else out.stderr[-200:]})
    show("Peak resident memory (fresh process per row)", rows, "Target: full capture ≤ 2,048 MB.")
    pay = payload()
    show("Bytes sent for the attention overview (12 layers × 12 heads × 256 tokens)",
         [{"figure JSON bytes": pay["bytes"], "MB": pay["bytes"] / 2**20, "max-pooled": pay["pooled"]}],
         "Target: ≤ 2 MB.")
    save_results()


if __name__ == "__main__":
    main()
