"""Open any supported checkpoint: the native ``.safetensors``, a Hugging Face folder (or a ``.zip`` of one),
a nanoGPT ``ckpt.pt``, or a Hugging Face hub id; and uploads (bytes) from the browser.

Nothing here executes code from a file: safetensors holds only tensors and strings, and pickle-based
files are read with ``torch.load(weights_only=True)``, which refuses anything but tensors and plain
containers. Zip archives are checked member by member (no absolute paths, no ``..``, no links, only the
file kinds a model folder holds) and unpacked with a byte cap that counts what is really written.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

import torch
from safetensors import safe_open
from tokenizers import Tokenizer

from viz_model.loading.dtypes import DtypeError, auto_dtype, parse_dtype, resolve_device, safetensors_sizes, tensors_dtype
from viz_model.limits import memory_limit, memory_limit_of, model_element_size
from viz_model.loading.checkpoint import DEFAULT_MODEL, FORMAT, first_line, load_checkpoint, read_metadata, read_tokenizer, reraise_interrupts
from viz_model.loading.families import from_hf, from_nanogpt, hf_config, nanogpt_config
from viz_model.model import VizTransformer
from viz_model.placement import Placement, PlacementError, parse_placement, placing
from viz_model.loading.weights import CheckpointError, build_model

Progress = Callable[[float, str], None]
MAX_UPLOAD_MB = int(os.environ.get("VIZ_MAX_UPLOAD_MB", "1024"))  # cap on an upload and on an unpacked zip
MODEL_SUFFIXES = (".safetensors", ".zip", ".pt", ".bin", ".pth")
FOLDER_SUFFIXES = (".json", ".safetensors", ".bin", ".txt", ".md", ".model", ".gitattributes")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
MAX_MEMBERS = 256  # files in an uploaded model-folder zip (a sharded 70B model has about 30)
MAX_TORCH_RECORDS = 20_000  # records in a torch.save archive (one per tensor storage)
MAX_RATIO = 200  # unpacked / compressed size of any zip member: text compresses about 3-10x
MAX_RATIO_LARGE = 20  # ... of a member above LARGE_MEMBER bytes (weights barely compress: about 1.1x)
LARGE_MEMBER = 8 * 2**20
MAX_CONFIG_BYTES = 2**20  # config.json: real ones are a few KB
MAX_TOKENIZER_BYTES = 64 * 2**20  # tokenizer.json: Qwen2's is 7 MB, Llama 3's 9 MB
STALE_SECONDS = 3600  # a private temporary folder of a process that is still alive is removed after this long


def _quiet(fraction: float, message: str) -> None:
    pass


# ------------------------------------------------------------------------------------------ temporary folders


def upload_root() -> Path:
    """The one folder that holds every private temporary folder of uploads and unpacked zips:
    ``<tempfile.gettempdir()>/viz-uploads-<uid>`` (mode 0700). It is removed when empty."""
    return Path(tempfile.gettempdir()) / f"viz-uploads-{os.getuid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def clean_stale_uploads(root: Path | None = None, max_age: float = STALE_SECONDS) -> list[str]:
    """Remove what killed processes left in :func:`upload_root`: a folder ``viz-<kind>-<pid>-...`` whose process
    no longer runs, or any folder older than ``max_age`` seconds (a live load never takes that long). Returns
    the names removed; errors are ignored (another process may be cleaning at the same time)."""
    root = upload_root() if root is None else root
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        match = re.fullmatch(r"viz-[a-z]+-(\d+)-.*", entry.name)
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if (match and int(match.group(1)) != os.getpid() and not _pid_alive(int(match.group(1)))) or age > max_age:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass
            removed.append(entry.name)
    return removed


def _own_root(root: Path) -> bool:
    """``root`` is a real folder (not a link) owned by this user, so that nobody else can read what goes in it."""
    try:
        st = os.lstat(root)
    except OSError:
        return False
    import stat
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


@contextmanager
def private_dir(kind: str) -> Iterator[Path]:
    """A new private folder (mode 0700) inside :func:`upload_root`, removed on exit whatever happens (an error,
    a ``KeyboardInterrupt``); what a killed process leaves is removed by the next one (:func:`clean_stale_uploads`).

    Raises:
        CheckpointError: when no temporary folder can be made (disk full, unwritable temp directory).
    """
    root = upload_root()
    path = None
    for _ in range(5):  # another process may remove the empty root between our mkdir and mkdtemp
        try:
            root.mkdir(mode=0o700, exist_ok=True)
            base = root if _own_root(root) else Path(tempfile.gettempdir())
            path = Path(tempfile.mkdtemp(prefix=f"viz-{kind}-{os.getpid()}-", dir=base))
            break
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise CheckpointError(f"no temporary folder can be made for the upload ({first_line(exc)})") from None
    if path is None:
        raise CheckpointError("no temporary folder can be made for the upload")
    clean_stale_uploads(root)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        try:
            root.rmdir()  # only when empty: another process's folder keeps it
        except OSError:
            pass


def _guard(label: str, load: Callable[[], tuple]) -> tuple:
    """Run ``load``; any error other than :class:`CheckpointError` (a bug, or a library's own exception type
    for a hostile file) becomes a one-line CheckpointError naming ``label``, so callers need one ``except``."""
    try:
        return load()
    except CheckpointError:
        raise
    except BaseException as exc:
        reraise_interrupts(exc)
        if isinstance(exc, RecursionError):
            raise CheckpointError(f"{label}: a structure in the file is nested too deeply") from None
        if isinstance(exc, MemoryError):
            raise CheckpointError(f"{label}: the machine ran out of memory while loading it") from None
        raise CheckpointError(f"{label} cannot be loaded ({type(exc).__name__}: {first_line(exc)})") from None


def _dtype_device(dtype: object, device: object) -> tuple[torch.dtype | str, torch.device]:
    try:
        return parse_dtype(dtype), resolve_device(device)
    except DtypeError as exc:
        raise CheckpointError(str(exc)) from None


def _placement(device_map: object, max_memory: object, offload_folder: object) -> Placement | None:
    try:
        return parse_placement(device_map, max_memory, offload_folder)
    except PlacementError as exc:
        raise CheckpointError(str(exc)) from None


def load_model(source: str | Path | None = None, progress: Progress = _quiet, dtype: torch.dtype | str = "float32",
               device: torch.device | str | None = "cpu", device_map: str | dict | None = None,
               max_memory: dict | str | None = None, offload_folder: str | Path | None = None
               ) -> tuple[VizTransformer, Tokenizer | None]:
    """Load a model and its tokenizer (None when the checkpoint has none) from ``source``:

    - None: the shipped default model;
    - a native ``.safetensors`` file (config and tokenizer in its metadata);
    - a Hugging Face folder (``config.json`` + ``model.safetensors`` or ``pytorch_model.bin``, optional
      ``tokenizer.json``) of a GPT-2, BERT, Llama, Mistral or Qwen2 model, or a ``.zip`` of one;
    - a nanoGPT ``ckpt.pt`` (``model_args`` + ``model``);
    - a Hugging Face hub id such as ``gpt2`` (needs the network, or the model in the local hub cache).

    ``progress(fraction, message)`` is called as the load advances. ``dtype``: ``"float32"`` (default),
    ``"auto"`` (the checkpoint's own dtype: a bfloat16 file stays bfloat16, as ``transformers``' ``dtype="auto"``),
    ``"bfloat16"``, ``"float16"`` or a torch dtype; ``device``: ``"cpu"`` (default), ``"cuda"``, or ``"auto"``
    (CUDA when present; see :mod:`viz_model.loading.dtypes`). Safetensors weights are memory-mapped and moved into the
    model without a second copy: a bfloat16 checkpoint loaded with ``dtype="auto"`` costs about its own size.

    Models larger than memory (accelerate's big-model inference, :mod:`viz_model.placement`): ``device_map="auto"``
    places whole blocks on the GPUs, then the CPU, then disk within ``max_memory`` (``{"cpu": "2GB", 0: "20GiB"}``
    or ``"cpu=2GB,0=20GiB"``; unset: the free memory), or a dict ``{module name: device}`` (``0``, ``"cuda:1"``,
    ``"cpu"``, ``"disk"``) places them as given; ``"disk"`` needs ``offload_folder``. ``device`` is then unused, and
    the memory check counts only the weights kept in this machine's memory. ``max_memory`` or ``offload_folder``
    alone mean ``device_map="auto"``. ``model.hf_device_map`` holds the map used.
    Example::

        model, tokenizer = load_model("path/to/gpt2-folder")
        logits, cache = model.run_with_cache(torch.tensor([tokenizer.encode("Hello").ids]))

    Memory: the model's estimated need (:func:`viz_model.limits.estimate_bytes`) must fit in the memory this machine
    has free, less a margin (``VIZ_MEMORY_MARGIN_MB``, 1,024 MB): whoever calls ``load_model`` chose the model.
    Uploads (:func:`load_upload`) are limited by the server's cap ``VIZ_MAX_MODEL_MB`` instead.

    Raises:
        CheckpointError: one line naming the problem (missing file, corrupt or hostile file, unknown
            family, weights that disagree with the config, offline hub, an unknown dtype or device, more memory
            than is free, a device map naming an unknown module or device, a ``max_memory`` that is no size,
            ``"disk"`` without ``offload_folder``, ...).
    """
    dtype, device = _dtype_device(dtype, device)
    # named by whoever runs this: limited by the memory free, not the upload cap
    with memory_limit_of("free"), placing(_placement(device_map, max_memory, offload_folder)):
        loaded = _load_named(source, progress, dtype, device)
    release_free_memory()
    return loaded


def release_free_memory() -> None:
    """Give the memory glibc's allocator keeps after a load's temporaries (dtype conversions, the unfused Q/K/V, the
    probe run) back to the system (``malloc_trim(0)``): without it a float32 file loaded as bfloat16 stays about
    20 % above the weights' size. Does nothing where the C library has no ``malloc_trim`` (not glibc)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _load_named(source: str | Path | None, progress: Progress, dtype, device):
    if source is None:
        return load_checkpoint(DEFAULT_MODEL, dtype, device)
    path = Path(source)
    if path.is_dir():
        return _guard(path.name, lambda: _load_folder(path, path.name, progress, dtype, device))
    if path.is_file():
        return _guard(path.name, lambda: _load_file(path, path.name, progress, dtype=dtype, device=device))
    text = str(source)
    if path.suffix.lower() in MODEL_SUFFIXES or not HUB_ID.match(text):
        raise CheckpointError(f"no such file or folder: {text}")
    return _guard(text, lambda: _load_folder(_from_hub(text), text, progress, dtype, device))


def load_upload(name: str, data: bytes, progress: Progress = _quiet, max_mb: int = MAX_UPLOAD_MB,
                dtype: torch.dtype | str = "float32", device: torch.device | str | None = "cpu",
                device_map: str | dict | None = None, max_memory: dict | str | None = None,
                offload_folder: str | Path | None = None) -> tuple[VizTransformer, Tokenizer | None]:
    """Load an uploaded file (its original ``name`` decides the format) from ``data``.

    The bytes go to a private temporary folder inside :func:`upload_root` that is deleted before this returns,
    so nothing is left where another session could read it (a killed process's folder is removed by the next
    upload). Every failure is one :class:`CheckpointError`: no other exception escapes for a bad file.

    ``dtype``, ``device``, ``device_map``, ``max_memory`` and ``offload_folder`` as in :func:`load_model`.

    Raises:
        CheckpointError: as :func:`load_model`, or when the upload exceeds ``max_mb`` MB (megabytes of 2^20 bytes).
    """
    label = PurePosixPath(str(name).replace("\\", "/")).name or "upload"
    label = label if len(label) <= 120 else label[:100] + "..." + label[-17:]
    dtype, device = _dtype_device(dtype, device)
    with placing(_placement(device_map, max_memory, offload_folder)):
        loaded = _guard(label, lambda: _load_upload(label, data, progress, max_mb, dtype, device))
    release_free_memory()
    return loaded


def _load_upload(label: str, data: bytes, progress: Progress, max_mb: int, dtype, device):
    suffix = PurePosixPath(label).suffix.lower()
    if suffix not in MODEL_SUFFIXES:
        raise CheckpointError(f"{label}: unsupported file type (upload one of {', '.join(MODEL_SUFFIXES)})")
    if len(data) > max_mb * 2**20:
        raise CheckpointError(f"{label} is {len(data) / 2**20:.0f} MB, above the {max_mb} MB cap")
    with private_dir("upload") as tmp:
        # under the uploaded name when it is a plain one, as messages from the native loader use the file's name
        path = Path(tmp) / (label if re.fullmatch(r"[\w .()+-]{1,150}", label, re.ASCII) else "upload" + suffix)
        path.write_bytes(data)
        return _load_file(path, label, progress, max_mb, dtype, device)


def _load_file(path: Path, label: str, progress: Progress, max_mb: int = MAX_UPLOAD_MB, dtype=torch.float32,
               device=torch.device("cpu")):
    if path.stat().st_size == 0:
        raise CheckpointError(f"{label} is empty")
    suffix = path.suffix.lower()
    if suffix == ".zip":
        with private_dir("zip") as tmp:
            progress(0.05, "Unpacking the archive")
            _safe_unzip(path, Path(tmp), label, max_mb * 2**20)
            return _load_folder(Path(tmp), label, progress, dtype, device)
    if suffix == ".safetensors":
        if read_metadata(path).get("format") == FORMAT:
            progress(0.3, "Reading the native checkpoint")
            return load_checkpoint(path, dtype, device)
        raise CheckpointError(f"{label} is not a {FORMAT} checkpoint but a bare safetensors file without a config: "
                              "upload the Hugging Face folder as a .zip (config.json + model.safetensors)")
    if suffix in (".pt", ".pth", ".bin"):
        progress(0.1, "Reading the weights (weights_only)")
        ckpt = _torch_load(path, label, _archive_cap(max_mb))
        if isinstance(ckpt, dict) and "model_args" in ckpt and "model" in ckpt:
            if not isinstance(ckpt["model_args"], dict) or not isinstance(ckpt["model"], dict):
                raise CheckpointError(f"{label}: model_args and model must be dictionaries (nanoGPT layout)")
            want = tensors_dtype(ckpt["model"].values()) if dtype == "auto" else dtype
            with model_element_size(want.itemsize):
                nanogpt_config(ckpt["model_args"], label)  # types, ranges and the memory estimate first
                progress(0.5, "Converting nanoGPT weights")
                args, weights = ckpt["model_args"], ckpt["model"]
                del ckpt  # the optimizer state goes now
                cfg, state = _convert(from_nanogpt, args, weights, label)
                del weights
                return build_model(cfg, state, label, path.stat().st_size, want, device), None
        raise CheckpointError(f"{label} is not a nanoGPT checkpoint (no model_args and model); a Hugging Face "
                              "pytorch_model.bin needs its config.json: upload the folder as a .zip")
    raise CheckpointError(f"{label}: unsupported file type {suffix or '(none)'}")


def _archive_cap(upload_mb: int) -> int:
    """Bytes a ``torch.save`` archive may unpack to: an upload's cap, or for a model named by whoever runs the
    server (:func:`load_model`) the memory free (its weights land in memory: torch files are not memory-mapped)."""
    kind, free = memory_limit()
    return free if kind == "free" else upload_mb * 2**20


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
    if len(members) > MAX_TORCH_RECORDS:
        raise CheckpointError(f"{label} holds {len(members):,} records, above the {MAX_TORCH_RECORDS:,} a model needs")
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
    except BaseException as exc:  # UnpicklingError for forbidden globals, RuntimeError/EOFError for corrupt files
        reraise_interrupts(exc)
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
    """Unpack a model-folder archive into ``dest`` after judging every member from the archive's directory,
    before anything is written.

    A single top-level folder is stripped. Refused (CheckpointError): more than :data:`MAX_MEMBERS` entries;
    unsafe paths (absolute, ``..``, links); unexpected file kinds; a declared total above ``max_bytes``; a
    member whose declared size is more than :data:`MAX_RATIO` times its compressed size (or
    :data:`MAX_RATIO_LARGE` times above :data:`LARGE_MEMBER` bytes: weights barely compress, a zip bomb does);
    and, as the last guard, more than ``max_bytes`` really written (counted while writing, not trusted from
    the archive's header).
    """
    try:
        archive = zipfile.ZipFile(path)
    except BaseException as exc:
        reraise_interrupts(exc)
        raise CheckpointError(f"{label} is not a readable zip archive ({first_line(exc)})") from None
    with archive:
        entries = archive.infolist()
        if len(entries) > MAX_MEMBERS:
            raise CheckpointError(f"{label} holds {len(entries):,} entries, above the {MAX_MEMBERS} a model folder "
                                  "needs (refused before unpacking)")
        members = [m for m in entries if not m.is_dir()]
        if not members:
            raise CheckpointError(f"{label}: the archive holds no files")
        parts = []
        for m in members:
            p = PurePosixPath(m.filename.replace("\\", "/"))
            if p.is_absolute() or ".." in p.parts or re.match(r"^[A-Za-z]:", m.filename):
                raise CheckpointError(f"{label}: unsafe path {m.filename[:80]!r} in the archive (absolute or with ..)")
            if (m.external_attr >> 16) & 0o170000 == 0o120000:
                raise CheckpointError(f"{label}: {m.filename[:80]!r} is a symbolic link; links are not accepted")
            if p.name != ".gitattributes" and p.suffix.lower() not in FOLDER_SUFFIXES:
                raise CheckpointError(f"{label}: unexpected member {m.filename[:80]!r} (a model folder holds only "
                                      f"{', '.join(FOLDER_SUFFIXES)} files)")
            parts.append(p.parts)
        top = {q[0] for q in parts}
        strip = 1 if len(top) == 1 and all(len(q) > 1 for q in parts) else 0
        if sum(m.file_size for m in members) > max_bytes:
            raise CheckpointError(f"{label} would unpack to more than the {max_bytes // 2**20} MB cap")
        for m in members:
            ratio = m.file_size / max(m.compress_size, 1)
            if ratio > MAX_RATIO or (m.file_size > LARGE_MEMBER and ratio > MAX_RATIO_LARGE):
                raise CheckpointError(f"{label}: {m.filename[:80]} would unpack to {m.file_size / 2**20:,.1f} MB from "
                                      f"{m.compress_size / 2**20:,.2f} MB ({ratio:,.0f}x: a zip bomb, refused before "
                                      "unpacking)")
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
            except BaseException as exc:
                reraise_interrupts(exc)
                raise CheckpointError(f"{label}: {m.filename[:80]} cannot be unpacked ({type(exc).__name__})") from None


def _read_json(path: Path, label: str, max_bytes: int) -> object:
    """A JSON file's value; one line for a file too large, not UTF-8, not JSON, nested too deeply, or holding
    a number with too many digits."""
    size = path.stat().st_size
    if size > max_bytes:
        raise CheckpointError(f"{label}: {path.name} is {size / 2**20:,.1f} MB, above the {max_bytes / 2**20:g} MB "
                              "such a file may have")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise CheckpointError(f"{label}: {path.name} is not valid JSON (not UTF-8 text)") from None
    except RecursionError:
        raise CheckpointError(f"{label}: {path.name} is not valid JSON (nested too deeply)") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{label}: {path.name} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        why = "a number has too many digits" if "digits" in str(exc) else first_line(exc, 80)
        raise CheckpointError(f"{label}: {path.name} is not valid JSON ({why})") from None


def _weight_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))


