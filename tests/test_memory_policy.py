"""The memory policy: a model named by whoever runs the server (``load_model``) is limited by the memory really
free, an upload by the server's cap; the estimate's resident part matches what a load really keeps."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from viz_model import Config, VizTransformer, load_model, load_upload, save_checkpoint
from viz_model.limits import (BudgetError, DEFAULT_MEMORY_MARGIN_MB, check_budget, count_params, estimate_bytes,
                              estimate_parts, free_memory_bytes, memory_limit, memory_limit_of, memory_margin_bytes)
from viz_model.loading.weights import MAX_MESSAGE, CheckpointError

from conftest import small_config, small_model
from helpers import child_env

MB = 2**20
# Llama-3.2-1B's shape (config.json of meta-llama/Llama-3.2-1B): 1.24 B parameters, tied embeddings
LLAMA_1B = Config(n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8, d_head=64, d_mlp=8192, d_vocab=128_256,
                  n_ctx=131_072, positional="rotary", norm="rmsnorm", mlp="swiglu", attn_bias=False, mlp_bias=False,
                  tied_embeddings=True, family="llama")


@pytest.fixture
def small_file(tmp_path, tokenizer):
    return save_checkpoint(small_model(), tokenizer, tmp_path / "small.safetensors")


def test_a_server_model_is_not_held_to_the_upload_cap(small_file, monkeypatch):
    """The same file: refused as an upload above VIZ_MAX_MODEL_MB, loaded by load_model (memory free)."""
    monkeypatch.setenv("VIZ_MAX_MODEL_MB", "0.001")
    with pytest.raises(CheckpointError, match=r"cap for models from users \(VIZ_MAX_MODEL_MB\)"):
        load_upload("small.safetensors", small_file.read_bytes())
    model, _ = load_model(small_file)
    assert model.n_params() == small_model().n_params()


def test_a_server_model_above_the_free_memory_is_refused_in_one_line(small_file, monkeypatch):
    import viz_model.limits as limits
    cfg = small_model().cfg
    need = estimate_bytes(cfg)
    monkeypatch.setenv("VIZ_MEMORY_MARGIN_MB", "0")
    monkeypatch.setattr(limits, "free_memory_bytes", lambda: need - 1)
    with pytest.raises(CheckpointError) as info:
        load_model(small_file)
    message = str(info.value)
    assert "\n" not in message and len(message) <= MAX_MESSAGE
    for part in ("small.safetensors", "would need about", "MB is free", "VIZ_MEMORY_MARGIN_MB", "bfloat16",
                 "device_map", "offload_folder"):
        assert part in message, (part, message)
    monkeypatch.setattr(limits, "free_memory_bytes", lambda: need)
    load_model(small_file)  # exactly enough is enough
    monkeypatch.setenv("VIZ_MEMORY_MARGIN_MB", str(2 * need / MB))
    monkeypatch.setattr(limits, "free_memory_bytes", lambda: 2 * need)
    with pytest.raises(CheckpointError, match="free after a"):
        load_model(small_file)


def test_the_1b_model_fits_a_machine_with_the_memory_and_not_the_upload_cap(monkeypatch):
    """Llama-3.2-1B in float32: about 6.5 GB (5 GB of weights); a machine with 16 GB free loads it, the 4 GB upload
    cap does not, and with 6 GB free the refusal names the bfloat16 alternative (weights at half the bytes)."""
    import viz_model.limits as limits
    monkeypatch.delenv("VIZ_MAX_MODEL_MB", raising=False)
    monkeypatch.delenv("VIZ_MEMORY_MARGIN_MB", raising=False)
    assert 1.23e9 < count_params(LLAMA_1B) < 1.24e9
    estimate = estimate_bytes(LLAMA_1B, 4)
    assert 4 * count_params(LLAMA_1B) < estimate < 8e9
    monkeypatch.setattr(limits, "free_memory_bytes", lambda: 16 * 2**30)
    with memory_limit_of("free"):
        assert check_budget(LLAMA_1B, element_size=4) == estimate
    with pytest.raises(BudgetError, match="cap"):
        check_budget(LLAMA_1B, element_size=4)  # the default limit is the upload cap
    monkeypatch.setattr(limits, "free_memory_bytes", lambda: 6 * 2**30)
    with memory_limit_of("free"), pytest.raises(BudgetError) as info:
        check_budget(LLAMA_1B, element_size=4)
    half = estimate_bytes(LLAMA_1B, 2)
    assert f"about {half / MB:,.0f} MB" in str(info.value) and half < 0.65 * estimate
    with memory_limit_of("free"):
        check_budget(LLAMA_1B, element_size=2)  # bfloat16 fits in 6 GB


def test_limit_settings(monkeypatch):
    monkeypatch.delenv("VIZ_MEMORY_MARGIN_MB", raising=False)
    assert memory_margin_bytes() == DEFAULT_MEMORY_MARGIN_MB * MB
    for value, expected in (("0", 0), ("512", 512 * MB), ("abc", DEFAULT_MEMORY_MARGIN_MB * MB),
                            ("-3", DEFAULT_MEMORY_MARGIN_MB * MB), ("nan", DEFAULT_MEMORY_MARGIN_MB * MB),
                            ("inf", DEFAULT_MEMORY_MARGIN_MB * MB)):
        monkeypatch.setenv("VIZ_MEMORY_MARGIN_MB", value)
        assert memory_margin_bytes() == expected, value
    assert 0 < free_memory_bytes() < 2**50
    assert memory_limit()[0] == "cap"
    with memory_limit_of("free"):
        kind, limit = memory_limit()
        assert kind == "free" and 0 <= limit <= free_memory_bytes()
    assert memory_limit()[0] == "cap"
    with pytest.raises(ValueError, match="unknown memory limit"):
        with memory_limit_of("plenty"):
            pass


MEASURE = textwrap.dedent("""
    import json, sys
    import torch, tokenizers, safetensors
    from viz_model import load_model
    from viz_model.limits import estimate_parts
    torch.zeros(1) @ torch.zeros(1)
    # Warm-up: a tiny checkpoint loaded the same way first, so that lazy imports, the thread pool and the first
    # dtype conversion (fixed costs, a few MB) are paid before the "before" reading and not counted as weights.
    warm, _ = load_model(sys.argv[3], dtype=sys.argv[2])
    del warm

    def rss():
        out = {}
        for line in open("/proc/self/status"):
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
        return out

    before = rss()
    model, _ = load_model(sys.argv[1], dtype=sys.argv[2])
    after = rss()
    parts = estimate_parts(model.cfg, model.dtype.itemsize)
    print(json.dumps({"anon": after["RssAnon"] - before["RssAnon"], "file": after["RssFile"] - before["RssFile"],
                      "estimate": parts["params"] + parts["fused_qkv"] + parts["positions"]}))
