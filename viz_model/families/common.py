"""Helpers shared by the family converters: fetching weights with shape checks and reshaping
Hugging Face ``nn.Linear`` matrices into per-head tensors."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..weights import CheckpointError

FLOAT8 = {getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
          if hasattr(torch, n)}
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}


class Weights:
    """A source state dict with a key prefix stripped, read with shape checks.

    ``get(name, shape)`` returns the tensor or raises :class:`CheckpointError` naming the key.
    """

    def __init__(self, state: Mapping[str, torch.Tensor], label: str, prefixes: tuple[str, ...] = ()) -> None:
        self.label = label
        self.state = {}
        for key, value in state.items():
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
        return tensor.float()


def activation(name, label: str) -> str:
    """This project's MLP kind for a transformers activation name."""
    if name not in ACTIVATIONS:
        raise CheckpointError(f"{label}: activation {name!r} is not supported (supported: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


def heads_in(w_in_out: torch.Tensor, n_heads: int, d_head: int) -> torch.Tensor:
    """``[d_model, n_heads * d_head]`` (input-major, as x @ W) -> ``[n_heads, d_model, d_head]``."""
    d_model = w_in_out.shape[0]
    return w_in_out.reshape(d_model, n_heads, d_head).permute(1, 0, 2).contiguous()


def heads_out(w_in_out: torch.Tensor, n_heads: int, d_head: int) -> torch.Tensor:
    """``[n_heads * d_head, d_model]`` (input-major) -> ``W_O [n_heads, d_head, d_model]``."""
    return w_in_out.reshape(n_heads, d_head, -1).contiguous()


def require_int(cfg: Mapping, key: str, label: str) -> int:
    """``cfg[key]`` as a positive int, or a one-line error naming the key."""
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise CheckpointError(f"{label}: config field {key} must be a positive integer, got {value!r}")
    return value
