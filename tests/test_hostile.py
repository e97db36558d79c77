"""Hostile and oversized uploads never hurt the shared server (issue 14, loader side).

Every hostile file gives one :class:`CheckpointError` whose message is one line of at most 300 characters,
quickly and without allocating what the file claims (the refusal comes from the config's types, ranges and
memory estimate, not from a failed allocation), and leaves nothing in the upload folder. Valid uploads still
load. The worst cases also run in a subprocess under a 6 GiB address-space limit.
"""

from __future__ import annotations

import io
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save as save_bytes

from conftest import small_config, small_model
from helpers import child_env
from viz_model import CheckpointError, Config, ConfigError, VizTransformer, load_model, load_upload, save_checkpoint
from viz_model.limits import (DEFAULT_MAX_MODEL_MB, INT_RANGES, count_params, estimate_bytes, estimate_parts,
                              max_model_bytes)
from viz_model.loading.sources import MAX_MEMBERS, clean_stale_uploads, upload_root

MAX_LEN = 300


# ----------------------------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch) -> Path:
    """Every test gets its own temporary directory (so the upload folder of this test is its own)."""
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    monkeypatch.delenv("VIZ_MAX_MODEL_MB", raising=False)
    return spool


def expect_refusal(call, *words: str, seconds: float = 5.0) -> str:
    """``call`` raises CheckpointError: one line, at most 300 characters, holding every word; within ``seconds``."""
    start = time.perf_counter()
    with pytest.raises(CheckpointError) as info:
        call()
    elapsed = time.perf_counter() - start
    message = str(info.value)
    assert message.strip() and "\n" not in message and "\r" not in message, repr(message)
    assert len(message) <= MAX_LEN, (len(message), message)
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} not in {message!r}"
    assert elapsed < seconds, (elapsed, message)
    return message


def assert_no_leftovers(spool: Path) -> None:
    assert os.listdir(spool) == [], os.listdir(spool)


@pytest.fixture(scope="module")
def native_parts(tokenizer):
    model = small_model()
    return json.loads(model.cfg.to_json()), {k: v.clone() for k, v in model.state_dict().items()}, tokenizer.to_str()


def native(parts, changes: dict | None = None, config_text: str | None = None, tokenizer: str | None = None,
           tensors: dict | None = None) -> bytes:
    """A native checkpoint's bytes: the small model's weights with its config changed at the JSON level."""
    cfg, state, tok = parts
    cfg = {**cfg, **(changes or {})}
    meta = {"format": "viz-transformer", "format_version": "1",
            "config": config_text if config_text is not None else json.dumps(cfg),
            "tokenizer": tokenizer if tokenizer is not None else tok}
    return save_bytes(tensors if tensors is not None else state, metadata=meta)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


BIG_DIGITS = "1" * 5000


# ----------------------------------------------------------------------------------------------- 1. native config fields


