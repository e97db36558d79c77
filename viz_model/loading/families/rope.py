"""Rotary settings of a Hugging Face ``config.json``, in either of transformers' spellings: ``rope_parameters``
(transformers 5: ``{"rope_type", "rope_theta", "factor", ...}``) or the older top-level ``rope_theta`` with a
``rope_scaling`` object (``"type"`` or ``"rope_type"``). Mapped to :class:`viz_model.Config` fields: default, linear,
llama3 and, for Phi-3, LongRoPE (``longrope``; older spellings ``su`` and, as transformers' ``Phi3Config`` reads it,
``yarn``). Kinds this project does not compute (dynamic NTK, YaRN, LongRoPE outside Phi-3) are refused with one line.
"""

from __future__ import annotations

import math

from viz_model.config import _show
from viz_model.loading.weights import CheckpointError
from viz_model.loading.families.common import opt_dict, opt_float, opt_int, require_int

SCALINGS = {"default": "none", "linear": "linear", "llama3": "llama3"}
LONGROPE = ("longrope", "su", "yarn")  # transformers' Phi3Config reads su and yarn as longrope
PHI3_ORIGINAL_CTX = 4096  # Phi3Config's default original_max_position_embeddings


def rope_fields(hf: dict, label: str, head_dim: int, default_theta: float = 10000.0,
                partial_key: str = "partial_rotary_factor", default_partial: float = 1.0,
                longrope: bool = False) -> dict:
    """``rotary_base``, ``rotary_dim`` and the scaling fields for :class:`Config` from a ``config.json``.

    ``partial_key``: where an older file keeps the fraction of each head that turns (GPT-NeoX: ``rotary_pct``);
    the rotated width is ``int(head_dim * fraction)``, as transformers computes it. ``longrope``: the family reads
    LongRoPE (Phi-3; see :func:`longrope_fields`).

    The context where llama3's wavelength bands are measured is ``rope_parameters``' (or ``rope_scaling``'s)
    ``original_max_position_embeddings``, else ``max_position_embeddings``: transformers 5.23 reads no top-level
    value for llama3 (it does for Phi-3's LongRoPE).

    Raises:
        CheckpointError: a rotary type other than default, linear and llama3 (and LongRoPE with ``longrope``); a
            field of the wrong type; a scaling without its parameters.
    """
    # transformers 5.23 (PreTrainedConfig.convert_rope_params_to_dict) reads rope_scaling when it is there, else
    # rope_parameters, and the values in that object before the top-level ones
    merged = opt_dict(hf, "rope_scaling", label) or opt_dict(hf, "rope_parameters", label)
    kind = merged.get("rope_type") or merged.get("type") or "default"
    is_longrope = longrope and isinstance(kind, str) and kind in LONGROPE
    if not is_longrope and (not isinstance(kind, str) or kind not in SCALINGS):
        where = " (longrope: Phi-3 only)" if kind in ("longrope", "su") else ""
        supported = "default, linear, llama3" + (", longrope" if longrope else "")
        raise CheckpointError(f"{label}: rotary scaling {_show(kind)} is not supported{where} (supported: {supported})")
    theta = opt_float(merged, "rope_theta", opt_float(hf, "rope_theta", default_theta, label), label)
    partial = opt_float(merged, "partial_rotary_factor", opt_float(hf, partial_key, default_partial, label), label)
    if not 0 < partial <= 1:
        raise CheckpointError(f"{label}: partial_rotary_factor must be in (0, 1], got {_show(partial)}")
    rotary_dim = int(head_dim * partial)
    out = {"rotary_base": theta, "rotary_scaling": "longrope" if is_longrope else SCALINGS[kind],
           "rotary_dim": None if rotary_dim == head_dim else rotary_dim}
    if is_longrope:
        return {**out, **longrope_fields(hf, merged, kind, label)}
    if kind in ("linear", "llama3"):
        out["rotary_factor"] = opt_float(merged, "factor", None, label)
        if out["rotary_factor"] is None:
            raise CheckpointError(f"{label}: rotary scaling {kind} needs a factor")
    if kind == "llama3":
        out["rotary_low_freq_factor"] = opt_float(merged, "low_freq_factor", 1.0, label)
        out["rotary_high_freq_factor"] = opt_float(merged, "high_freq_factor", 4.0, label)
        out["rotary_original_ctx"] = opt_int(merged, "original_max_position_embeddings", None, label) \
            or opt_int(hf, "max_position_embeddings", 8192, label)
    return out


def _number_or_null(rope: dict, key: str, label: str) -> float | None:
    """``rope[key]`` as a float; None when absent or null (transformers then computes it)."""
    return None if rope.get(key) is None else opt_float(rope, key, None, label)


def longrope_fields(hf: dict, rope: dict, kind: str, label: str) -> dict:
    """LongRoPE's :class:`Config` fields from a Phi-3 ``config.json`` and its rotary object ``rope``, as
    transformers 5.23 loads them (``Phi3Config``, ``standardize_rope_params``, ``_compute_longrope_parameters``):

    - ``rotary_short_factor`` / ``rotary_long_factor``: ``short_factor`` / ``long_factor`` (their length and values
      are checked by :meth:`Config.validate`: ``d_rotary / 2`` positive finite numbers);
    - ``rotary_original_ctx`` L, where the short factors end: for ``longrope`` (and ``yarn``) the top-level
      ``original_max_position_embeddings`` (Phi3Config's default 4,096 when absent), which transformers writes over
      the rotary object's own; for the older ``su``, the rotary object's own (transformers 5.23 refuses a ``su``
      object without one; this project then reads the top-level value, as earlier transformers versions did);
    - ``rotary_attn_factor``: ``attention_factor`` when given, else 1 for a scale factor ``s <= 1`` and
      ``sqrt(1 + ln s / ln L)`` above (Ding et al., 2024), with ``s`` = the object's ``factor``, else
      ``max_position_embeddings / L``.

    Raises:
        CheckpointError: a factor list missing or not a list; a context that is not a positive integer; a default
            attention factor that would divide by ``ln 1 = 0``.
    """
    fields = {}
    for key in ("short_factor", "long_factor"):
        value = rope.get(key)
        if not isinstance(value, list):
            raise CheckpointError(f"{label}: rotary scaling longrope needs {key}, a list of numbers, got {_show(value)}")
        fields["rotary_" + key] = value
    top = require_int(hf, "original_max_position_embeddings", label) if "original_max_position_embeddings" in hf \
        else PHI3_ORIGINAL_CTX
    own = require_int(rope, "original_max_position_embeddings", label) if "original_max_position_embeddings" in rope \
        else None
    ctx = (own or top) if kind == "su" else top
    factor = _number_or_null(rope, "factor", label)
    if factor is None:
        factor = require_int(hf, "max_position_embeddings", label) / ctx
    attention = _number_or_null(rope, "attention_factor", label)
    if attention is None and factor > 1 and ctx == 1:
        raise CheckpointError(f"{label}: rotary scaling longrope with original_max_position_embeddings 1 needs an "
                              "attention_factor (the default divides by ln 1 = 0)")
    if attention is None:
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(ctx))
    return {**fields, "rotary_original_ctx": ctx, "rotary_attn_factor": attention}
