"""Rotary settings of a Hugging Face ``config.json``, in either of transformers' spellings: ``rope_parameters``
(transformers 5: ``{"rope_type", "rope_theta", "factor", ...}``) or the older top-level ``rope_theta`` with a
``rope_scaling`` object (``"type"`` or ``"rope_type"``). Mapped to :class:`viz_model.Config` fields; kinds this
project does not compute (dynamic NTK, YaRN, LongRoPE) are refused with one line.
"""

from __future__ import annotations

from ..config import _show
from ..weights import CheckpointError
from .common import opt_dict, opt_float, opt_int

SCALINGS = {"default": "none", "linear": "linear", "llama3": "llama3"}


def rope_fields(hf: dict, label: str, head_dim: int, default_theta: float = 10000.0,
                partial_key: str = "partial_rotary_factor", default_partial: float = 1.0) -> dict:
    """``rotary_base``, ``rotary_dim`` and the scaling fields for :class:`Config` from a ``config.json``.

    ``partial_key``: where an older file keeps the fraction of each head that turns (GPT-NeoX: ``rotary_pct``);
    the rotated width is ``int(head_dim * fraction)``, as transformers computes it.

    Raises:
        CheckpointError: a rotary type other than default, linear and llama3; a field of the wrong type.
    """
    params = opt_dict(hf, "rope_parameters", label)
    scaling = opt_dict(hf, "rope_scaling", label)
    merged = {**scaling, **params}
    kind = merged.get("rope_type") or merged.get("type") or "default"
    if not isinstance(kind, str) or kind not in SCALINGS:
        raise CheckpointError(f"{label}: rotary scaling {_show(kind)} is not supported (supported: default, linear, llama3)")
    theta = opt_float(params, "rope_theta", opt_float(hf, "rope_theta", default_theta, label), label)
    partial = opt_float(merged, "partial_rotary_factor", opt_float(hf, partial_key, default_partial, label), label)
    if not 0 < partial <= 1:
        raise CheckpointError(f"{label}: partial_rotary_factor must be in (0, 1], got {_show(partial)}")
    rotary_dim = int(head_dim * partial)
    out = {"rotary_base": theta, "rotary_scaling": SCALINGS[kind],
           "rotary_dim": None if rotary_dim == head_dim else rotary_dim}
    if kind in ("linear", "llama3"):
        out["rotary_factor"] = opt_float(merged, "factor", None, label)
        if out["rotary_factor"] is None:
            raise CheckpointError(f"{label}: rotary scaling {kind} needs a factor")
    if kind == "llama3":
        out["rotary_low_freq_factor"] = opt_float(merged, "low_freq_factor", 1.0, label)
        out["rotary_high_freq_factor"] = opt_float(merged, "high_freq_factor", 4.0, label)
        ctx = opt_int(merged, "original_max_position_embeddings", None, label)
        out["rotary_original_ctx"] = ctx or opt_int(hf, "original_max_position_embeddings", None, label) \
            or opt_int(hf, "max_position_embeddings", 8192, label)
    return out