def _folder_dtype(dtype: torch.dtype | str, folder: Path, hf: dict, label: str) -> torch.dtype:
    """The model's dtype for a Hugging Face folder, known before any weight is read (the memory estimate needs
    it): ``dtype``, or for ``"auto"`` the dtype of most bytes in the safetensors files' headers, else (``.bin``
    weights) config.json's ``dtype`` / ``torch_dtype``, else float32."""
    if dtype != "auto":
        return dtype
    sizes = []
    for f in sorted(folder.glob("*.safetensors")):
        try:
            sizes += safetensors_sizes(str(f))
        except BaseException as exc:
            reraise_interrupts(exc)
            raise CheckpointError(f"{label}: {f.name} is not a readable safetensors file ({first_line(exc)})") from None
    if sizes:
        return auto_dtype(sizes)
    try:
        return parse_dtype(hf.get("dtype") or hf.get("torch_dtype") or "float32")
    except DtypeError:
        return torch.float32


def _load_folder(folder: Path, label: str, progress: Progress, dtype=torch.float32, device=torch.device("cpu")):
    config_path = folder / "config.json"
    if not config_path.is_file():
        native = sorted(folder.glob("*.safetensors"))
        if len(native) == 1 and read_metadata(native[0]).get("format") == FORMAT:
            return load_checkpoint(native[0], dtype, device)
        raise CheckpointError(f"{label}: no config.json (a Hugging Face model folder needs config.json and its weights)")
    hf = _read_json(config_path, label, MAX_CONFIG_BYTES)
    if not isinstance(hf, dict):
        raise CheckpointError(f"{label}: config.json must hold a JSON object")
    if hf.get("quantization_config"):
        raise CheckpointError(f"{label}: quantized checkpoints are not supported (config.json has quantization_config)")
    file_bytes = sum(f.stat().st_size for f in _weight_files(folder))
    want = _folder_dtype(dtype, folder, hf, label)
    with model_element_size(want.itemsize):
        cfg = hf_config(hf, label, file_bytes)  # types, ranges and the memory estimate before any weight is read
        tokenizer = _folder_tokenizer(folder, label, cfg.d_vocab)
        progress(0.2, "Reading the weights")
        state = _folder_state(folder, label)  # safetensors: memory-mapped, nothing read yet
        progress(0.6, f"Converting {hf.get('model_type', '?')} weights")
        cfg, converted = _convert(from_hf, hf, state, label)  # views of the file's tensors
        del state  # the converted dict holds what is still needed
        progress(0.8, "Checking the weights and a probe run")
        model = build_model(cfg, converted, label, file_bytes, want, device)
    progress(0.95, "Done converting")
    return model, tokenizer