NATIVE_FIELDS = [
    # sizes: out of range (refused by the range, before anything is built)
    ("n_layers", 1_000_000, ("n_layers", "512")),
    ("n_layers", 0, ("n_layers",)),
    ("n_layers", -3, ("n_layers",)),
    ("n_ctx", 10**8, ("n_ctx",)),
    ("n_ctx", 10**9, ("n_ctx",)),
    ("d_model", 70_000, ("d_model",)),
    ("d_mlp", 10**9, ("d_mlp",)),
    ("d_mlp", 10**10, ("d_mlp",)),
    ("d_vocab", 10**7, ("d_vocab",)),
    ("n_heads", 4096, ("n_heads",)),
    ("d_head", 10**6, ("d_head",)),
    ("n_token_types", 10**9, ("n_token_types",)),
    ("n_token_types", 10**10, ("n_token_types",)),
    ("n_encoder_layers", 10**6, ("n_encoder_layers",)),
    ("n_kv_heads", 3, ("multiple",)),
    ("n_kv_heads", 0, ("n_kv_heads",)),
    # types: bool is not an int, strings and floats are not ints
    ("n_layers", True, ("n_layers",)),
    ("n_layers", "2", ("n_layers",)),
    ("n_layers", 2.0, ("n_layers",)),
    ("n_layers", None, ("n_layers",)),
    ("d_model", [32], ("d_model",)),
    ("decoder_start_id", True, ("decoder_start_id",)),
    ("attn_window", True, ("attn_window",)),
    ("attn_window", 0, ("attn_window",)),
    ("attn_window", "8", ("attn_window",)),
    ("attn_window", 1.5, ("attn_window",)),
    # floats: type, NaN, infinities, range
    ("dropout", "abc", ("dropout",)),
    ("dropout", -0.1, ("dropout",)),
    ("dropout", 1.0, ("dropout",)),
    ("dropout", float("nan"), ("dropout",)),
    ("dropout", True, ("dropout",)),
    ("layer_norm_eps", "1e-5", ("layer_norm_eps",)),
    ("layer_norm_eps", float("nan"), ("layer_norm_eps",)),
    ("layer_norm_eps", -1e-5, ("layer_norm_eps",)),
    ("layer_norm_eps", 0, ("layer_norm_eps",)),
    ("layer_norm_eps", 1.5, ("layer_norm_eps",)),
    ("layer_norm_eps", float("inf"), ("layer_norm_eps",)),
    ("embed_scale", "2", ("embed_scale",)),
    ("embed_scale", 1e39, ("embed_scale",)),
    ("embed_scale", float("nan"), ("embed_scale",)),
    ("embed_scale", 0, ("embed_scale",)),
    ("embed_scale", -1.0, ("embed_scale",)),
    ("rotary_base", "x", ("rotary_base",)),
    ("rotary_base", float("inf"), ("rotary_base",)),
    ("rotary_base", 0.5, ("rotary_base",)),
    # switches of the further families (issue 16)
    ("rotary_dim", 3, ("rotary_dim", "even")),
    ("rotary_dim", 10**6, ("rotary_dim",)),
    ("rotary_dim", True, ("rotary_dim",)),
    ("rotary_scaling", "yarn", ("rotary_scaling",)),
    ("rotary_factor", float("nan"), ("rotary_factor",)),
    ("rotary_factor", 0, ("rotary_factor",)),
    ("rotary_high_freq_factor", -4.0, ("rotary_high_freq_factor",)),
    ("rotary_original_ctx", 0, ("rotary_original_ctx",)),
    ("rotary_base_local", 0.5, ("rotary_base_local",)),
    ("qk_norm", "both", ("qk_norm",)),
    ("window_layers", [0], ("window_layers", "attn_window")),
    ("window_layers", [0, 0], ("window_layers",)),
    ("window_layers", [99], ("window_layers",)),
    ("window_layers", "0", ("window_layers",)),
    ("window_layers", list(range(10**5)), ("window_layers",)),
    ("attn_scale", True, ("attn_scale",)),
    ("attn_softcap", 0, ("attn_softcap",)),
    ("attn_softcap", -50.0, ("attn_softcap",)),
    ("logit_softcap", "30", ("logit_softcap",)),
    ("logit_softcap", float("inf"), ("logit_softcap",)),
    ("parallel_residual", "yes", ("parallel_residual",)),
    ("rel_pos_buckets", 2, ("rel_pos_buckets",)),
    ("rel_pos_buckets", 10**6, ("rel_pos_buckets",)),
    ("rel_pos_buckets", True, ("rel_pos_buckets",)),
    ("rel_pos_max_distance", 0, ("rel_pos_max_distance",)),
    ("position_pad_id", 1, ("position_pad_id", "learned")),  # the small model's positions are sinusoidal
    ("position_pad_id", True, ("position_pad_id",)),
    ("position_pad_id", 10**7, ("position_pad_id",)),
    # booleans: only JSON true / false
    ("causal", "no", ("causal", "true or false")),
    ("causal", "false", ("causal",)),
    ("causal", 0, ("causal",)),
    ("causal", None, ("causal",)),
    ("tied_embeddings", "yes", ("tied_embeddings",)),
    ("final_norm", 1, ("final_norm",)),
    # enums
    ("positional", "alibi", ("positional",)),
    ("positional", 3, ("positional",)),
    ("positional", ["rotary"], ("positional",)),
    ("norm", "batchnorm", ("norm",)),
    ("norm_placement", "middle", ("norm_placement",)),
    ("mlp", "swish", ("mlp",)),
    ("lm_head", "classifier", ("lm_head",)),
    # strings shown in the UI: plain short names only; extra bounded
    ("family", "![x](http://evil/x.png)", ("family",)),
    ("family", "<script>alert(1)</script>", ("family",)),
    ("family", "a" * 41, ("family",)),
    ("family", "", ("family",)),
    ("family", 5, ("family",)),
    ("family", "gpt2\n# heading", ("family",)),
    ("extra", "notes", ("extra",)),
    ("extra", [1, 2], ("extra",)),
    ("extra", {"note": "x" * 10_000}, ("extra", "4,096")),
    ("extra", json.loads(nested(30).replace("[]", "{}").replace("[", '{"a":').replace("]", "}")), ("extra",)),
]


@pytest.mark.parametrize("field, value, words", NATIVE_FIELDS,
                         ids=[f"{f}={str(v)[:20]}" for f, v, _ in NATIVE_FIELDS])
def test_native_config_field(native_parts, private_tmp, field, value, words):
    data = native(native_parts, {field: value})
    expect_refusal(lambda: load_upload("hostile.safetensors", data), "hostile.safetensors", *words, seconds=2.0)
    assert_no_leftovers(private_tmp)


