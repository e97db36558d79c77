"""Open any supported checkpoint: the native ``.safetensors``, a Hugging Face folder (or a ``.zip`` of one),
a nanoGPT ``ckpt.pt``, or a Hugging Face hub id; and uploads (bytes) from the browser.

Nothing here executes code from a file: safetensors holds only tensors and strings, and pickle-based
files are read with ``torch.load(weights_only=True)``, which refuses anything but tensors and plain
containers. Zip archives are checked member by member (no absolute paths, no ``..``, no links, only the
file kinds a model folder holds) and unpacked with a byte cap that counts what is really written.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import torch
from safetensors import safe_open
from tokenizers import Tokenizer

from .checkpoint import DEFAULT_MODEL, FORMAT, load_checkpoint, read_metadata
from .families import from_hf, from_nanogpt
from .model import VizTransformer
from .weights import CheckpointError, build_model

Progress = Callable[[float, str], None]
MAX_UPLOAD_MB = int(os.environ.get("VIZ_MAX_UPLOAD_MB", "1024"))  # cap on an upload and on an unpacked zip
MODEL_SUFFIXES = (".safetensors", ".zip", ".pt", ".bin", ".pth")
FOLDER_SUFFIXES = (".json", ".safetensors", ".bin", ".txt", ".md", ".model", ".gitattributes")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _quiet(fraction: float, message: str) -> None:
    pass


def load_model(source: str | Path | None = None, progress: Progress = _quiet) -> tuple[VizTransformer, Tokenizer | None]:
    """Load a model and its tokenizer (None when the checkpoint has none) from ``source``:

    - None: the shipped default model;
    - a native ``.safetensors`` file (config and tokenizer in its metadata);
    - a Hugging Face folder (``config.json`` + ``model.safetensors`` or ``pytorch_model.bin``, optional
      ``tokenizer.json``) of a GPT-2, BERT, Llama, Mistral or Qwen2 model, or a ``.zip`` of one;
    - a nanoGPT ``ckpt.pt`` (``model_args`` + ``model``);
    - a Hugging Face hub id such as ``gpt2`` (needs the network, or the model in the local hub cache).

    ``progress(fraction, message)`` is called as the load advances. Example::

        model, tokenizer = load_model("path/to/gpt2-folder")
        logits, cache = model.run_with_cache(torch.tensor([tokenizer.encode("Hello").ids]))

    Raises:
        CheckpointError: one line naming the problem (missing file, corrupt or hostile file, unknown
            family, weights that disagree with the config, offline hub, ...).
    """
    if source is None:
        return load_checkpoint(DEFAULT_MODEL)
    path = Path(source)
    if path.is_dir():
        return _load_folder(path, path.name, progress)
    if path.is_file():
        return _load_file(path, path.name, progress)
    text = str(source)
    if path.suffix.lower() in MODEL_SUFFIXES or not HUB_ID.match(text):
        raise CheckpointError(f"no such file or folder: {text}")
    return _load_folder(_from_hub(text), text, progress)


def load_upload(name: str, data: bytes, progress: Progress = _quiet,
                max_mb: int = MAX_UPLOAD_MB) -> tuple[VizTransformer, Tokenizer | None]:
    """Load an uploaded file (its original ``name`` decides the format) from ``data``.

    The bytes go to a private temporary folder that is deleted before this returns, so nothing is left
    where another session could read it.

    Raises:
        CheckpointError: as :func:`load_model`, or when the upload exceeds ``max_mb`` MB.
    """
    label = PurePosixPath(name.replace("\\", "/")).name or "upload"
    suffix = PurePosixPath(label).suffix.lower()
    if suffix not in MODEL_SUFFIXES:
        raise CheckpointError(f"{label}: unsupported file type (upload one of {', '.join(MODEL_SUFFIXES)})")
    if len(data) > max_mb * 2**20:
        raise CheckpointError(f"{label} is {len(data) / 2**20:.0f} MB, above the {max_mb} MB cap")
    with tempfile.TemporaryDirectory(prefix="viz-upload-") as tmp:
        # under the uploaded name when it is a plain one, as messages from the native loader use the file's name
        path = Path(tmp) / (label if re.fullmatch(r"[\w .()+-]{1,150}", label, re.ASCII) else "upload" + suffix)
        path.write_bytes(data)
        return _load_file(path, label, progress, max_mb)


def _load_file(path: Path, label: str, progress: Progress, max_mb: int = MAX_UPLOAD_MB):
    if path.stat().st_size == 0:
        raise CheckpointError(f"{label} is empty")
    suffix = path.suffix.lower()
    if suffix == ".zip":
        with tempfile.TemporaryDirectory(prefix="viz-zip-") as tmp:
            progress(0.05, "Unpacking the archive")
            _safe_unzip(path, Path(tmp), label, max_mb * 2**20)
            return _load_folder(Path(tmp), label, progress)
    if suffix == ".safetensors":
        if read_metadata(path).get("format") == FORMAT:
            progress(0.3, "Reading the native checkpoint")
            return load_checkpoint(path)
        raise CheckpointError(f"{label} is not a {FORMAT} checkpoint but a bare safetensors file without a config: "
                              "upload the Hugging Face folder as a .zip (config.json + model.safetensors)")
    if suffix in (".pt", ".pth", ".bin"):
        progress(0.1, "Reading the weights (weights_only)")
        ckpt = _torch_load(path, label, max_mb * 2**20)
        if isinstance(ckpt, dict) and "model_args" in ckpt and "model" in ckpt:
            if not isinstance(ckpt["model_args"], dict) or not isinstance(ckpt["model"], dict):
                raise CheckpointError(f"{label}: model_args and model must be dictionaries (nanoGPT layout)")
            progress(0.5, "Converting nanoGPT weights")
            cfg, state = _convert(from_nanogpt, ckpt["model_args"], ckpt["model"], label)
            return build_model(cfg, state, label), None
        raise CheckpointError(f"{label} is not a nanoGPT checkpoint (no model_args and model); a Hugging Face "
                              "pytorch_model.bin needs its config.json: upload the folder as a .zip")
    raise CheckpointError(f"{label}: unsupported file type {suffix or '(none)'}")


def _check_torch_archive(path: Path, label: str, max_bytes: int) -> None:
    """A ``torch.save`` file is a zip whose records torch stores uncompressed; a compressed record could
    unpack to far more memory than the file's size (a zip bomb), so it is refused, as is a total above
    ``max_bytes``. Legacy (pre-zip) files are plain pickles whose size bounds their memory."""
    if not zipfile.is_zipfile(path):
        return
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise CheckpointError(f"{label} is not a readable PyTorch file ({exc})") from None
    if any(m.compress_type != zipfile.ZIP_STORED for m in members):
        raise CheckpointError(f"{label} has compressed records, which torch.save never writes (refused: it could "
                              "unpack to far more memory than its size)")
    if sum(m.file_size for m in members) > max_bytes:
        raise CheckpointError(f"{label} would unpack to more than the {max_bytes // 2**20} MB cap")


def _torch_load(path: Path, label: str, max_bytes: int):
    """``torch.load`` with ``weights_only=True``: a pickle that would build other objects or run code is refused."""
    _check_torch_archive(path, label, max_bytes)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # UnpicklingError for forbidden globals, RuntimeError/EOFError for corrupt files
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        first = lines[0] if lines else type(exc).__name__
        if "weights_only" in str(exc) or "Unsupported global" in str(exc):
            # torch's text starts with a generic preamble; the line that names the cause follows it
            why = next((line for line in lines if re.search(r"global|unsupported|blocked", line, re.I)
                        and not line.startswith(("Weights only load failed", "Please file"))), first)
            if re.search(r"global", why, re.I):
                raise CheckpointError(f"{label} was refused: it asks to run code or build objects other than tensors "
                                      f"(loaded with weights_only=True; {why[:160]})") from None
            raise CheckpointError(f"{label} was refused: it is not a plain PyTorch weights file that loads with "
                                  f"weights_only=True ({why[:160]})") from None
        raise CheckpointError(f"{label} is not a readable PyTorch file ({first[:160]})") from None


def _safe_unzip(path: Path, dest: Path, label: str, max_bytes: int) -> None:
    """Unpack a model-folder archive into ``dest`` after checking every member.

    A single top-level folder is stripped. Raises CheckpointError for unsafe paths (absolute, ``..``,
    links), unexpected file kinds, or more than ``max_bytes`` unpacked (counted while writing, not trusted
    from the archive's header).
    """
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise CheckpointError(f"{label} is not a readable zip archive ({exc})") from None
    with archive:
        members = [m for m in archive.infolist() if not m.is_dir()]
        if not members:
            raise CheckpointError(f"{label}: the archive holds no files")
        parts = []
        for m in members:
            p = PurePosixPath(m.filename.replace("\\", "/"))
            if p.is_absolute() or ".." in p.parts or re.match(r"^[A-Za-z]:", m.filename):
                raise CheckpointError(f"{label}: unsafe path {m.filename!r} in the archive (absolute or with ..)")
            if (m.external_attr >> 16) & 0o170000 == 0o120000:
                raise CheckpointError(f"{label}: {m.filename!r} is a symbolic link; links are not accepted")
            if p.name != ".gitattributes" and p.suffix.lower() not in FOLDER_SUFFIXES:
                raise CheckpointError(f"{label}: unexpected member {m.filename!r} (a model folder holds only "
                                      f"{', '.join(FOLDER_SUFFIXES)} files)")
            parts.append(p.parts)
        top = {q[0] for q in parts}
        strip = 1 if len(top) == 1 and all(len(q) > 1 for q in parts) else 0
        if sum(m.file_size for m in members) > max_bytes:
            raise CheckpointError(f"{label} would unpack to more than the {max_bytes // 2**20} MB cap")
        written = 0
        for m, q in zip(members, parts):
            target = dest.joinpath(*q[strip:])
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(m) as src, open(target, "wb") as out:
                    while chunk := src.read(1 << 20):
                        written += len(chunk)
                        if written > max_bytes:
                            raise CheckpointError(f"{label} would unpack to more than the {max_bytes // 2**20} MB cap")
                        out.write(chunk)
            except CheckpointError:
                raise
            except Exception as exc:
                raise CheckpointError(f"{label}: {m.filename} cannot be unpacked ({type(exc).__name__})") from None


def _load_folder(folder: Path, label: str, progress: Progress):
    config_path = folder / "config.json"
    if not config_path.is_file():
        native = sorted(folder.glob("*.safetensors"))
        if len(native) == 1 and read_metadata(native[0]).get("format") == FORMAT:
            return load_checkpoint(native[0])
        raise CheckpointError(f"{label}: no config.json (a Hugging Face model folder needs config.json and its weights)")
    try:
        hf = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{label}: config.json is not valid JSON ({exc})") from None
    if not isinstance(hf, dict):
        raise CheckpointError(f"{label}: config.json must hold a JSON object")
    progress(0.2, "Reading the weights")
    state = _folder_state(folder, label)
    progress(0.6, f"Converting {hf.get('model_type', '?')} weights")
    if hf.get("quantization_config"):
        raise CheckpointError(f"{label}: quantized checkpoints are not supported (config.json has quantization_config)")
    cfg, converted = _convert(from_hf, hf, state, label)
    model = build_model(cfg, converted, label)
    progress(0.9, "Reading the tokenizer")
    return model, _folder_tokenizer(folder, label, cfg.d_vocab)


def _convert(convert, config: dict, state: dict, label: str):
    """Run a family converter; a config value of the wrong type (``"rope_theta": "abc"``, ``null`` where a
    number belongs) becomes a one-line :class:`CheckpointError` instead of a traceback."""
    try:
        return convert(config, state, label)
    except CheckpointError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, RuntimeError) as exc:
        raise CheckpointError(f"{label}: the config or weights have an unexpected value ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:160] if str(exc) else ''})") from None


def _folder_state(folder: Path, label: str) -> dict[str, torch.Tensor]:
    files = sorted(folder.glob("*.safetensors"))
    if files:
        state = {}
        for f in files:
            try:
                with safe_open(str(f), framework="pt") as st:
                    state.update({k: st.get_tensor(k) for k in st.keys()})
            except Exception as exc:
                raise CheckpointError(f"{label}: {f.name} is not a readable safetensors file ({exc})") from None
        return state
    bins = sorted(folder.glob("pytorch_model*.bin"))
    if not bins:
        raise CheckpointError(f"{label}: no weights (model.safetensors or pytorch_model.bin) next to config.json")
    state = {}
    for f in bins:
        part = _torch_load(f, f"{label}/{f.name}", MAX_UPLOAD_MB * 2**20)
        if not isinstance(part, dict):
            raise CheckpointError(f"{label}: {f.name} does not hold a state dict")
        state.update(part)
    return state


def _folder_tokenizer(folder: Path, label: str, d_vocab: int) -> Tokenizer | None:
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:
        raise CheckpointError(f"{label}: tokenizer.json cannot be read ({exc})") from None
    extra = set(range(d_vocab, tokenizer.get_vocab_size()))
    added = set(tokenizer.get_added_tokens_decoder())
    if extra - added:  # BART-large-cnn: 50,264 rows but <mask> added as id 50,264; a text using it is refused per text
        raise CheckpointError(f"{label}: tokenizer has {tokenizer.get_vocab_size()} tokens, the model only {d_vocab}")
    tokenizer.no_padding()  # sentence-transformers folders pad every text to 128 [PAD] tokens;
    tokenizer.no_truncation()  # the app truncates to the context itself, with a notice
    return tokenizer


def _from_hub(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(f"{repo_id} is not a local path, and huggingface_hub is not installed") from None
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    try:
        return Path(snapshot_download(repo_id, allow_patterns=["config.json", "*.safetensors", "tokenizer.json"],
                                      local_files_only=offline))
    except Exception as exc:
        why = "the machine is offline (HF_HUB_OFFLINE is set)" if offline else f"the hub could not be reached ({type(exc).__name__})"
        raise CheckpointError(f"{repo_id} is not a local path and is not in the local hub cache, and {why}") from None
