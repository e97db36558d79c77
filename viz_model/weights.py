"""Assemble a :class:`VizTransformer` from a config and a state dict in this project's names, checking
every weight first, so that a bad file gives one clear line instead of a crash or silent garbage."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from .config import Config, ConfigError
from .model import VizTransformer


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message names the problem in one line."""


def build_model(cfg: Config, state: Mapping[str, torch.Tensor], label: str) -> VizTransformer:
    """A model in eval mode (dropout 0) with ``state`` loaded, as float32.

    ``label`` names the file in messages.

    Raises:
        CheckpointError: invalid config; missing, unexpected or mis-shaped weights; NaN or infinite values.
    """
    cfg.dropout = 0.0
    try:
        model = VizTransformer(cfg)
    except ConfigError as exc:
        raise CheckpointError(f"{label}: {exc}") from None
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{label}: weights do not match the config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    checked = {}
    for name, want in expected.items():
        tensor = state[name]
        if tuple(tensor.shape) != tuple(want.shape):
            raise CheckpointError(f"{label}: {name} has shape {tuple(tensor.shape)}, the config needs {tuple(want.shape)}")
        if not tensor.is_floating_point():
            raise CheckpointError(f"{label}: {name} is not a floating-point tensor ({tensor.dtype})")
        if not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{label}: {name} holds NaN or infinite values")
        checked[name] = tensor.float()
    model.load_state_dict(checked)
    model.eval()
    return model
