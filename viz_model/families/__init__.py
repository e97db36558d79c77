"""Conversion of other projects' checkpoints into the instrumented model.

Each family module maps a Hugging Face ``config.json`` (or nanoGPT's ``model_args``) to a
:class:`viz_model.Config` and renames/reshapes the weights into this project's state dict:
``W_Q [n_heads, d_model, d_head]``, ``W_O [n_heads, d_head, d_model]``, ``W_in [d_model, d_mlp]`` and so on.
Parity with ``transformers`` (eager attention) is tested in ``tests/test_families.py``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..config import Config
from ..weights import CheckpointError
from . import bart, bert, gpt2, llama

HF_FAMILIES = {"gpt2": gpt2.from_hf, "bert": bert.from_hf, "llama": llama.from_hf, "mistral": llama.from_hf,
               "qwen2": llama.from_hf, "bart": bart.from_hf}


def from_hf(hf_config: Mapping, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """Config and converted state dict for a Hugging Face checkpoint.

    Raises:
        CheckpointError: missing or unknown ``model_type``, unsupported options, missing or mis-shaped weights.
    """
    model_type = hf_config.get("model_type")
    if not model_type:
        raise CheckpointError(f"{label}: config.json has no model_type (supported: {', '.join(HF_FAMILIES)})")
    if model_type not in HF_FAMILIES:
        raise CheckpointError(f"{label}: model_type {model_type!r} is not supported (supported: {', '.join(HF_FAMILIES)})")
    return HF_FAMILIES[model_type](dict(hf_config), state, label)


def from_nanogpt(model_args: Mapping, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """Config and converted state dict for a nanoGPT ``ckpt.pt`` (see :func:`gpt2.from_nanogpt`)."""
    return gpt2.from_nanogpt(dict(model_args), state, label)