NATIVE_TEXTS = [
    ("nested-100k", nested(100_000), ("nested",)),
    ("nested-object", '{"extra": ' + nested(100_000) + "}", ("nested",)),
    ("5000-digit int", '{"n_layers": ' + BIG_DIGITS + "}", ("digits",)),
    ("5000-digit field", json.dumps({"n_layers": 2}).replace("2", BIG_DIGITS), ("digits",)),
    ("not an object", "[1, 2]", ("object",)),
    ("not JSON", "{n_layers: 2", ("JSON",)),
    ("empty", "", ("JSON",)),
    ("2 MB", json.dumps({"extra": {"pad": "x" * 2_000_000}}), ("characters",)),
    ("unknown field", json.dumps({"n_layers": 2, "__class__": "os.system"}), ("unknown", "__class__")),
    ("markdown key", json.dumps({"![x](http://evil/x.png)" * 5: 1}), ("unknown",)),
    ("missing fields", json.dumps({"n_layers": 2}), ("incomplete", "d_model")),
]


@pytest.mark.parametrize("name, text, words", NATIVE_TEXTS, ids=[n for n, _, _ in NATIVE_TEXTS])
def test_native_config_text(native_parts, private_tmp, name, text, words):
    data = native(native_parts, config_text=text)
    expect_refusal(lambda: load_upload("hostile.safetensors", data), "hostile.safetensors", *words, seconds=2.0)
    assert_no_leftovers(private_tmp)


@pytest.mark.parametrize("name, tok_text, words", [
    ("garbage", "garbage", ("tokenizer",)),
    ("nested", nested(100_000), ("tokenizer",)),
    ("wrong model", json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": 5, "merges": "x"}}), ("tokenizer",)),
    ("empty", "", ("tokenizer",)),
])
def test_native_tokenizer(native_parts, private_tmp, name, tok_text, words):
    data = native(native_parts, tokenizer=tok_text)
    expect_refusal(lambda: load_upload("hostile.safetensors", data), *words)
    assert_no_leftovers(private_tmp)


def test_huge_config_returns_at_once_without_memory(native_parts):
    """n_layers = 1e6 used to build a million blocks; n_ctx = 1e8 a 10^8 x d_model sinusoid."""
    for changes in ({"n_layers": 1_000_000}, {"n_ctx": 10**8}, {"n_ctx": 10**9, "d_model": 4096},
                    {"d_mlp": 10**10}, {"n_token_types": 10**9}):
        data = native(native_parts, changes)
        before = _rss()
        start = time.perf_counter()
        expect_refusal(lambda: load_upload("big.safetensors", data), "big.safetensors", seconds=1.0)
        assert time.perf_counter() - start < 1.0
        assert _rss() - before < 50 * 2**20, changes


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) * 1024
    return 0


def test_in_range_but_over_the_memory_estimate(native_parts, private_tmp):
    """Every field in range, the whole too large: the estimate refuses it, naming the cap and its setting."""
    for changes in ({"n_layers": 512, "d_model": 65_536}, {"d_vocab": 1_048_576, "d_model": 4096},
                    {"n_heads": 1024, "d_head": 16_384}, {"n_ctx": 1_048_576, "d_model": 65_536}):
        message = expect_refusal(lambda: load_upload("big.safetensors", native(native_parts, changes)),
                                 "MB", "VIZ_MAX_MODEL_MB", seconds=1.0)
        assert "cap" in message
    assert_no_leftovers(private_tmp)


def test_the_cap_is_a_setting(native_parts, monkeypatch):
    data = native(native_parts)
    load_upload("fine.safetensors", data)
    estimate = estimate_bytes(Config(**native_parts[0]))
    monkeypatch.setenv("VIZ_MAX_MODEL_MB", str(estimate / 2**20 * 0.99))
    expect_refusal(lambda: load_upload("fine.safetensors", data), "MB cap", "VIZ_MAX_MODEL_MB")
    monkeypatch.setenv("VIZ_MAX_MODEL_MB", str(estimate / 2**20 * 1.01))
    load_upload("fine.safetensors", data)
    for bad in ("abc", "nan", "-5", "0", "inf"):
        monkeypatch.setenv("VIZ_MAX_MODEL_MB", bad)
        assert max_model_bytes() == DEFAULT_MAX_MODEL_MB * 2**20
        load_upload("fine.safetensors", data)


