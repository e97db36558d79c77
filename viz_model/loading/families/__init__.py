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
from viz_model.loading.families import bart, bert, gpt2, llama
from viz_model.loading.families import distilbert, gemma, gemma2, gpt_neox, olmo2, opt, phi3, qwen3, roberta, t5  # dense families of issue 16
from viz_model.loading.families import mixtral, olmoe, qwen2_moe  # mixture-of-experts families of issue 16

HF_FAMILIES = {"gpt2": gpt2.from_hf, "bert": bert.from_hf, "llama": llama.from_hf, "mistral": llama.from_hf,
               "qwen2": llama.from_hf, "bart": bart.from_hf}
HF_CONFIGS = {"gpt2": gpt2.config_from_hf, "bert": bert.config_from_hf, "llama": llama.config_from_hf,
              "mistral": llama.config_from_hf, "qwen2": llama.config_from_hf, "bart": bart.config_from_hf}
# Further dense families (issue 16), one module each with config_from_hf and from_hf: model_type -> module
DENSE = {"qwen3": qwen3, "olmo2": olmo2, "gpt_neox": gpt_neox, "opt": opt,
         "distilbert": distilbert, "roberta": roberta, "gemma": gemma, "gemma2": gemma2, "gemma3_text": gemma2,
         "phi3": phi3, "t5": t5}
HF_FAMILIES.update({name: module.from_hf for name, module in DENSE.items()})
HF_CONFIGS.update({name: module.config_from_hf for name, module in DENSE.items()})
# Mixture-of-experts families (issue 16; viz_model/moe.py), one module each: model_type -> module
MOE = {"mixtral": mixtral, "qwen2_moe": qwen2_moe, "olmoe": olmoe}
HF_FAMILIES.update({name: module.from_hf for name, module in MOE.items()})
HF_CONFIGS.update({name: module.config_from_hf for name, module in MOE.items()})


def _model_type(hf_config: Mapping, label: str) -> str:
    model_type = hf_config.get("model_type")
    if not model_type:
        raise CheckpointError(f"{label}: config.json has no model_type (supported: {', '.join(HF_FAMILIES)})")
    if not isinstance(model_type, str) or model_type not in HF_FAMILIES:
        raise CheckpointError(f"{label}: model_type {_show(model_type)} is not supported (supported: {', '.join(HF_FAMILIES)})")
    return model_type


def hf_config(hf_config: Mapping, label: str, file_bytes: int = 0) -> Config:
    """The validated :class:`Config` of a Hugging Face ``config.json``, within the memory cap, from the config
    alone: call it before reading any weight. ``file_bytes``: the weights' size on disk, when known.

    Raises:
        CheckpointError: missing or unknown ``model_type``, a field of the wrong type or out of range,
            unsupported options, an estimate above ``VIZ_MAX_MODEL_MB``.
    """
    model_type = _model_type(hf_config, label)
    return check_config(HF_CONFIGS[model_type](dict(hf_config), label), label, file_bytes)


def from_hf(hf_config: Mapping, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """Config and converted state dict for a Hugging Face checkpoint.

    Raises:
        CheckpointError: as :func:`hf_config`; missing or mis-shaped weights.
    """
    return HF_FAMILIES[_model_type(hf_config, label)](dict(hf_config), state, label)


def nanogpt_config(model_args: Mapping, label: str) -> Config:
    """The validated :class:`Config` of nanoGPT's ``model_args``, within the memory cap.

    Raises:
        CheckpointError: missing or mistyped fields, an estimate above ``VIZ_MAX_MODEL_MB``.
    """
    return check_config(gpt2.config_from_nanogpt(dict(model_args), label), label)


def from_nanogpt(model_args: Mapping, state: Mapping[str, torch.Tensor], label: str) -> tuple[Config, dict[str, torch.Tensor]]:
    """Config and converted state dict for a nanoGPT ``ckpt.pt`` (see :func:`gpt2.from_nanogpt`)."""
    return gpt2.from_nanogpt(dict(model_args), state, label)
