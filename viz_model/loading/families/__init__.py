"""Conversion of other projects' checkpoints into the instrumented model.

Each family module maps a Hugging Face ``config.json`` (or nanoGPT's ``model_args``) to a
:class:`viz_model.Config` and renames/reshapes the weights into this project's state dict:
``W_Q [n_heads, d_model, d_head]``, ``W_O [n_heads, d_head, d_model]``, ``W_in [d_model, d_mlp]`` and so on.
Parity with ``transformers`` (eager attention) is tested in ``tests/test_families.py``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from viz_model.config import Config, _show
from viz_model.loading.weights import CheckpointError, check_config
from viz_model.loading.families import (bart, bert, distilbert, gemma, gemma2, gpt2, gpt_neox, llama, mixtral, olmo2,
                                        olmoe, opt, phi3, qwen2_moe, qwen3, roberta, t5)

# model_type (config.json) -> the family's module: config_from_hf(hf, label) and from_hf(hf, state, label)
FAMILIES = {
    "gpt2": gpt2, "bert": bert, "distilbert": distilbert, "roberta": roberta, "bart": bart, "t5": t5,
    "llama": llama, "mistral": llama, "qwen2": llama, "qwen3": qwen3, "olmo2": olmo2, "gpt_neox": gpt_neox,
    "opt": opt, "gemma": gemma, "gemma2": gemma2, "gemma3_text": gemma2, "phi3": phi3,
    # mixture of experts (viz_model/feed_forward.py); their modules set MIXTURE_OF_EXPERTS = True
    "mixtral": mixtral, "qwen2_moe": qwen2_moe, "olmoe": olmoe,
}


def is_mixture_of_experts(model_type: str) -> bool:
    """Whether ``model_type`` is a supported mixture-of-experts family (False for unknown types)."""
    return getattr(FAMILIES.get(model_type), "MIXTURE_OF_EXPERTS", False)


def _model_type(hf_config: Mapping, label: str) -> str:
    model_type = hf_config.get("model_type")
    if not model_type:
        raise CheckpointError(f"{label}: config.json has no model_type (supported: {', '.join(FAMILIES)})")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise CheckpointError(f"{label}: model_type {_show(model_type)} is not supported (supported: {', '.join(FAMILIES)})")
    return model_type


def hf_config(hf_config: Mapping, label: str, file_bytes: int = 0) -> Config:
    """The validated :class:`Config` of a Hugging Face ``config.json``, within the memory cap, from the config
    alone: call it before reading any weight. ``file_bytes``: the weights' size on disk, when known.

    Raises:
        CheckpointError: missing or unknown ``model_type``, a field of the wrong type or out of range,
            unsupported options, an estimate above ``VIZ_MAX_MODEL_MB``.
    """
    model_type = _model_type(hf_config, label)
    return check_config(FAMILIES[model_type].config_from_hf(dict(hf_config), label), label, file_bytes)


def from_hf(hf_config: Mapping, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """Config and converted state dict for a Hugging Face checkpoint.

    Raises:
        CheckpointError: as :func:`hf_config`; missing or mis-shaped weights.
    """
    return FAMILIES[_model_type(hf_config, label)].from_hf(dict(hf_config), state, label)


def nanogpt_config(model_args: Mapping, label: str) -> Config:
    """The validated :class:`Config` of nanoGPT's ``model_args``, within the memory cap.

    Raises:
        CheckpointError: missing or mistyped fields, an estimate above ``VIZ_MAX_MODEL_MB``.
    """
    return check_config(gpt2.config_from_nanogpt(dict(model_args), label), label)


def from_nanogpt(model_args: Mapping, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """Config and converted state dict for a nanoGPT ``ckpt.pt`` (see :func:`gpt2.from_nanogpt`)."""
    return gpt2.from_nanogpt(dict(model_args), state, label)
