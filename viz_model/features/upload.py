"""Dictionary sets uploaded as a ``.zip`` (one or more SAELens folders: ``cfg.json`` + ``sae_weights.safetensors``,
optionally the project's ``top_contexts.safetensors`` and a ``corpus.safetensors`` beside them), read as hostile
input, and the private folders that trained and uploaded sets live in while the server runs.

Checks, in order, each refusal one :class:`viz_model.features.saelens.DictionaryError` line, nothing large allocated
before the cheap checks pass:

1. the archive's size (``VIZ_MAX_UPLOAD_MB``), then :func:`viz_model.loading.sources._safe_unzip`'s checks, the same as a
   model folder's: at most 256 entries, no absolute path, no ``..``, no link, only ``.json`` / ``.safetensors`` /
   text files, the declared and the really written sizes under the cap, no member that inflates more than 200x
   (20x above 8 MB);
2. at most :data:`MAX_DICTIONARIES` folders with a ``cfg.json``, at most two levels deep;
3. each ``cfg.json`` through :func:`viz_model.features.saelens.read_cfg` (types, ranges, the peak memory of loading
   it under the memory cap); no two dictionaries on one hook; then the hooks: each must be a hook of the loaded
   model whose activation is ``[batch, pos, d]`` (read by a forward pass over a few tokens: an attention pattern
   is not one, whatever its last width) with ``d`` the dictionary's ``d_in`` (and, for a transcoder,
   ``hook_name_out`` with ``d_out``);
4. the weights through :func:`viz_model.features.saelens.load_dictionary` (header, shapes, dtypes, NaN/inf);
5. each top-context index through :func:`viz_model.features.index.load_index` (its corpus beside it, shapes that
   agree with the dictionary's ``d_sae``, contexts inside the corpus, ids inside the model's vocabulary).

A set whose parts disagree is refused whole, so that a page never finds the problem later; a refused upload leaves
nothing behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch

from viz_model.loading.sources import MAX_UPLOAD_MB, _own_root, _safe_unzip, clean_stale_uploads
from viz_model.loading.checkpoint import first_line, reraise_interrupts
from viz_model.loading.weights import CheckpointError
from viz_model.features.index import load_index
from viz_model.features.saelens import CFG_FILE, DictionaryError, load_dictionary, read_cfg

MAX_DICTIONARIES = 64  # dictionaries in one upload (one per layer of a large model, with room)


def dictionary_root() -> Path:
    """The folder that holds every trained or uploaded dictionary set of this user's servers:
    ``<tempfile.gettempdir()>/viz-dictionaries-<uid>`` (mode 0700). Not inside
    :func:`viz_model.loading.sources.upload_root`, whose folders are removed after an hour: a set lives as long as the
    server process that made it (the next process removes the folders of processes that no longer run)."""
    return Path(tempfile.gettempdir()) / f"viz-dictionaries-{os.getuid()}"


def new_set_folder(kind: str = "dict") -> Path:
    """A new private folder (mode 0700) ``viz-<kind>-<pid>-…`` in :func:`dictionary_root`, after removing the
    folders of server processes that have ended.

    Raises:
        DictionaryError: when no folder can be made (disk full, unwritable or foreign temporary folder).
    """
    root = dictionary_root()
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        if not _own_root(root):
            raise DictionaryError(f"{root} is not a private folder of this user: no dictionary can be written")
        clean_stale_uploads(root, max_age=float("inf"))  # only the folders of processes that no longer run
        return Path(tempfile.mkdtemp(prefix=f"viz-{kind}-{os.getpid()}-", dir=root))
    except OSError as exc:
        raise DictionaryError(f"no folder can be made for the dictionaries ({type(exc).__name__})") from None


PROBE_TOKENS = 3  # positions of the forward pass that reads each hook's shape


def hook_widths(model, hooks: list[str]) -> dict[str, int]:
    """The last dimension ``d`` of each of ``hooks`` on ``model`` whose activation a dictionary can read: a float
    tensor ``[batch, pos, d]`` (one forward pass over :data:`PROBE_TOKENS` tokens, whose ``pos`` must come back). An
    attention pattern ``[batch, head, query_pos, key_pos]``, ``hook_q`` ``[batch, pos, head, d_head]`` or the experts'
    integer indices are not such activations; they, and hooks the model lacks, are left out."""
    known = [h for h in hooks if h in model.hook_dict]
    if not known:
        return {}
    n = max(1, min(PROBE_TOKENS, model.cfg.n_ctx))
    ids = torch.zeros(1, n, dtype=torch.long)
    kw = {"src_tokens": ids} if getattr(model, "encoder", None) is not None else {}
    with torch.no_grad():
        _, cache = model.run_with_cache(ids, names_filter=known, **kw)
    return {h: int(cache[h].shape[-1]) for h in known
            if cache[h].ndim == 3 and tuple(cache[h].shape[:2]) == (1, n) and cache[h].is_floating_point()}


def _folders(root: Path) -> list[Path]:
    found = [p for p in [root, *root.glob("*"), *root.glob("*/*")] if p.is_dir() and (p / CFG_FILE).is_file()]
    return sorted(found, key=lambda p: _layer_key(p.name))


def _layer_key(name: str) -> tuple[int, str]:
    parts = name.split(".")
    return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1, name)


def check_dictionaries(folders: list[Path], model, label: str) -> None:
    """Raises DictionaryError (one line) unless the folders form one set the pages can use (module docstring, steps
    3-5): every ``cfg.json`` reads, no two dictionaries read the same hook, each reads (and writes) activations
    ``[batch, pos, d]`` of ``model`` with its widths, its weights load, and its top-context index (if any) agrees with
    it, with its corpus and with the model's vocabulary."""
    cfgs = [read_cfg(f) for f in folders]
    seen: dict[str, str] = {}
    for folder, cfg in zip(folders, cfgs):
        name = folder.name or label
        if cfg["hook_name"] in seen:
            raise DictionaryError(f"{label}: {seen[cfg['hook_name']][:60]} and {name[:60]} both read "
                                  f"{cfg['hook_name'][:80]} (a set holds one dictionary per hook)")
        seen[cfg["hook_name"]] = name
    hooks = sorted({c["hook_name"] for c in cfgs} | {c["hook_name_out"] for c in cfgs if c["hook_name_out"]})
    try:
        widths = hook_widths(model, hooks)
    except Exception as exc:  # noqa: BLE001  the model's own forward pass: reported, not raised through
        raise DictionaryError(f"{label}: the model's hooks cannot be read ({type(exc).__name__})") from None
    for folder, cfg in zip(folders, cfgs):
        name = folder.name or label
        for hook, width, what in ((cfg["hook_name"], cfg["d_in"], "d_in"),
                                  (cfg["hook_name_out"], cfg["d_out"], "d_out")):
            if hook is None:
                continue
            if hook not in model.hook_dict:
                raise DictionaryError(f"{name}: it reads {hook[:80]!r}, which is not a hook of the loaded model "
                                      "(a dictionary trained for another model?)")
            if hook not in widths:
                raise DictionaryError(f"{name}: {hook[:80]} is not an activation [batch, pos, d] a dictionary can "
                                      "read (attention patterns and per-head tensors are not)")
            if widths[hook] != width:
                raise DictionaryError(f"{name}: its {what} is {width:,} but {hook[:80]} of the loaded model has width "
                                      f"{widths[hook]:,} (a dictionary trained for another model?)")
        load_dictionary(folder)
        try:
            load_index(folder, model.cfg.d_vocab)
        except FileNotFoundError:
            pass  # no index: the dictionary is used without top contexts


