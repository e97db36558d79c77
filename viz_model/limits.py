"""What an untrusted config may ask for: the range of every field, and the memory a model costs, computed
from the config alone so that a hostile file is refused before any tensor is allocated.

The app is one shared server for a class; an upload is a stranger's file. A 30 KB config that claims a
million layers or a context of 10^9 positions must give one line, not an out-of-memory kill. Ranges
(:data:`INT_RANGES`, :data:`FLOAT_RANGES`) bound each field; :func:`estimate_bytes` bounds the whole, and
:func:`check_budget` refuses a model whose estimate is above the limit that fits who chose the model
(:func:`memory_limit`): an upload, the server's cap ``VIZ_MAX_MODEL_MB`` (default 4,096 MB); a model named by
whoever runs the server (``load_model``, ``--model``), the memory this machine really has free, less a margin.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os

import psutil


# Integer fields: (smallest, largest). Real models sit far inside: GPT-2 XL 48 layers / d_model 1,600,
# Llama-3-70B 80 layers / d_model 8,192 / 64 heads / vocab 128,256, Qwen2 vocab 151,936, Llama 3.1 context 131,072.
INT_RANGES = {
    "n_layers": (1, 512),
    "d_model": (1, 65_536),
    "n_heads": (1, 1_024),
    "n_kv_heads": (1, 1_024),
    "d_head": (1, 16_384),
    "d_mlp": (1, 262_144),
    "d_vocab": (1, 1_048_576),
    "n_ctx": (1, 1_048_576),
    "n_token_types": (0, 1_024),
    "n_encoder_layers": (0, 512),
    "decoder_start_id": (0, 1_048_575),
    "decoder_end_id": (0, 1_048_575),
    "attn_window": (1, 1_048_576),  # or null (no window)
    "n_experts": (0, 1_024),  # 0 = dense; Mixtral 8, Qwen1.5-MoE 60, OLMoE 64, DeepSeek-V3 256
    "experts_per_token": (1, 1_024),  # at most n_experts; Mixtral 2, OLMoE 8
    "d_shared_mlp": (0, 262_144),  # Qwen1.5-MoE's shared expert: 5,632
    "d_dense_mlp": (1, 262_144),  # or null (d_mlp); Qwen2-MoE's dense layers (intermediate_size): 5,632
    "rotary_dim": (2, 16_384),  # or null (every dimension of a head turns); even and at most d_head
    "rotary_original_ctx": (1, 1_048_576),  # Llama 3.1's 8,192
    "rel_pos_buckets": (0, 1_024),  # T5: 32
    "rel_pos_max_distance": (1, 1_048_576),  # T5: 128
    "position_pad_id": (0, 1_048_575),  # or null; RoBERTa: 1 (a token id, below d_vocab)
}
# Fields that may also be null (JSON null = Python None: the mechanism is off).
OPTIONAL_FIELDS = ("attn_window", "rotary_dim", "rotary_base_local", "attn_scale", "attn_softcap", "logit_softcap",
                   "clip_qkv", "d_dense_mlp", "position_pad_id")
# Float fields (an int is accepted; bool, strings, NaN and infinities are not): (low, high, low inclusive?, high inclusive?)
FLOAT_RANGES = {
    "layer_norm_eps": (0.0, 1.0, False, False),  # BERT 1e-12, GPT-2 1e-5, Llama 1e-6 / 1e-5
    "dropout": (0.0, 1.0, True, False),
    "rotary_base": (1.0, 1e12, False, True),  # 10,000 (Llama 2), 500,000 (Llama 3), 1,000,000 (Qwen2)
    "embed_scale": (0.0, 1e4, False, True),  # 1, or sqrt(d_model) <= 256
    "rotary_factor": (0.0, 1e4, False, True),  # Llama 3.1: 8, Llama 3.2: 32
    "rotary_low_freq_factor": (0.0, 1e4, False, True),  # Llama 3.1: 1
    "rotary_high_freq_factor": (0.0, 1e4, False, True),  # Llama 3.1: 4 (must exceed the low one)
    "rotary_base_local": (1.0, 1e12, False, True),  # or null; Gemma 3's sliding layers: 10,000
    "attn_scale": (0.0, 1e6, False, True),  # or null (sqrt(d_head)); Gemma 2: sqrt(256) = 16, T5: 1
    "attn_softcap": (0.0, 1e6, False, True),  # or null; Gemma 2: 50
    "logit_softcap": (0.0, 1e6, False, True),  # or null; Gemma 2: 30
    "rotary_attn_factor": (0.0, 1e4, False, True),  # LongRoPE: Phi-3-mini-128k sqrt(1 + ln 32 / ln 4096) = 1.19
    "clip_qkv": (0.0, 1e6, False, True),  # or null; OLMo 1 and OLMoE options (8 in some OLMo runs)
}
# Lists of floats, LongRoPE's per-pair divisors of theta_i (or null): the range of every entry, as FLOAT_RANGES; the
# length must be d_rotary / 2 (at most 8,192), checked in Config.validate. Phi-3-mini-128k: 1 to about 60.
FLOAT_LIST_RANGES = {
    "rotary_short_factor": (0.0, 1e6, False, True),
    "rotary_long_factor": (0.0, 1e6, False, True),
}
BOOL_FIELDS = ("causal", "tied_embeddings", "final_norm", "attn_bias", "mlp_bias", "embed_norm", "unembed_bias",
               "parallel_residual", "norm_topk_prob")
FAMILY_PATTERN = r"[A-Za-z0-9_.-]{1,40}"  # a short plain identifier: shown as text in the UI, never markup
MAX_EXTRA_CHARS = 4_096  # ``extra`` (free-form notes) as compact JSON
MAX_EXTRA_DEPTH = 8
MAX_CONFIG_CHARS = 2**20  # a config's JSON text (real ones are under 2 KB)

BYTES = 4  # float32, the default dtype of a model (see element_size: bfloat16 and float16 models take 2)
ESTIMATE_TOKENS = 1_024  # the longest text the estimate budgets the forward pass for (GPT-2's context)
DEFAULT_MAX_MODEL_MB = 4_096  # see max_model_bytes
DEFAULT_MEMORY_MARGIN_MB = 1_024  # see memory_margin_bytes


def env_mb(name: str, default: float, allow_zero: bool = False) -> int:
    """``$name`` in megabytes as bytes; an unreadable, infinite or negative value (or 0 unless ``allow_zero``)
    gives ``default``."""
    try:
        mb = float(os.environ.get(name, default))
    except ValueError:
        mb = default
    if not math.isfinite(mb) or mb < 0 or (mb == 0 and not allow_zero):
        mb = default
    return int(mb * 2**20)


def max_model_bytes() -> int:
    """The upload cap on :func:`estimate_bytes`, in bytes: the environment variable ``VIZ_MAX_MODEL_MB`` (megabytes,
    read on every call; an unreadable or non-positive value falls back to the default) or 4,096 MB. It limits what a
    stranger's file may cost a shared server (uploads, uploaded timelines, the *Train your own* page); a model named
    by whoever runs the server is limited by :func:`free_memory_bytes` instead (see :func:`memory_limit`).

    Why 4,096: a class server (24 GiB) gives each load about 6 GiB; Python, torch and tokenizers take about
    0.5 GiB before a model exists, so an estimate of 4 GiB leaves 1.5 GiB of headroom, and the largest model
    docs/memory.md promises (Qwen2-0.5B: 3,867 MB estimated) still loads.
    """
    return env_mb("VIZ_MAX_MODEL_MB", DEFAULT_MAX_MODEL_MB)


def memory_margin_bytes() -> int:
    """Memory left free when a server-chosen model is checked against :func:`free_memory_bytes`, in bytes:
    ``VIZ_MEMORY_MARGIN_MB`` (megabytes, 0 allowed; unreadable or negative: the default) or 1,024 MB, room for the
    app's traces and Streamlit."""
    return env_mb("VIZ_MEMORY_MARGIN_MB", DEFAULT_MEMORY_MARGIN_MB, allow_zero=True)