def _convert(convert, config: dict, state: dict, label: str):
    """Run a family converter; a config value of the wrong type (``"rope_theta": "abc"``, ``null`` where a
    number belongs) becomes a one-line :class:`CheckpointError` instead of a traceback."""
    try:
        return convert(config, state, label)
    except CheckpointError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, RuntimeError) as exc:
        raise CheckpointError(f"{label}: the config or weights have an unexpected value ({type(exc).__name__}: "
                              f"{first_line(exc)})") from None


def _folder_state(folder: Path, label: str) -> dict[str, torch.Tensor]:
    files = sorted(folder.glob("*.safetensors"))
    if files:
        state = {}
        for f in files:
            try:
                with safe_open(str(f), framework="pt") as st:
                    state.update({k: st.get_tensor(k) for k in st.keys()})
            except BaseException as exc:
                reraise_interrupts(exc)
                raise CheckpointError(f"{label}: {f.name} is not a readable safetensors file ({first_line(exc)})") from None
        return state
    bins = sorted(folder.glob("pytorch_model*.bin"))
    if not bins:
        raise CheckpointError(f"{label}: no weights (model.safetensors or pytorch_model.bin) next to config.json")
    state = {}
    for f in bins:
        part = _torch_load(f, f"{label}/{f.name}", _archive_cap(MAX_UPLOAD_MB))
        if not isinstance(part, dict):
            raise CheckpointError(f"{label}: {f.name} does not hold a state dict")
        state.update(part)
    return state


def _folder_tokenizer(folder: Path, label: str, d_vocab: int) -> Tokenizer | None:
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    if path.stat().st_size > MAX_TOKENIZER_BYTES:
        raise CheckpointError(f"{label}: tokenizer.json is {path.stat().st_size / 2**20:,.0f} MB, above the "
                              f"{MAX_TOKENIZER_BYTES // 2**20} MB a tokenizer may have")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(f"{label}: tokenizer.json cannot be read (not UTF-8 text)") from None
    tokenizer = read_tokenizer(text, label, "tokenizer.json")
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
