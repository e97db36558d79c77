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
3. each ``cfg.json`` through :func:`viz_model.features.saelens.read_cfg` (types, ranges, the weights' size under the
   memory cap), then the hook: it must be a hook of the loaded model whose width is the dictionary's ``d_in``
   (and, for a transcoder, ``hook_name_out`` with ``d_out``);
4. the weights through :func:`viz_model.features.saelens.load_dictionary` (header, shapes, dtypes, NaN/inf);
5. a top-context index that cannot be read or points at ids outside the model's vocabulary is removed (the
   dictionary stays usable without it).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from viz_model.loading.sources import MAX_UPLOAD_MB, _own_root, _safe_unzip, clean_stale_uploads
from viz_model.loading.weights import CheckpointError
from viz_model.features.index import CORPUS_FILE, INDEX_FILE, load_index
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


def hook_widths(model, hooks: list[str]) -> dict[str, int]:
    """The last dimension of each of ``hooks`` on ``model`` (one forward pass over one token). Unknown hooks are
    left out."""
    known = [h for h in hooks if h in model.hook_dict]
    if not known:
        return {}
    ids = torch.zeros(1, 1, dtype=torch.long)
    kw = {"src_tokens": ids} if getattr(model, "encoder", None) is not None else {}
    with torch.no_grad():
        _, cache = model.run_with_cache(ids, names_filter=known, **kw)
    return {h: int(cache[h].shape[-1]) for h in known}


def _folders(root: Path) -> list[Path]:
    found = [p for p in [root, *root.glob("*"), *root.glob("*/*")] if p.is_dir() and (p / CFG_FILE).is_file()]
    return sorted(found, key=lambda p: _layer_key(p.name))


def _layer_key(name: str) -> tuple[int, str]:
    parts = name.split(".")
    return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1, name)


def check_dictionaries(folders: list[Path], model, label: str) -> None:
    """Raises DictionaryError (one line) unless every folder holds a dictionary that reads (and writes) hooks of
    ``model`` with the right widths and whose weights load (module docstring, steps 3-4)."""
    cfgs = [read_cfg(f) for f in folders]
    hooks = sorted({c["hook_name"] for c in cfgs} | {c["hook_name_out"] for c in cfgs if c["hook_name_out"]})
    widths = hook_widths(model, hooks)
    for folder, cfg in zip(folders, cfgs):
        name = folder.name if folder.name else label
        for hook, width, what in ((cfg["hook_name"], cfg["d_in"], "d_in"),
                                  (cfg["hook_name_out"], cfg["d_out"], "d_out")):
            if hook is None:
                continue
            if hook not in widths:
                raise DictionaryError(f"{name}: it reads {hook[:80]!r}, which is not a hook of the loaded model "
                                      "(a dictionary trained for another model?)")
            if widths[hook] != width:
                raise DictionaryError(f"{name}: its {what} is {width:,} but {hook[:80]} of the loaded model has width "
                                      f"{widths[hook]:,} (a dictionary trained for another model?)")
        load_dictionary(folder)


def _drop_bad_index(folder: Path, d_vocab: int) -> bool:
    """Remove ``folder``'s top-context index when it cannot be read or holds ids outside the vocabulary; return
    whether an index remains."""
    if not (folder / INDEX_FILE).is_file():
        return False
    try:
        index = load_index(folder)
        ok = index.corpus.numel() == 0 or (int(index.corpus.min()) >= 0 and int(index.corpus.max()) < d_vocab)
    except BaseException as exc:  # noqa: BLE001  safetensors raises its own types for corrupt files
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        ok = False
    if not ok:
        (folder / INDEX_FILE).unlink(missing_ok=True)
    return ok


def unpack_dictionaries(data: bytes, dest: str | Path, model, label: str = "the upload",
                        max_mb: int = MAX_UPLOAD_MB) -> list[Path]:
    """Unpack a ``.zip`` of dictionary folders into ``dest`` (an empty private folder) and check them (module
    docstring); return the dictionary folders in layer order.

    The archive is unpacked into ``dest/upload`` (a single top-level folder stripped, as a model folder's zip).

    Raises:
        DictionaryError: any refusal, one line (``dest`` may then hold part of the archive: remove it).
    """
    dest = Path(dest)
    if len(data) > max_mb * 2**20:
        raise DictionaryError(f"{label} is {len(data) / 2**20:,.1f} MB, above the {max_mb:,} MB upload cap "
                              "(VIZ_MAX_UPLOAD_MB)")
    dest.mkdir(parents=True, exist_ok=True)
    archive, dest = dest / ".upload.zip", dest / "upload"
    archive.write_bytes(data)
    try:
        dest.mkdir()
        _safe_unzip(archive, dest, label, max_mb * 2**20)
    except DictionaryError:
        raise
    except CheckpointError as exc:
        raise DictionaryError(str(exc)) from None
    finally:
        archive.unlink(missing_ok=True)
    folders = _folders(dest)
    if not folders:
        raise DictionaryError(f"{label} holds no dictionary: each needs a folder with {CFG_FILE} and "
                              "sae_weights.safetensors (SAELens's layout)")
    if len(folders) > MAX_DICTIONARIES:
        raise DictionaryError(f"{label} holds {len(folders)} dictionaries, above the {MAX_DICTIONARIES} one upload may have")
    check_dictionaries(folders, model, label)
    for folder in folders:
        if not (folder.parent / CORPUS_FILE).is_file():
            (folder / INDEX_FILE).unlink(missing_ok=True)
        _drop_bad_index(folder, model.cfg.d_vocab)
    return folders


__all__ = ["MAX_DICTIONARIES", "check_dictionaries", "dictionary_root", "hook_widths", "new_set_folder",
           "unpack_dictionaries"]