def free_memory_bytes() -> int:
    """The memory this machine can give a new model now, in bytes: ``psutil.virtual_memory().available`` (Linux's
    MemAvailable: free memory plus the page cache and other memory the kernel can reclaim without swapping)."""
    return int(psutil.virtual_memory().available)


_LIMIT: contextvars.ContextVar[str] = contextvars.ContextVar("viz_memory_limit", default="cap")
LIMITS = ("cap", "free")


@contextlib.contextmanager
def memory_limit_of(kind: str):
    """Within this block, :func:`check_budget` compares estimates with ``kind``'s limit: ``"cap"`` (the default: the
    upload cap :func:`max_model_bytes`) or ``"free"`` (a model named by whoever runs the server: the memory really
    free, :func:`free_memory_bytes`, less :func:`memory_margin_bytes`). :func:`viz_model.load_model` sets
    ``"free"``; uploads keep the cap.

    Raises:
        ValueError: an unknown kind.
    """
    if kind not in LIMITS:
        raise ValueError(f"unknown memory limit {kind!r} (one of: {', '.join(LIMITS)})")
    token = _LIMIT.set(kind)
    try:
        yield
    finally:
        _LIMIT.reset(token)


ATTN_BUDGET_MB = 512  # default of VIZ_ATTN_BUDGET_MB: attention working set per layer (see attn_budget_bytes)
ATTN_COPIES = 2  # [head, query, key] tensors alive at once: the scores and their softmax (the pattern)


