"""The native checkpoint: one ``.safetensors`` file with the config and tokenizer in its metadata.

A single file is a complete, safe model: safetensors holds only tensors and strings, so loading it
never executes code (unlike pickle-based ``.pt`` files).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import Tokenizer

from viz_model.config import Config, ConfigError
from viz_model.loading.dtypes import DtypeError, auto_dtype, parse_dtype, safetensors_sizes
from viz_model.model import VizTransformer
from viz_model.loading.weights import CheckpointError, build_model, check_config

FORMAT = "viz-transformer"
FORMAT_VERSION = "1"
ASSETS = Path(__file__).resolve().parents[2] / "assets" / "models"
DEFAULT_MODEL = ASSETS / "tinystories-6l.safetensors"


def save_checkpoint(model: VizTransformer, tokenizer: Tokenizer, path: str | Path,
                    metadata: dict[str, str] | None = None, dtype: torch.dtype | None = None) -> Path:
    """Write ``model`` and ``tokenizer`` to one ``.safetensors`` file; return its path.

    ``metadata`` adds free-form string entries (e.g. the training command). ``dtype`` (e.g. ``torch.float16``,
    half the bytes) stores the weights in that dtype instead of the model's own; :func:`load_checkpoint` reads
    any floating dtype back as float32.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "config": model.cfg.to_json(),
            "tokenizer": tokenizer.to_str()}
    meta.update(metadata or {})
    tensors = {k: v.detach().to(dtype or v.dtype).contiguous().cpu() for k, v in model.state_dict().items()}
    # written beside and renamed into place: a model loaded from the old file keeps its weights memory-mapped
    # (load_model), and overwriting those pages in place would change it, or crash it on a shorter file
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        save_file(tensors, str(tmp), metadata=meta)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
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
    except BaseException as exc:  # safetensors raises its own error types (and pyo3 panics) for corrupt headers
        reraise_interrupts(exc)
        raise CheckpointError(f"{path.name} is not a readable safetensors file ({first_line(exc)})") from None


def first_line(exc: BaseException, limit: int = 160) -> str:
    """The first non-empty line of an exception's text (or its type's name), at most ``limit`` characters."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:limit]


def reraise_interrupts(exc: BaseException) -> None:
    """Let Ctrl-C and interpreter exit through; every other error (including the Rust libraries'
    ``pyo3_runtime.PanicException``, a ``BaseException``) is the file's fault and becomes a one-line message."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
        raise exc


def read_tokenizer(text: object, label: str, where: str) -> Tokenizer:
    """A tokenizer from its JSON text.

    Raises:
        CheckpointError: ``"<label>: <where> cannot be read (...)"`` for anything the tokenizers library refuses,
            including its Rust panics.
    """
    if not isinstance(text, str) or not text:
        raise CheckpointError(f"{label}: {where} is missing or empty")
    try:
        return Tokenizer.from_str(text)
    except BaseException as exc:
        reraise_interrupts(exc)
        raise CheckpointError(f"{label}: {where} cannot be read ({first_line(exc)})") from None


def _tensor_bytes(path: Path) -> int:
    """Bytes of a safetensors file's tensor data: the file less its 8-byte length and JSON header (which holds
    the config and the tokenizer)."""
    with open(path, "rb") as f:
        header = int.from_bytes(f.read(8), "little")
    return max(0, path.stat().st_size - 8 - header)


def load_checkpoint(path: str | Path, dtype: torch.dtype | str = torch.float32,
                    device: torch.device | str | None = "cpu") -> tuple[VizTransformer, Tokenizer]:
    """Load a native checkpoint written by :func:`save_checkpoint`; the model is in eval mode.

    The config is checked (types, ranges, memory estimate) before the tokenizer or any weight is read.
    ``dtype`` and ``device`` as in :func:`viz_model.load_model` (``"auto"``: the file's dtype, e.g. float16 for the
    shipped timeline snapshots).

    Raises:
        CheckpointError: missing/corrupt file, foreign format, bad config or tokenizer, a model above the
            memory cap (``VIZ_MAX_MODEL_MB``), missing, unexpected or mis-shaped weights, non-finite weights
            or activations.
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
        dtype = parse_dtype(dtype)
        if dtype == "auto":
            dtype = auto_dtype(safetensors_sizes(str(path)))
    except DtypeError as exc:
        raise CheckpointError(f"{path.name}: {exc}") from None
    except BaseException as exc:
        reraise_interrupts(exc)
        raise CheckpointError(f"{path.name}: the weights cannot be read ({first_line(exc)})") from None
    check_config(cfg, path.name, _tensor_bytes(path), dtype.itemsize)
    tokenizer = read_tokenizer(meta.get("tokenizer"), path.name, "the tokenizer in the metadata")
    if tokenizer.get_vocab_size() > cfg.d_vocab:
        raise CheckpointError(f"{path.name}: tokenizer has {tokenizer.get_vocab_size()} tokens, model only {cfg.d_vocab}")
    try:
        with safe_open(str(path), framework="pt") as f:  # memory-mapped: build_model copies only what it converts
            state = {name: f.get_tensor(name) for name in f.keys()}
    except BaseException as exc:
        reraise_interrupts(exc)
        raise CheckpointError(f"{path.name}: the weights cannot be read ({first_line(exc)})") from None
    return build_model(cfg, state, path.name, _tensor_bytes(path), dtype, device), tokenizer