def test_a_long_sinusoid_loads_and_the_estimate_counts_it(native_parts, monkeypatch):
    """n_ctx = 1,000,000 (in range) with a sinusoid: it loads (the table is 128 MB), and a cap below its
    estimate refuses it before the table is built."""
    cfg = Config(**{**native_parts[0], "n_ctx": 1_000_000})
    parts = estimate_parts(cfg)
    assert parts["positions"] == 4 * 1_000_000 * 32 and parts["load"] >= 16 * 1_000_000 * 32
    monkeypatch.setenv("VIZ_MAX_MODEL_MB", str(estimate_bytes(cfg) // 2**20 - 1))
    before = _rss()
    expect_refusal(lambda: load_upload("long.safetensors", native(native_parts, {"n_ctx": 1_000_000})), "cap")
    assert _rss() - before < 50 * 2**20


# ----------------------------------------------------------------------------------------------- 2. numerical guard


def test_weights_that_overflow_are_refused_naming_the_first_hook(native_parts, private_tmp):
    state = {k: v.clone() for k, v in native_parts[1].items()}
    state["embed.W_E"] = torch.full_like(state["embed.W_E"], 3e19)  # finite, but its square overflows float32
    state["embed.W_E"][:, ::2] = -3e19
    message = expect_refusal(lambda: load_upload("overflow.safetensors", native(native_parts, tensors=state)),
                             "not finite", "blocks.0.ln1.hook_scale")
    assert "probe" in message
    assert_no_leftovers(private_tmp)


def test_probe_covers_encoder_decoder_models(tmp_path, tokenizer):
    model = small_model(n_encoder_layers=2, decoder_start_id=1, decoder_end_id=2)
    with torch.no_grad():
        model.encoder.blocks[1].mlp.W_out.fill_(1e30)
    path = save_checkpoint(model, tokenizer, tmp_path / "seq2seq.safetensors")
    # pre-LN: the block's output is huge but finite; the encoder's final norm squares it first (forward order)
    expect_refusal(lambda: load_model(path), "not finite", "encoder.ln_final.hook_scale")


# ----------------------------------------------------------------------------------------------- 3. Hugging Face configs


@pytest.fixture(scope="module")
def hf():
    pytest.importorskip("transformers")
    import hf_models

    return hf_models


@pytest.fixture(scope="module")
def hf_folders(hf, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf-hostile")
    return {"gpt2": hf.save(hf.build("GPT2LMHeadModel", hf.gpt2_config()), root / "gpt2"),
            "bert": hf.save(hf.build("BertForMaskedLM", hf.bert_config()), root / "bert"),
            "llama": hf.save(hf.build("LlamaForCausalLM", hf.llama_config()), root / "llama"),
            "mistral": hf.save(hf.build("MistralForCausalLM", hf.llama_config("MistralConfig", sliding_window=8)),
                               root / "mistral")}


def hf_zip(folder: Path, changes: dict | None = None, config_text: str | None = None) -> bytes:
    """A zip of ``folder`` with its config.json changed (stored uncompressed when given as text, so that a
    repetitive hostile text is judged by the JSON reader, not by the compression-ratio guard)."""
    config = json.loads((folder / "config.json").read_text())
    config.update(changes or {})
    buf = io.BytesIO()
    kind = zipfile.ZIP_STORED if config_text is not None else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(buf, "w", kind) as zf:
        for f in sorted(folder.iterdir()):
            if f.name != "config.json":
                zf.writestr(f.name, f.read_bytes())
        zf.writestr("config.json", config_text if config_text is not None else json.dumps(config))
    return buf.getvalue()


HF_CASES = [
    ("gpt2", {"n_layer": 10**6}, ("n_layers",)),
    ("gpt2", {"n_positions": 10**9}, ("n_ctx",)),
    ("gpt2", {"n_embd": True}, ("n_embd",)),
    ("gpt2", {"vocab_size": "101"}, ("vocab_size",)),
    ("gpt2", {"n_inner": "4"}, ("n_inner",)),
    ("gpt2", {"n_inner": 10**10}, ("d_mlp",)),
    ("gpt2", {"tie_word_embeddings": "no"}, ("tie_word_embeddings",)),
    ("gpt2", {"scale_attn_weights": "yes"}, ("scale_attn_weights",)),
    ("gpt2", {"layer_norm_epsilon": "abc"}, ("layer_norm_epsilon",)),
    ("gpt2", {"layer_norm_epsilon": float("nan")}, ("layer_norm_epsilon",)),
    ("gpt2", {"layer_norm_epsilon": -1.0}, ("layer_norm_eps",)),
    ("gpt2", {"activation_function": ["gelu"]}, ("activation",)),
    ("gpt2", {"model_type": ["gpt2"]}, ("model_type",)),
    ("gpt2", {"model_type": {"a": 1}}, ("model_type",)),
    ("gpt2", {"quantization_config": {"bits": 4}}, ("quantized",)),
    ("gpt2", {"n_layer": 200, "n_embd": 8192, "n_head": 64}, ("VIZ_MAX_MODEL_MB",)),
    ("bert", {"type_vocab_size": 10**9}, ("n_token_types",)),
    ("bert", {"layer_norm_eps": "x"}, ("layer_norm_eps",)),
    ("bert", {"layer_norm_eps": 0}, ("layer_norm_eps",)),
    ("bert", {"hidden_act": {}}, ("activation",)),
    ("bert", {"position_embedding_type": 5}, ("position_embedding_type",)),
    ("bert", {"tie_word_embeddings": 1}, ("tie_word_embeddings",)),
    ("bert", {"max_position_embeddings": 10**8}, ("n_ctx",)),
    ("llama", {"rms_norm_eps": float("nan")}, ("rms_norm_eps",)),
    ("llama", {"rms_norm_eps": -1e-6}, ("layer_norm_eps",)),
    ("llama", {"rope_parameters": {"rope_type": "default", "rope_theta": "abc"}}, ("rope_theta",)),
    ("llama", {"rope_parameters": {"rope_type": "default", "rope_theta": float("inf")}}, ("rope_theta",)),
    ("llama", {"rope_parameters": {"rope_type": "default", "rope_theta": 0.5}}, ("rotary_base",)),
    ("llama", {"rope_parameters": None, "rope_theta": "abc"}, ("rope_theta",)),
    ("llama", {"rope_parameters": "default"}, ("rope_parameters",)),
    ("llama", {"rope_parameters": {"rope_type": ["x"]}}, ("rotary scaling",)),
    ("llama", {"rope_scaling": "linear"}, ("rope_scaling",)),
    ("llama", {"num_key_value_heads": "2"}, ("num_key_value_heads",)),
    ("llama", {"attention_bias": "false"}, ("attention_bias",)),
    ("llama", {"mlp_bias": 0}, ("mlp_bias",)),
    ("llama", {"max_position_embeddings": 10**8}, ("n_ctx",)),
    ("llama", {"vocab_size": 10**7}, ("d_vocab",)),
    ("llama", {"head_dim": True}, ("head_dim",)),
    ("llama", {"hidden_act": "gelu"}, ("hidden_act",)),
    ("mistral", {"sliding_window": True}, ("sliding_window",)),
    ("mistral", {"sliding_window": -4}, ("attn_window",)),
]


@pytest.mark.parametrize("family, changes, words", HF_CASES,
                         ids=[f"{f}-{next(iter(c))}={str(next(iter(c.values())))[:12]}" for f, c, _ in HF_CASES])
def test_hf_config_field(hf_folders, private_tmp, family, changes, words):
    data = hf_zip(hf_folders[family], changes)
    expect_refusal(lambda: load_upload(f"{family}.zip", data), f"{family}.zip", *words, seconds=3.0)
    assert_no_leftovers(private_tmp)


@pytest.mark.parametrize("name, text, words", [
    ("nested", nested(100_000), ("nested",)),
    ("nested-object", '{"model_type": "gpt2", "x": ' + nested(100_000) + "}", ("nested",)),
    ("digits", '{"model_type": "gpt2", "n_layer": ' + BIG_DIGITS + "}", ("digits",)),
    ("2 MB", json.dumps({"model_type": "gpt2", "pad": "x" * (2 * 2**20)}), ("config.json", "MB")),
    ("NaN literal", '{"model_type": "gpt2", "n_embd": NaN}', ("n_embd",)),
])
def test_hf_config_text(hf_folders, private_tmp, tmp_path, name, text, words):
    data = hf_zip(hf_folders["gpt2"], config_text=text)
    expect_refusal(lambda: load_upload("gpt2.zip", data), *words)
    assert_no_leftovers(private_tmp)
    folder = Path(shutil.copytree(hf_folders["gpt2"], tmp_path / "gpt2"))
    (folder / "config.json").write_text(text)
    expect_refusal(lambda: load_model(folder), *words)


def test_hf_tokenizer_that_is_hostile(hf_folders, tmp_path, private_tmp):
    folder = Path(shutil.copytree(hf_folders["gpt2"], tmp_path / "gpt2"))
    for text in (nested(100_000), '{"model": {"type": "WordPiece", "vocab": [1, 2]}}', "\udcff"):
        (folder / "tokenizer.json").write_text(text, errors="surrogateescape")
        expect_refusal(lambda: load_model(folder), "tokenizer.json")
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            for f in folder.iterdir():
                zf.writestr(f.name, f.read_bytes())
        expect_refusal(lambda: load_upload("gpt2.zip", buf.getvalue()), "tokenizer.json")
    assert_no_leftovers(private_tmp)


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama", "mistral"])
def test_valid_hf_zips_still_load(hf_folders, private_tmp, family):
    model, _ = load_upload(f"{family}.zip", hf_zip(hf_folders[family]))
    assert model.cfg.family == family and model.cfg.validate()
    _, cache = model.run_with_cache(torch.arange(6)[None] % model.cfg.d_vocab)
    assert all(bool(torch.isfinite(t).all()) for n, t in cache.items() if "scores" not in n)
    assert_no_leftovers(private_tmp)


# ----------------------------------------------------------------------------------------------- 4. nanoGPT model_args


def nanogpt_bytes(args_changes: dict | None = None, model: dict | None = None) -> bytes:
    args = dict(n_layer=1, n_head=2, n_embd=8, block_size=16, bias=True, vocab_size=11, dropout=0.0)
    args.update(args_changes or {})
    buf = io.BytesIO()
    torch.save({"model_args": args, "model": model if model is not None else {"transformer.wte.weight": torch.zeros(11, 8)}},
               buf)
    return buf.getvalue()


@pytest.mark.parametrize("changes, words", [
    ({"n_layer": 10**6}, ("n_layers",)),
    ({"block_size": 10**9}, ("n_ctx",)),
    ({"vocab_size": 10**9}, ("d_vocab",)),
    ({"n_embd": 65_536, "n_layer": 512, "n_head": 64}, ("VIZ_MAX_MODEL_MB",)),
    ({"bias": "no"}, ("bias", "true or false")),
    ({"bias": 1}, ("bias",)),
    ({"n_embd": True}, ("n_embd",)),
    ({"vocab_size": "x"}, ("vocab_size",)),
    ({"n_head": 3}, ("n_embd", "n_head")),
    ({"block_size": 2.5}, ("block_size",)),
])
def test_nanogpt_model_args(private_tmp, changes, words):
    expect_refusal(lambda: load_upload("ckpt.pt", nanogpt_bytes(changes)), "ckpt.pt", *words, seconds=3.0)
    assert_no_leftovers(private_tmp)


def test_nanogpt_with_odd_keys_and_values(private_tmp):
    expect_refusal(lambda: load_upload("ckpt.pt", nanogpt_bytes(model={1: torch.zeros(2), "x": [1, 2]})), "missing")
    expect_refusal(lambda: load_upload("ckpt.pt", nanogpt_bytes(model={"transformer.wte.weight": [0.0] * 88})),
                   "not a tensor")
    assert_no_leftovers(private_tmp)


# ----------------------------------------------------------------------------------------------- 5. zips


@pytest.fixture(scope="module")
def gib_bomb() -> bytes:
    """A real zip bomb: about 1 MB that inflates to 1 GiB of zeros (plus a small config.json)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("config.json", json.dumps({"model_type": "gpt2"}))
        with zf.open("model.safetensors", "w", force_zip64=True) as member:
            chunk = bytes(2**24)
            for _ in range(64):
                member.write(chunk)
    data = buf.getvalue()
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo("model.safetensors")
    assert info.file_size == 2**30 and len(data) < 1.5 * 2**20
    return data


def test_gib_zip_bomb_is_refused_before_unpacking(gib_bomb, private_tmp):
    before = _rss()
    expect_refusal(lambda: load_upload("bomb.zip", gib_bomb), "bomb.zip", "cap", seconds=1.0)
    # with a cap above its size, the compression ratio refuses it, still before a byte is written
    message = expect_refusal(lambda: load_upload("bomb.zip", gib_bomb, max_mb=4096), "model.safetensors",
                             "zip bomb", seconds=1.0)
    assert "1,024.0 MB" in message
    assert _rss() - before < 50 * 2**20
    assert_no_leftovers(private_tmp)


def _deflated(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


@pytest.mark.parametrize("name, members, words", [
    ("large zeros", {"config.json": b"{}", "model.safetensors": bytes(9 * 2**20)}, ("model.safetensors", "zip bomb")),
    ("small text", {"config.json": b" " * 500_000}, ("config.json", "zip bomb")),
    ("tokenizer", {"config.json": b"{}", "tokenizer.json": b"a" * 4_000_000}, ("tokenizer.json", "zip bomb")),
])
def test_member_compression_ratio(private_tmp, name, members, words):
    expect_refusal(lambda: load_upload("bomb.zip", _deflated(members)), *words)
    assert_no_leftovers(private_tmp)


def test_many_members_are_refused_before_unpacking(private_tmp):
    members = {f"part-{i}.json": b"{}" for i in range(MAX_MEMBERS + 44)}
    data = _deflated(members)
    message = expect_refusal(lambda: load_upload("many.zip", data), "many.zip", "300", "entries", seconds=1.0)
    assert "256" in message
    folders = _deflated({f"d{i}/": b"" for i in range(300)} | {"config.json": b"{}"})
    expect_refusal(lambda: load_upload("many.zip", folders), "entries")
    assert_no_leftovers(private_tmp)


def test_torch_archive_with_many_records(private_tmp):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for i in range(20_001):
            zf.writestr(f"archive/data/{i}", b"")
    expect_refusal(lambda: load_upload("many.pt", buf.getvalue()), "many.pt", "20,001", "records")
    assert_no_leftovers(private_tmp)


def test_zip_with_junk_bytes_and_odd_names(private_tmp):
    expect_refusal(lambda: load_upload("junk.zip", b"PK\x03\x04" + bytes(100)), "junk.zip", "zip")
    long_name = "x" * 5000 + ".exe"
    expect_refusal(lambda: load_upload("odd.zip", _deflated({long_name: b"1"})), "unexpected")
    message = expect_refusal(lambda: load_upload("a" * 5000 + ".zip", b"PK"), "zip")
    assert len(message) <= MAX_LEN
    assert_no_leftovers(private_tmp)


# ----------------------------------------------------------------------------------------------- 6. temporary folders


def test_upload_folder_is_one_private_folder(native_parts, private_tmp):
    seen = []
    load_upload("ok.safetensors", native(native_parts), progress=lambda f, m: seen.extend(os.listdir(private_tmp)))
    assert seen and set(seen) == {upload_root().name}
    assert upload_root().parent == private_tmp
    assert_no_leftovers(private_tmp)


def test_leftovers_of_killed_processes_are_removed(native_parts, private_tmp):
    root = upload_root()
    root.mkdir(mode=0o700)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (root / f"viz-upload-{dead.pid}-abc").mkdir()
    (root / f"viz-upload-{dead.pid}-abc" / "big.safetensors").write_bytes(b"x" * 1000)
    live = root / f"viz-zip-{os.getppid()}-keep"  # a live process (pytest's parent) and recent: kept
    live.mkdir()
    old = root / f"viz-zip-{os.getppid()}-old"  # a live process but two hours old: removed
    old.mkdir()
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    load_upload("ok.safetensors", native(native_parts))
    assert sorted(os.listdir(root)) == [live.name]
    live.rmdir()
    assert clean_stale_uploads() == []


def test_an_upload_killed_midway_is_cleaned_by_the_next(native_parts, private_tmp, tmp_path):
    """SIGKILL while the upload sits in its temporary folder: the folder stays; the next upload removes it."""
    data_path = tmp_path / "ok.safetensors"
    data_path.write_bytes(native(native_parts))
    script = textwrap.dedent(f"""
        import os, signal, tempfile
        tempfile.tempdir = {str(private_tmp)!r}
        from viz_model import load_upload
        data = open({str(data_path)!r}, "rb").read()
        load_upload("ok.safetensors", data, progress=lambda f, m: os.kill(os.getpid(), signal.SIGKILL))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, env=child_env())
    assert proc.returncode == -signal.SIGKILL
    left = os.listdir(upload_root())
    assert len(left) == 1 and left[0].startswith("viz-upload-")
    load_upload("ok.safetensors", data_path.read_bytes())
    assert_no_leftovers(private_tmp)


# ----------------------------------------------------------------------------------------------- 7. estimate


CONFIGS = {
    "small": small_config(),
    "gpt2": Config(n_layers=12, d_model=768, n_heads=12, d_head=64, d_mlp=3072, d_vocab=50257, n_ctx=1024,
                   positional="learned", mlp="gelu_tanh", family="gpt2"),
    "bert-base": Config(n_layers=12, d_model=768, n_heads=12, d_head=64, d_mlp=3072, d_vocab=30522, n_ctx=512,
                        positional="learned", norm_placement="post", causal=False, final_norm=False,
                        n_token_types=2, embed_norm=True, lm_head="mlm", unembed_bias=True, family="bert"),
    "qwen2-0.5b": Config(n_layers=24, d_model=896, n_heads=14, n_kv_heads=2, d_head=64, d_mlp=4864, d_vocab=151_936,
                         n_ctx=131_072, positional="rotary", rotary_base=1e6, norm="rmsnorm", mlp="swiglu",
                         attn_bias=True, mlp_bias=False, layer_norm_eps=1e-6, family="qwen2"),
    "llama-small": Config(n_layers=16, d_model=1024, n_heads=16, n_kv_heads=4, d_head=64, d_mlp=2816, d_vocab=32_000,
                          n_ctx=131_072, positional="rotary", norm="rmsnorm", mlp="swiglu", attn_bias=False,
                          mlp_bias=False, tied_embeddings=False, family="llama"),
    "bart-base": Config(n_layers=6, n_encoder_layers=6, d_model=768, n_heads=12, d_head=64, d_mlp=3072,
                        d_vocab=50265, n_ctx=1024, positional="learned", norm_placement="post", final_norm=False,
                        embed_norm=True, unembed_bias=True, decoder_start_id=2, decoder_end_id=2, family="bart"),
}


@pytest.mark.parametrize("name", ["gpt2", "bert-base", "qwen2-0.5b", "llama-small", "bart-base"])
def test_real_model_sizes_are_under_the_default_cap(name):
    estimate = estimate_bytes(CONFIGS[name].validate())
    assert 4 * count_params(CONFIGS[name]) < estimate <= DEFAULT_MAX_MODEL_MB * 2**20


@pytest.mark.parametrize("overrides", [{}, {"positional": "learned", "tied_embeddings": False},
                                       {"positional": "rotary", "norm": "rmsnorm", "mlp": "swiglu", "n_kv_heads": 2},
                                       {"n_encoder_layers": 3, "decoder_start_id": 1, "decoder_end_id": 2},
                                       {"lm_head": "mlm", "unembed_bias": True, "n_token_types": 2, "embed_norm": True,
                                        "causal": False, "attn_bias": False, "mlp_bias": False},
                                       {"lm_head": "none", "final_norm": False, "norm_placement": "post"}])
def test_count_params_is_exact(overrides):
    cfg = small_config(**overrides)
    with torch.device("meta"):
        model = VizTransformer(cfg)
    assert count_params(cfg) == model.n_params()


def test_estimate_grows_with_every_size():
    base = estimate_bytes(CONFIGS["small"])
    for field in ("n_layers", "d_model", "d_mlp", "d_vocab", "n_ctx", "n_heads"):
        value = getattr(CONFIGS["small"], field) * 2
        bigger = small_config(**{field: value, **({"d_head": 8} if field == "d_model" else {})})
        assert estimate_bytes(bigger) > base, field


def test_config_validate_is_exact_about_types():
    for field, value in (("n_layers", True), ("causal", "no"), ("layer_norm_eps", "1e-5"), ("attn_window", True),
                         ("embed_scale", float("inf")), ("dropout", "abc"), ("family", "a b")):
        with pytest.raises(ConfigError, match=field):
            small_config(**{field: value}).validate()
    for field, (low, high) in INT_RANGES.items():
        if field in ("n_kv_heads", "decoder_start_id", "decoder_end_id"):
            continue
        with pytest.raises(ConfigError, match=field):
            small_config(**{field: high + 1}).validate()
    assert small_config(attn_window=4, embed_scale=2, rotary_base=10_000).validate()  # ints are fine where floats go


# ----------------------------------------------------------------------------------------------- 8. under a 6 GiB limit


WORST = textwrap.dedent("""
    import io, json, resource, sys, tempfile, time, zipfile
    resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))
    tempfile.tempdir = sys.argv[1]
    import torch
    from safetensors.torch import save
    from conftest import small_model
    from viz_model import CheckpointError, load_upload
    model = small_model()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    tok = open(sys.argv[2]).read()
    def native(changes=None, text=None):
        cfg = {**json.loads(model.cfg.to_json()), **(changes or {})}
        return save(state, metadata={"format": "viz-transformer", "config": text or json.dumps(cfg), "tokenizer": tok})
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("config.json", "{}")
        with zf.open("model.safetensors", "w", force_zip64=True) as m:
            for _ in range(80):
                m.write(bytes(2**24))
    cases = {"layers": native({"n_layers": 1_000_000}), "ctx": native({"n_ctx": 10**9}),
             "ctx-in-range": native({"n_ctx": 1_048_576, "d_model": 65_536}),
             "mlp": native({"d_mlp": 10**10}), "types": native({"n_token_types": 10**10}),
             "dropout": native({"dropout": "abc"}), "nested": native(text="[" * 100_000 + "]" * 100_000),
             "digits": native(text='{"n_layers": ' + "7" * 5000 + "}"), "bomb": bomb.getvalue()}
    for name, data in cases.items():
        start = time.perf_counter()
        try:
            load_upload(name + (".zip" if name == "bomb" else ".safetensors"), data, max_mb=4096)
            print(json.dumps([name, "LOADED", 0]))
        except CheckpointError as exc:
            print(json.dumps([name, str(exc), time.perf_counter() - start]))
    print(json.dumps(["peak_kb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, 0]))
""")


def test_worst_cases_under_a_6_gib_address_space_limit(tmp_path, tokenizer, private_tmp):
    tok = tmp_path / "tok.json"
    tok.write_text(tokenizer.to_str())
    proc = subprocess.run([sys.executable, "-c", WORST, str(private_tmp), str(tok)],
                          capture_output=True, text=True, timeout=300, env=child_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    results = {name: (message, seconds) for name, message, seconds in rows}
    assert set(results) == {"layers", "ctx", "ctx-in-range", "mlp", "types", "dropout", "nested", "digits", "bomb",
                            "peak_kb"}
    for name, (message, seconds) in results.items():
        if name == "peak_kb":
            continue
        assert message != "LOADED" and "\n" not in message and len(message) <= MAX_LEN, (name, message)
        assert seconds < 2.0, (name, seconds)
    assert "VIZ_MAX_MODEL_MB" in results["ctx-in-range"][0]
    assert results["peak_kb"][0] < 2 * 2**20  # the peak stayed under 2 GiB: nothing big was ever allocated
    assert_no_leftovers(private_tmp)


MEASURE = textwrap.dedent("""
    import json, resource, sys
    from viz_model import load_model
    from viz_model.limits import estimate_bytes
    import torch, tokenizers, safetensors
    torch.zeros(1) @ torch.zeros(1)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    model, _ = load_model(sys.argv[1])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"growth": peak - base, "estimate": estimate_bytes(model.cfg), "params": 4 * model.n_params()}))
""")


def test_the_estimate_bounds_a_real_load(tmp_path, tokenizer):
    """A 17M-parameter native file (68 MB) loads in a fresh process with less growth than its estimate."""
    cfg = small_config(n_layers=4, d_model=512, n_heads=8, d_head=64, d_mlp=2048, d_vocab=8192, n_ctx=512,
                       positional="learned")
    with torch.device("meta"):
        meta = VizTransformer(cfg)
    model = VizTransformer(cfg) if meta.n_params() < 30_000_000 else None
    path = save_checkpoint(model, tokenizer, tmp_path / "m.safetensors")
    del model
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True,
                          timeout=300, env=child_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["growth"] < out["estimate"], out
    assert out["growth"] < 2.5 * out["params"], out  # no more than the file's mapping, the model and some slack
