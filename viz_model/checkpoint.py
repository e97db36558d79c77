"""The native checkpoint: one ``.safetensors`` file with the config and tokenizer in its metadata.

A single file is a complete, safe model: safetensors holds only tensors and strings, so loading it
never executes code (unlike pickle-based ``.pt`` files).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import Tokenizer

from .config import Config, ConfigError
from .model import VizTransformer
from .weights import CheckpointError, build_model

FORMAT = "viz-transformer"
FORMAT_VERSION = "1"
ASSETS = Path(__file__).resolve().parent.parent / "assets" / "models"
DEFAULT_MODEL = ASSETS / "tinystories-6l.safetensors"


def save_checkpoint(model: VizTransformer, tokenizer: Tokenizer, path: str | Path,
                    metadata: dict[str, str] | None = None) -> Path:
    """Write ``model`` and ``tokenizer`` to one ``.safetensors`` file; return its path.

    ``metadata`` adds free-form string entries (e.g. the training command).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "config": model.cfg.to_json(),
            "tokenizer": tokenizer.to_str()}
    meta.update(metadata or {})
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(tensors, str(path), metadata=meta)
    return path


def read_metadata(path: str | Path) -> dict[str, str]:
    """The string metadata of a safetensors file.

    Raises:
        CheckpointError: when the file is missing, empty, truncated or not safetensors.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no such file: {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path.name} is empty")
    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except Exception as exc:  # safetensors raises its own error types for corrupt headers
        raise CheckpointError(f"{path.name} is not a readable safetensors file ({exc})") from None


def load_checkpoint(path: str | Path) -> tuple[VizTransformer, Tokenizer]:
    """Load a native checkpoint written by :func:`save_checkpoint`; the model is in eval mode.

    Raises:
        CheckpointError: missing/corrupt file, foreign format, bad config or tokenizer, missing,
            unexpected or mis-shaped weights, or non-finite weights.
    """
    path = Path(path)
    meta = read_metadata(path)
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path.name} is not a {FORMAT} checkpoint (its metadata has no format={FORMAT})")
    try:
        cfg = Config.from_json(meta.get("config", ""))
    except ConfigError as exc:
        raise CheckpointError(f"{path.name}: {exc}") from None
    try:
        tokenizer = Tokenizer.from_str(meta["tokenizer"])
    except Exception as exc:
        raise CheckpointError(f"{path.name}: the tokenizer in the metadata cannot be read ({exc})") from None
    if tokenizer.get_vocab_size() > cfg.d_vocab:
        raise CheckpointError(f"{path.name}: tokenizer has {tokenizer.get_vocab_size()} tokens, model only {cfg.d_vocab}")
    try:
        with safe_open(str(path), framework="pt") as f:
            state = {name: f.get_tensor(name) for name in f.keys()}
    except Exception as exc:
        raise CheckpointError(f"{path.name}: the weights cannot be read ({exc})") from None
    return build_model(cfg, state, path.name), tokenizer