def attn_budget_bytes() -> int:
    """The memory one attention layer may use for its ``[batch, head, query_pos, key_pos]`` tensors, in bytes:
    the environment variable ``VIZ_ATTN_BUDGET_MB`` (megabytes, read on every call) or 512 MB. Above it the
    forward pass works in blocks (:func:`viz_model.components.chunked_attention`), and the app cuts a text to
    :func:`max_tokens_for_budget` tokens, since the views read whole patterns."""
    try:
        mb = float(os.environ.get("VIZ_ATTN_BUDGET_MB", ATTN_BUDGET_MB))
    except ValueError:
        mb = ATTN_BUDGET_MB
    if not math.isfinite(mb):  # "nan", "inf": the default
        mb = ATTN_BUDGET_MB
    return max(1, int(mb * 2**20))


def attention_bytes(n_heads: int, n_q: int, n_k: int, element_size: int = 4, copies: int = ATTN_COPIES) -> int:
    """Bytes of the attention working set: ``copies`` tensors of ``n_heads × n_q × n_k`` values (scores and
    pattern: 2 × n_heads · n_q · n_k · 4 bytes in float32)."""
    return copies * n_heads * n_q * n_k * element_size


def max_tokens_for_budget(n_heads: int, budget: int | None = None, element_size: int = 4) -> int:
    """The longest sequence whose whole attention (scores and pattern of every head, ``[n_heads, n, n]`` each)
    fits the budget: the largest ``n`` with ``2 · n_heads · n² · element_size <= budget`` (at least 1).
    512 MB in float32: 12 heads -> 2,364 tokens, 32 heads -> 1,448, 512 heads -> 362."""
    budget = attn_budget_bytes() if budget is None else budget
    n = max(1, math.isqrt(budget // max(1, ATTN_COPIES * n_heads * element_size)))
    while n > 1 and attention_bytes(n_heads, n, n, element_size) > budget:
        n -= 1
    return n


def memory_limit() -> tuple[str, int]:
    """``(kind, bytes)``: the limit in force (see :func:`memory_limit_of`); for ``"free"`` the bytes are free memory
    less the margin, read now (at least 0)."""
    kind = _LIMIT.get()
    if kind == "free":
        return kind, max(0, free_memory_bytes() - memory_margin_bytes())
    return kind, max_model_bytes()


_ELEMENT_SIZE: contextvars.ContextVar[int] = contextvars.ContextVar("viz_element_size", default=BYTES)


@contextlib.contextmanager
def model_element_size(nbytes: int):
    """Within this block, estimates (:func:`estimate_bytes`, :func:`check_budget`) that are not given an element size
    use ``nbytes`` per weight: the dtype of the model being loaded (2 for bfloat16), so that the checks a family
    converter runs on its own agree with the loader's."""
    token = _ELEMENT_SIZE.set(int(nbytes))
    try:
        yield
    finally:
        _ELEMENT_SIZE.reset(token)


def current_element_size() -> int:
    """Bytes per weight assumed by estimates now: 4 (float32) unless inside :func:`model_element_size`."""
    return _ELEMENT_SIZE.get()


def _norm_params(cfg: "Config") -> int:
    return 2 * cfg.d_model if cfg.norm == "layernorm" else cfg.d_model


def _qk_norm_params(cfg: "Config") -> int:
    """Weights of the q and k norms: one d_head vector each ("head") or one per head's worth ("all")."""
    return {"none": 0, "head": 2 * cfg.d_head, "all": (cfg.n_heads + cfg.n_kv_heads) * cfg.d_head}[cfg.qk_norm]


def _attention_params(cfg: "Config") -> int:
    d, h, g, k = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    weights = 2 * h * d * k + 2 * g * d * k  # W_Q, W_O [h, d, k]; W_K, W_V [g, d, k]
    return weights + ((h + 2 * g) * k + d if cfg.attn_bias else 0)


def _moe_params(cfg: "Config", per_expert: int) -> int:
    """A mixture of experts' parameters: ``n_experts`` MLPs of ``per_expert`` parameters each, the router
    ``W_router [d_model, n_experts]`` and Qwen2-MoE's shared expert, an MLP of width ``d_shared_mlp`` (an MLP has
    ``per unit × width + b_out`` parameters) with its gate ``W_shared_gate [d_model, 1]``."""
    d, m, s = cfg.d_model, cfg.d_mlp, cfg.d_shared_mlp
    b_out = d if cfg.mlp_bias else 0
    shared = (per_expert - b_out) // m * s + b_out + d if s else 0
    return cfg.n_experts * (per_expert + d) + shared


def _block_params(cfg: "Config", cross: bool) -> int:
    d, m = cfg.d_model, cfg.d_mlp
    gated = cfg.mlp in ("swiglu", "geglu")
    mlp = (3 if gated else 2) * d * m + (((2 if gated else 1) * m + d) if cfg.mlp_bias else 0)
    if cfg.n_experts:  # a mixture of experts (viz_model/feed_forward.py) in place of the MLP
        mlp = _moe_params(cfg, mlp)
    # norms per sub-layer: on its input (pre, post: one), on its output too (sandwich), on its output only (output)
    per_sublayer = (2 if cfg.norm_placement == "sandwich" else 1) * _norm_params(cfg)
    attn = _attention_params(cfg) + _qk_norm_params(cfg) + per_sublayer
    return attn * (2 if cross else 1) + per_sublayer + mlp


def count_params(cfg: "Config") -> int:
    """The exact number of parameters :class:`viz_model.VizTransformer` allocates for ``cfg`` (equal to
    ``VizTransformer(cfg).n_params()``), computed without allocating anything."""
    d, v = cfg.d_model, cfg.d_vocab
    pos = cfg.n_ctx * d if cfg.positional == "learned" else 0
    total = v * d + pos + cfg.n_token_types * d + (2 * d if cfg.embed_norm else 0)
    total += d if cfg.position_pad_id is not None else 0  # RoBERTa's padding row W_pos_pad
    dense = len(cfg.dense_layers) if cfg.n_experts and cfg.dense_layers else 0  # Qwen2-MoE's dense layers
    total += (cfg.n_layers - dense) * _block_params(cfg, cross=cfg.n_encoder_layers > 0)
    total += dense * _block_params(cfg.for_layer(cfg.dense_layers[0]), cross=False) if dense else 0
    final = _norm_params(cfg) if cfg.final_norm else 0
    total += final
    if cfg.n_encoder_layers:
        total += pos + (2 * d if cfg.embed_norm else 0) + cfg.n_encoder_layers * _block_params(cfg, False) + final
    total += cfg.rel_pos_buckets * cfg.n_heads * (2 if cfg.n_encoder_layers else 1)  # T5: one bias table per stack
    if cfg.lm_head != "none":
        if cfg.lm_head == "mlm":
            total += d * d + d + 2 * d
        if not cfg.tied_embeddings:
            total += d * v
        if cfg.unembed_bias:
            total += v
    return total


def estimate_parts(cfg: "Config", element_size: int | None = None) -> dict[str, int]:
    """The terms of :func:`estimate_bytes`, in bytes (see there for the formula)."""
    d, h, g, k, m, v = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.d_mlp, cfg.d_vocab
    e = current_element_size() if element_size is None else int(element_size)
    n_layers = cfg.n_layers + cfg.n_encoder_layers
    params = e * count_params(cfg)
    fused = e * n_layers * (h + 2 * g) * k * (d + 1)  # inference keeps [W_Q | W_K | W_V] fused per layer
    tables = 2 if cfg.n_encoder_layers else 1
    sinusoid = cfg.positional == "sinusoidal"
    pos_kept = BYTES * tables * cfg.n_ctx * d if sinusoid else 0
    pos_build = 16 * cfg.n_ctx * d if sinusoid else 0  # float64 table + sin/cos temporaries while it is built
    # while loading, weights move into the model one at a time (their own bytes are `params`): at most one converted
    # matrix in flight at float32 (a transpose made contiguous, T5's rescaled tied head, OPT's folded projections), and
    # the float64 sinusoid being built; a file larger than the model's weights adds its excess in check_budget
    load = BYTES * max(v * d, (h + 2 * g) * k * d, m * d) + pos_build
    t = min(cfg.n_ctx, ESTIMATE_TOKENS)
    attention = min(2 * BYTES * h * t * t, attn_budget_bytes()) + t * t  # scores + pattern of one layer, and the mask
    attention += (BYTES + 8) * h * t * t if cfg.rel_pos_buckets else 0  # T5: the bias and its int64 buckets
    # a mixture of experts: its k experts' intermediates per token, every expert's units side by side (hook_post), the
    # shared expert's
    ffn = 3 * m if not cfg.n_experts else (3 * cfg.experts_per_token + cfg.n_experts) * m + 3 * cfg.d_shared_mlp
    ffn = max(ffn, 3 * (cfg.d_dense_mlp or m)) if cfg.n_experts and cfg.dense_layers else ffn  # the widest layer's
    stream = BYTES * t * (4 * d + 2 * (h + 2 * g) * k + ffn)  # residual stream and one block's intermediates (float32
    # at most: a bfloat16 model's are smaller, its norms' float32 copies are among the 4 d)
    logits = 2 * BYTES * t * v  # logits and their softmax
    return {"params": params, "fused_qkv": fused, "positions": pos_kept, "load": load,
            "run": attention + stream + logits}


def estimate_bytes(cfg: "Config", element_size: int | None = None) -> int:
    """Peak memory, in bytes, of loading ``cfg``'s model and running it on :data:`ESTIMATE_TOKENS` tokens
    (at most ``n_ctx``), computed from the config alone (nothing is allocated). Float32 (4 bytes) throughout::

        resident = 4 P                       parameters (P = count_params(cfg), exactly what the model allocates)
                 + 4 L (h + 2 g) k (d + 1)   fused [W_Q|W_K|W_V] kept for inference, L = decoder + encoder layers
                 + 4 n_ctx d  (x2 with an encoder)   sinusoidal tables (0 for learned, rotary, none)
        load     = 4 max(V d, (h + 2 g) k d, m d) + 16 n_ctx d
                   the loader moves the file's tensors into the model one by one (a tensor already in the model's
                   dtype is used as it is, a converted one becomes the model's own and its source is released), so
                   beyond the parameters only one converted matrix is in flight (float32 at most), and the float64
                   sinusoid while it is built
        run      = min(2 · 4 h T², attention budget) + T²   scores and pattern of one layer (blocked above
                                                             VIZ_ATTN_BUDGET_MB), and the mask
                 + 4 T (4 d + 2 (h + 2 g) k + 3 m)         residual stream and one block's intermediates (with
                                                             E experts, k_e per token and a shared expert of
                                                             width s, 3 m is (3 k_e + E) m + 3 s, or 3 m_dense
                                                             if dense layers among them are wider)
                 + 2 · 4 T V                               logits and probabilities
        estimate = resident + max(load, run),   T = min(n_ctx, 1024)

    with d = d_model, h = n_heads, g = n_kv_heads, k = d_head, m = d_mlp, V = d_vocab. ``resident`` is what stays
    in memory once the model is loaded and has run (the probe run builds the fused matrices); ``tests/test_hostile.py``
    compares it with the resident size measured in a fresh process. Examples (float32): GPT-2 small 0.9 GB, Qwen2-0.5B
    3.4 GB, a Llama-3.2-1B shape 6.5 GB (5.0 GB of it resident), the shipped model 40 MB. Assumes ``cfg`` passed
    :meth:`Config.validate` (types and ranges).

    A bfloat16 or float16 model (``element_size`` 2; None: :func:`current_element_size`) counts 2 bytes instead of 4 for the
    parameters, the fused matrices and the load; activations, scores and logits keep the float32 figures above.
    """
    parts = estimate_parts(cfg, element_size)
    resident = parts["params"] + parts["fused_qkv"] + parts["positions"]
    return resident + max(parts["load"], parts["run"])


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f}" if n >= 10 * 2**20 else f"{n / 2**20:.2g}"


class BudgetError(ValueError):
    """A model whose estimated memory is above the cap (a :class:`viz_model.ConfigError` subclass is not used
    here to keep this module free of imports; callers turn it into their own one-line error)."""


def check_budget(cfg: "Config", file_bytes: int = 0, element_size: int | None = None) -> int:
    """Return :func:`estimate_bytes` (plus any part of ``file_bytes`` beyond the model's own copy of the weights,
    e.g. a float64 file, or a float32 file loaded as bfloat16) when it is within the limit in force
    (:func:`memory_limit`: the upload cap, or the memory free for a model named by whoever runs the server).
    ``element_size``: bytes per weight of the model (None: :func:`current_element_size`).

    Raises:
        BudgetError: one line with the estimate and the limit in MB: for an upload the cap and its setting; for a
            server-chosen model (:func:`memory_limit_of` ``"free"``) the memory free, the margin, and how to load it
            anyway (bfloat16, offloading blocks to disk).
    """
    e = current_element_size() if element_size is None else int(element_size)
    estimate = estimate_bytes(cfg, e) + max(0, int(file_bytes) - e * count_params(cfg))
    kind, limit = memory_limit()
    if estimate <= limit:
        return estimate
    need = f"the model would need about {_mb(estimate)} MB of memory ({count_params(cfg):,} parameters"
    if kind == "cap":
        raise BudgetError(f"{need}), above this server's {_mb(limit)} MB cap for models from users (VIZ_MAX_MODEL_MB)")
    bf16 = f", use bfloat16 (dtype='auto': about {_mb(estimate_bytes(cfg, 2))} MB)" if e > 2 else ""
    raise BudgetError(f"{need} in {8 * e}-bit floats); {_mb(limit)} MB is free after a {_mb(memory_margin_bytes())} MB "
                      f"margin (VIZ_MEMORY_MARGIN_MB). To load it: free memory{bf16} or put blocks on disk "
                      "(device_map, max_memory, offload_folder)")


def check_resident_budget(cfg: "Config", resident_param_bytes: int, element_size: int | None = None) -> int:
    """:func:`check_budget` for a model placed by a device map (:mod:`viz_model.placement`) whose weights are partly on
    disk or a GPU: only ``resident_param_bytes`` of its parameters stay in this machine's memory (those on the CPU
    and the largest offloaded block, loaded while it runs). The estimate is :func:`estimate_bytes`' with the
    parameters replaced by ``resident_param_bytes`` and the fused matrices and the load scaled by the same share
    ``s = resident_param_bytes / params``; the activations (``run``) are counted whole::

        estimate = resident_param_bytes + s · fused_qkv + positions + max(load, run)

    compared with the limit in force (:func:`memory_limit`). Returns the estimate in bytes.

    Raises:
        BudgetError: one line with the estimate, the weights kept in memory and the limit in MB.
    """
    parts = estimate_parts(cfg, element_size)
    resident = max(0, int(resident_param_bytes))
    share = min(1.0, resident / max(1, parts["params"]))
    estimate = int(resident + share * parts["fused_qkv"] + parts["positions"] + max(parts["load"], parts["run"]))
    kind, limit = memory_limit()
    if estimate > limit:
        where = (f"this server's {_mb(limit)} MB cap for models from users (VIZ_MAX_MODEL_MB)" if kind == "cap" else
                 f"the {_mb(limit)} MB free after a {_mb(memory_margin_bytes())} MB margin (VIZ_MEMORY_MARGIN_MB)")
        raise BudgetError(f"the model would need about {_mb(estimate)} MB of this machine's memory with its device map "
                          f"({_mb(resident)} MB of weights kept in memory), above {where}: lower max_memory")
    return estimate