def unpack_dictionaries(data: bytes, dest: str | Path, model, label: str = "the upload",
                        max_mb: int = MAX_UPLOAD_MB) -> list[Path]:
    """Unpack a ``.zip`` of dictionary folders into ``dest`` (an empty private folder) and check them (module
    docstring); return the dictionary folders in layer order.

    The archive is unpacked into ``dest/upload`` (a single top-level folder stripped, as a model folder's zip).

    Raises:
        DictionaryError: any refusal, one line; what was written is removed then (``dest`` too when this call
            made it), and nothing is written outside ``dest``.
    """
    dest = Path(dest)
    if len(data) > max_mb * 2**20:
        raise DictionaryError(f"{label} is {len(data) / 2**20:,.1f} MB, above the {max_mb:,} MB upload cap "
                              "(VIZ_MAX_UPLOAD_MB)")
    made = not dest.exists()
    archive, unpacked = dest / ".upload.zip", dest / "upload"
    try:
        dest.mkdir(parents=True, exist_ok=True)
        archive.write_bytes(data)
        unpacked.mkdir()
        _safe_unzip(archive, unpacked, label, max_mb * 2**20)
        archive.unlink()
        folders = _folders(unpacked)
        if not folders:
            raise DictionaryError(f"{label} holds no dictionary: each needs a folder with {CFG_FILE} and "
                                  "sae_weights.safetensors (SAELens's layout)")
        if len(folders) > MAX_DICTIONARIES:
            raise DictionaryError(f"{label} holds {len(folders)} dictionaries, above the {MAX_DICTIONARIES} one upload "
                                  "may have")
        check_dictionaries(folders, model, label)
        return folders
    except BaseException as exc:
        shutil.rmtree(dest if made else unpacked, ignore_errors=True)
        archive.unlink(missing_ok=True)
        reraise_interrupts(exc)
        if isinstance(exc, DictionaryError):
            raise
        if isinstance(exc, CheckpointError):
            raise DictionaryError(str(exc)) from None
        if isinstance(exc, OSError):
            raise DictionaryError(f"{label} cannot be unpacked here ({type(exc).__name__})") from None
        raise DictionaryError(f"{label} cannot be used ({type(exc).__name__}: {first_line(exc, 100)})") from None


__all__ = ["MAX_DICTIONARIES", "check_dictionaries", "dictionary_root", "hook_widths", "new_set_folder",
           "unpack_dictionaries"]
