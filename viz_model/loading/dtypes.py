"""Which dtype and device a loaded model computes in: the ``dtype`` and ``device`` arguments of
:func:`viz_model.load_model`, checked and resolved here.

- ``dtype``: ``"float32"`` (the default: every number exactly as a float32 reference computes it), ``"auto"``
  (the checkpoint's own floating dtype, as ``transformers``' ``dtype="auto"``: a bfloat16 file stays bfloat16 and
  costs half the memory), or one of ``"bfloat16"``, ``"float16"`` (also ``torch.bfloat16`` ... and the short
  spellings ``bf16``, ``fp16``, ``fp32``). Whatever the dtype, norm weights stay float32, norms are computed in
  float32, and attention scores and patterns are computed in float32 from the model's own q and k
  (:func:`viz_model.components.masked_scores`), so what the attention views show is not rounded twice.
- ``device``: ``"cpu"``, ``"cuda"`` (``"cuda:1"``), or ``"auto"``: CUDA when torch sees a GPU, else the CPU.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ALIASES = {"fp32": "float32", "f32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16",
           "f16": "float16", "half": "float16"}
# safetensors' dtype names of floating tensors -> torch (float64 files are read as float32 under "auto": a float64
# transformer is a test artefact, and this project's attention and norms compute in float32)
SAFETENSORS_FLOATS = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float32}


class DtypeError(ValueError):
    """A ``dtype`` or ``device`` that cannot be used; the message is one line."""


def parse_dtype(value: object) -> torch.dtype | str:
    """``value`` as a torch dtype of :data:`DTYPES`, or the string ``"auto"``; None means float32.

    Raises:
        DtypeError: for anything else (``"int8"``, ``torch.float64``, a number).
    """
    if value is None:
        return torch.float32
    if isinstance(value, torch.dtype):
        if value in DTYPES.values():
            return value
        raise DtypeError(f"dtype {value} is not supported (use float32, bfloat16, float16 or auto)")
    if isinstance(value, str):
        name = value.strip().lower().removeprefix("torch.")
        if name == "auto":
            return "auto"
        name = ALIASES.get(name, name)
        if name in DTYPES:
            return DTYPES[name]
    raise DtypeError(f"dtype {str(value)[:40]!r} is not supported (use float32, bfloat16, float16 or auto)")


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def auto_dtype(sizes: Iterable[tuple[torch.dtype, int]]) -> torch.dtype:
    """The dtype ``"auto"`` gives for a checkpoint whose floating tensors have these ``(dtype, bytes)``: the one
    holding the most bytes (a bfloat16 model with a few float32 buffers is bfloat16), float32 for float64 or an
    empty list."""
    totals: dict[torch.dtype, int] = {}
    for dtype, nbytes in sizes:
        dtype = torch.float32 if dtype == torch.float64 else dtype
        if dtype in DTYPES.values():
            totals[dtype] = totals.get(dtype, 0) + int(nbytes)
    return max(totals, key=totals.get) if totals else torch.float32


def tensors_dtype(tensors: Iterable[object]) -> torch.dtype:
    """:func:`auto_dtype` of loaded tensors (anything that is not a floating tensor is skipped)."""
    return auto_dtype((t.dtype, t.numel() * t.element_size()) for t in tensors
                      if isinstance(t, torch.Tensor) and t.is_floating_point())


def safetensors_sizes(path: str) -> list[tuple[torch.dtype, int]]:
    """``(dtype, bytes)`` of every floating tensor of a safetensors file, from its header alone (nothing is read).

    Raises:
        whatever ``safetensors.safe_open`` raises for a file that is not safetensors (callers turn it into one line).
    """
    from safetensors import safe_open
    sizes = []
    with safe_open(str(path), framework="pt") as f:
        for key in f.keys():
            part = f.get_slice(key)
            name = part.get_dtype()
            if name in SAFETENSORS_FLOATS:
                itemsize = {"F64": 8, "F32": 4}.get(name, 2)
                sizes.append((SAFETENSORS_FLOATS[name], math.prod(int(d) for d in part.get_shape()) * itemsize))
    return sizes


def resolve_device(value: object = None) -> torch.device:
    """The device a model is put on: ``value`` (``"cpu"``, ``"cuda"``, ``"cuda:0"``, a ``torch.device``), or with
    None / ``"auto"`` the environment variable ``VIZ_DEVICE``, or else CUDA when ``torch.cuda.is_available()``
    and the CPU otherwise.

    Raises:
        DtypeError: an unknown device name, or CUDA asked for on a machine without a usable GPU.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        value = os.environ.get("VIZ_DEVICE", "").strip() or "auto"
        if value.lower() == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = value if isinstance(value, torch.device) else torch.device(str(value).strip().lower())
    except (RuntimeError, ValueError, TypeError):
        raise DtypeError(f"device {str(value)[:40]!r} is not known (use cpu, cuda or auto)") from None
    if device.type not in ("cpu", "cuda"):
        raise DtypeError(f"device {device} is not supported (use cpu, cuda or auto)")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DtypeError("device cuda was asked for, but torch sees no CUDA GPU on this machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DtypeError(f"device {device} was asked for, but this machine has {torch.cuda.device_count()} GPU(s)")
    return device