""")


def test_the_estimated_resident_size_matches_a_real_load(tmp_path, tokenizer):
    """A 63M-parameter Llama-like model in a fresh process, loaded and probed. Where the file is converted (bfloat16
    file to float32 model) the weights are the process's own memory (RssAnon); where a float32 file is used as it
    is, the weights are the file's mapped pages (RssFile). Either way the resident size is the estimate's resident
    part (parameters, fused [W_Q|W_K|W_V], position tables) and no more than 25 % above it (the probe run,
    tokenizer). Measured after a warm-up load of a tiny checkpoint (imports, thread pool), and with the load's freed
    temporaries given back (``release_free_memory``): before that, the bfloat16 case measured 1.22-1.25x."""
    cfg = small_config(n_layers=6, d_model=768, n_heads=12, n_kv_heads=4, d_head=64, d_mlp=2048, d_vocab=16_384,
                       n_ctx=1024, positional="rotary", norm="rmsnorm", mlp="swiglu", tied_embeddings=False)
    model = VizTransformer(cfg)
    f32 = save_checkpoint(model, tokenizer, tmp_path / "f32.safetensors")
    bf16 = save_checkpoint(model, tokenizer, tmp_path / "bf16.safetensors", dtype=torch.bfloat16)
    del model
    tiny = save_checkpoint(VizTransformer(small_config(d_vocab=16_384, n_ctx=1024, positional="rotary", norm="rmsnorm",
                                                      mlp="swiglu", tied_embeddings=False)), tokenizer,
                           tmp_path / "tiny.safetensors")
    for path, dtype, kinds in ((f32, "float32", ("anon", "file")), (bf16, "float32", ("anon",)),
                               (f32, "bfloat16", ("anon",))):
        proc = subprocess.run([sys.executable, "-c", MEASURE, str(path), dtype, str(tiny)], capture_output=True,
                              text=True, timeout=300, env=child_env())
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = json.loads(proc.stdout)
        measured = sum(out[k] for k in kinds)
        assert 0.95 * out["estimate"] <= measured <= 1.25 * out["estimate"], (path.name, dtype, out)
