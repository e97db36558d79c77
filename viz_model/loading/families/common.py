"""Helpers shared by the family converters: fetching weights with shape checks and reshaping
Hugging Face ``nn.Linear`` matrices into per-head tensors."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import _finite, _is_int, _show
from viz_model.loading.weights import CheckpointError

FLOAT8 = {getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
          if hasattr(torch, n)}
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}


class Weights:
    """A source state dict with a key prefix stripped, read with shape checks.

    ``get(name, shape)`` returns the tensor or raises :class:`CheckpointError` naming the key. The tensor keeps
    the file's dtype and may be a view of the memory-mapped file: converters reshape and transpose with views
    (no copy), and :func:`viz_model.loading.weights.build_model` casts each weight to the model's dtype one at a time (a
    weight already in that dtype stays a view of the file), so a load never holds two copies of the weights.
    A converter that does arithmetic on a weight does it in float32 (``.float()``), whatever the file's dtype.
    """

    def __init__(self, state: Mapping[str, torch.Tensor], label: str, prefixes: tuple[str, ...] = ()) -> None:
        self.label = label
        self.state = {}
        for key, value in state.items():
            if not isinstance(key, str):  # a hostile pickle's keys; such an entry is simply not a weight
                continue
            for prefix in prefixes:
                if key.startswith(prefix):
                    key = key[len(prefix):]
                    break
            self.state[key] = value

    def has(self, name: str) -> bool:
        return name in self.state

    def get(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in self.state:
            raise CheckpointError(f"{self.label}: weight {name} is missing")
        tensor = self.state[name]
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"{self.label}: {name} is not a tensor")
        if not tensor.is_floating_point() or tensor.dtype in FLOAT8:
            raise CheckpointError(f"{self.label}: {name} is stored as {tensor.dtype} (quantized weights are not supported)")
        if tuple(tensor.shape) != tuple(shape):
            raise CheckpointError(f"{self.label}: {name} has shape {tuple(tensor.shape)}, the config needs {tuple(shape)}")
        return tensor  # in the file's dtype, possibly a view of the memory-mapped file: build_model casts and copies


def activation(name, label: str) -> str:
    """This project's MLP kind for a transformers activation name.

    Raises:
        CheckpointError: for a name that is not one of :data:`ACTIVATIONS` (or not a string).
    """
    if not isinstance(name, str) or name not in ACTIVATIONS:
        raise CheckpointError(f"{label}: activation {_show(name)} is not supported (supported: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


def heads_in(w_in_out: torch.Tensor, n_heads: int, d_head: int) -> torch.Tensor:
    """``[d_model, n_heads * d_head]`` (input-major, as x @ W) -> ``[n_heads, d_model, d_head]``."""
    d_model = w_in_out.shape[0]
    return w_in_out.reshape(d_model, n_heads, d_head).permute(1, 0, 2)  # a view: build_model lays it out


def heads_out(w_in_out: torch.Tensor, n_heads: int, d_head: int) -> torch.Tensor:
    """``[n_heads * d_head, d_model]`` (input-major) -> ``W_O [n_heads, d_head, d_model]``."""
    return w_in_out.reshape(n_heads, d_head, -1)  # a view where possible: build_model lays it out


def require_int(cfg: Mapping, key: str, label: str) -> int:
    """``cfg[key]`` as a positive int (a JSON integer, not ``true``), or a one-line error naming the key."""
    value = cfg.get(key)
    if not _is_int(value) or value <= 0:
        raise CheckpointError(f"{label}: config field {key} must be a positive integer, got {_show(value)}")
    return value


def opt_int(cfg: Mapping, key: str, default, label: str):
    """``cfg[key]`` as an int (a JSON integer, not ``true``), ``default`` when absent or null.

    Raises:
        CheckpointError: for any other value (``"12"``, ``1.5``, ``true``), naming the key.
    """
    value = cfg.get(key)
    if value is None:
        return default
    if not _is_int(value):
        raise CheckpointError(f"{label}: config field {key} has an unexpected value (it must be an integer), got {_show(value)}")
    return value


def opt_float(cfg: Mapping, key: str, default: float, label: str) -> float:
    """``cfg[key]`` as a finite float (a JSON number), ``default`` when absent.

    Raises:
        CheckpointError: for null, a string, a boolean, NaN or an infinity, naming the key.
    """
    if key not in cfg:
        return default
    value = cfg[key]
    if not _finite(value):
        raise CheckpointError(f"{label}: config field {key} has an unexpected value (it must be a finite number), got {_show(value)}")
    return float(value)


def opt_bool(cfg: Mapping, key: str, default: bool, label: str) -> bool:
    """``cfg[key]`` as a JSON boolean, ``default`` when absent or null (``"no"`` and ``0`` are refused, not
    read as false or true).

    Raises:
        CheckpointError: for any other value, naming the key.
    """
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise CheckpointError(f"{label}: config field {key} has an unexpected value (it must be true or false), got {_show(value)}")
    return value


def opt_str(cfg: Mapping, key: str, default: str, label: str) -> str:
    """``cfg[key]`` as a string, ``default`` when absent or null.

    Raises:
        CheckpointError: for any other value, naming the key.
    """
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise CheckpointError(f"{label}: config field {key} has an unexpected value (it must be a string), got {_show(value)}")
    return value


def opt_dict(cfg: Mapping, key: str, label: str) -> dict:
    """``cfg[key]`` as a JSON object, ``{}`` when absent or null.

    Raises:
        CheckpointError: for any other value, naming the key.
    """
    value = cfg.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CheckpointError(f"{label}: config field {key} has an unexpected value (it must be a JSON object), got {_show(value)}")
    return value


LAYER_TYPES = ("sliding_attention", "full_attention")


def sliding_layers(cfg: Mapping, n_layers: int, label: str) -> list[int] | None:
    """Indices of the layers ``cfg["layer_types"]`` marks ``sliding_attention`` (transformers 5 writes the list into
    every config of a family with per-layer windows); None when the file has no such list.

    Raises:
        CheckpointError: a list that is not ``n_layers`` of :data:`LAYER_TYPES`.
    """
    types = cfg.get("layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != n_layers or any(t not in LAYER_TYPES for t in types):
        raise CheckpointError(f"{label}: config field layer_types must list {n_layers} of {', '.join(LAYER_TYPES)}, "
                              f"got {_show(types)}")
    return [i for i, t in enumerate(types) if t == "sliding_attention"]
