"""Gemma Scope's ``params.npz`` (Lieberum et al. 2024) converted to SAELens's layout, as SAELens's own
``gemma_2_sae_huggingface_loader`` (``sae_lens/loading/pretrained_sae_loaders.py``) does: a JumpReLU SAE with
``apply_b_dec_to_input = False``; the arrays ``W_enc`` [d_in, d_sae], ``W_dec`` [d_sae, d_in], ``b_enc``, ``b_dec``,
``threshold`` (lower-case ``w_enc`` / ``w_dec`` accepted). The release's folder names say the hook (``layer_12`` of
a ``-res`` release: ``blocks.12.hook_resid_post``; ``-mlp``: ``blocks.12.hook_mlp_out``), which the caller passes.

Checked like a checkpoint, from the zip's directory and each ``.npy`` member's header before any array is read:

1. the archive: a readable zip whose members' compressed sizes fit in the file (a directory that claims more than
   the file holds is refused), no two members whose names are equal once the case is ignored (``W_enc.npy`` and
   ``w_enc.npy`` would both be read), exactly the five arrays;
2. each header: a float32 or float16 dtype (object arrays, which are pickles, are never loaded:
   ``allow_pickle=False``), shapes that agree with ``W_enc``, and the member's declared uncompressed size equal to
   its header plus ``shape x itemsize`` (a member cannot declare gigabytes it does not hold, nor hold more than its
   header says), each within :data:`viz_model.loading.sources.MAX_RATIO` of its compressed size;
3. the conversion's peak memory (:func:`conversion_bytes`: the dictionary, one array being read and converted, the
   weights' copy that safetensors makes while writing) within :func:`viz_model.limits.max_model_bytes`;
4. then the arrays, one at a time: a corrupt compressed member (``zlib.error``, a bad CRC), NaN, infinity or a
   negative threshold is refused.

Every refusal is one :class:`DictionaryError` line, and a failed conversion leaves no output folder behind.
"""

from __future__ import annotations

import math
import shutil
import zipfile
from pathlib import Path

import numpy as np
import torch

from viz_model.loading.checkpoint import first_line, reraise_interrupts
from viz_model.limits import max_model_bytes
from viz_model.loading.sources import LARGE_MEMBER, MAX_RATIO, MAX_RATIO_LARGE
from viz_model.features.dictionary import SparseDictionary
from viz_model.features.saelens import CFG_FILE, WEIGHTS_FILE, DictionaryError, save_dictionary

NAMES = {"w_enc": "W_enc", "w_dec": "W_dec", "b_enc": "b_enc", "b_dec": "b_dec", "threshold": "threshold"}
MAX_HEADER = 10_000  # bytes of a .npy header (numpy's own limit for untrusted files)


def _header(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, header bytes)`` of a ``.npy`` member, from its first bytes only."""
    with z.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise ValueError(f"unknown .npy version {version}")
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _fortran, dtype = read(f, max_header_size=MAX_HEADER)
        return tuple(int(s) for s in shape), dtype, f.tell()


def _members(path: Path, label: str) -> dict[str, tuple[zipfile.ZipInfo, tuple[int, ...], np.dtype, int]]:
    """``{array name: (member, shape, dtype, header bytes)}`` after the checks of steps 1 and 2 that need no shape
    agreement (module docstring)."""
    size = path.stat().st_size
    with zipfile.ZipFile(path) as z:
        infos = [i for i in z.infolist() if not i.is_dir()]
        if len(infos) > 2 * len(NAMES):
            raise DictionaryError(f"{label}: {len(infos)} members, a Gemma Scope params.npz holds {len(NAMES)} arrays")
        if sum(i.compress_size for i in infos) > size:
            raise DictionaryError(f"{label}: its directory declares more compressed bytes than the file's "
                                  f"{size:,} (a corrupt or forged archive)")
        out: dict = {}
        seen: dict[str, str] = {}
        for info in infos:
            stem = info.filename.removesuffix(".npy")
            key = stem.lower()
            if key in seen:
                raise DictionaryError(f"{label}: members {seen[key][:40]!r} and {info.filename[:40]!r} name the same "
                                      "array (names differ only in case)")
            seen[key] = info.filename
            shape, dtype, header = _header(z, info)
            out[NAMES.get(key, stem)] = (info, shape, dtype, header)
        return out


def conversion_bytes(shapes: dict[str, tuple[int, ...]], itemsizes: dict[str, int]) -> int:
    """Peak memory of :func:`convert_gemma_scope`, in bytes, from the arrays' shapes and their file itemsizes::

        4 N + max(4 N, max_i n_i (s_i + 4 + 1))

    ``N`` = every array's elements (the float32 dictionary), then either the tensors' copy that safetensors's
    ``save_file`` makes while writing (4 N), or one array read from the file (``n_i`` elements of ``s_i`` bytes),
    its float32 copy and its finiteness mask, whichever is larger."""
    sizes = {name: math.prod(shape) for name, shape in shapes.items()}
    total = sum(sizes.values())
    reading = max(n * (itemsizes[name] + 4 + 1) for name, n in sizes.items())
    return 4 * total + max(4 * total, reading)


def _check(label: str, members: dict) -> tuple[int, int]:
    """``(d_in, d_sae)`` after the names, dtypes, shapes, declared sizes and the peak memory (steps 1-3)."""
    want = {"W_enc", "W_dec", "b_enc", "b_dec", "threshold"}
    if set(members) != want:
        raise DictionaryError(f"{label}: expected arrays {sorted(want)}, found {sorted(members)[:8]}")
    for name, (_info, _shape, dtype, _header) in members.items():
        if dtype.kind != "f" or dtype.itemsize not in (2, 4):
            raise DictionaryError(f"{label}: {name} has dtype {dtype} (float32 or float16 expected)")
    w_enc = members["W_enc"][1]
    d_in, d_sae = w_enc if len(w_enc) == 2 else (0, 0)
    expect = {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_in), "b_enc": (d_sae,), "b_dec": (d_in,), "threshold": (d_sae,)}
    for name, shape in expect.items():
        if members[name][1] != shape or min(shape) < 1:
            raise DictionaryError(f"{label}: {name} has shape {list(members[name][1])}, W_enc implies {list(shape)}")
    for name, (info, shape, dtype, header) in members.items():
        need = header + math.prod(shape) * dtype.itemsize
        if info.file_size != need:
            raise DictionaryError(f"{label}: {info.filename[:40]} declares {info.file_size:,} bytes but its header "
                                  f"describes {need:,} (a forged or corrupt archive)")
        ratio = info.file_size / max(info.compress_size, 1)
        if ratio > MAX_RATIO or (info.file_size > LARGE_MEMBER and ratio > MAX_RATIO_LARGE):
            raise DictionaryError(f"{label}: {info.filename[:40]} would unpack to {info.file_size / 2**20:,.1f} MB from "
                                  f"{info.compress_size / 2**20:,.2f} MB ({ratio:,.0f}x: a zip bomb)")
    peak = conversion_bytes({n: m[1] for n, m in members.items()}, {n: m[2].itemsize for n, m in members.items()})
    if peak > max_model_bytes():
        raise DictionaryError(f"{label}: converting it needs about {peak / 2**20:,.1f} MB, above the "
                              f"{max_model_bytes() / 2**20:,.0f} MB cap (VIZ_MAX_MODEL_MB)")
    return d_in, d_sae


def _read(path: Path, label: str, members: dict, d: SparseDictionary) -> None:
    """Each array into ``d`` (step 4), one at a time."""
    with zipfile.ZipFile(path) as z, torch.no_grad():
        for name, (info, _shape, _dtype, _header) in members.items():
            with z.open(info) as f:
                array = np.lib.format.read_array(f, allow_pickle=False, max_header_size=MAX_HEADER)
            t = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
            del array
            if not torch.isfinite(t).all():
                raise DictionaryError(f"{label}: {name} holds NaN or infinite values")
            getattr(d, name).copy_(t)
            del t
    if (d.threshold < 0).any():
        raise DictionaryError(f"{label}: threshold holds negative values")


def convert_gemma_scope(npz_path: str | Path, folder: str | Path, hook_name: str) -> SparseDictionary:
    """Write Gemma Scope's ``params.npz`` as a SAELens-layout folder (float32, created: it must not exist or be
    empty) and return the dictionary (eval mode, no gradients).

    Raises:
        DictionaryError: one line, for anything the module docstring lists: not a zip of .npy arrays, a forged
            directory, names equal but for the case, missing or extra arrays, non-float or object dtypes, shapes
            that disagree, declared sizes that disagree with the headers, a zip bomb, a conversion above the memory
            cap, a corrupt compressed member, NaN/inf, negative thresholds, a hook name that is not a short string, an
            output folder that is not empty or cannot be written. Nothing is left in ``folder`` then.
    """
    path, folder = Path(npz_path), Path(folder)
    label = path.name
    if not isinstance(hook_name, str) or not 0 < len(hook_name) <= 200:
        raise DictionaryError(f"{label}: the hook name must be a short string, got {str(hook_name)[:40]!r}")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise DictionaryError(f"{label}: the output folder {folder.name[:60]} already exists and is not empty")
    try:
        members = _members(path, label)
    except DictionaryError:
        raise
    except BaseException as exc:  # zipfile, numpy and the OS raise their own types for a hostile file
        reraise_interrupts(exc)
        raise DictionaryError(f"{label}: not a readable .npz of arrays ({first_line(exc, 100)})") from None
    d_in, d_sae = _check(label, members)
    made = not folder.exists()
    try:
        d = SparseDictionary(d_in, d_sae, hook_name, "jumprelu", apply_b_dec_to_input=False, empty=True)
        _read(path, label, members, d)
        save_dictionary(d, folder, model_name="gemma-scope (converted)")
    except BaseException as exc:
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            for name in (CFG_FILE, WEIGHTS_FILE):
                (folder / name).unlink(missing_ok=True)
        reraise_interrupts(exc)
        if isinstance(exc, DictionaryError):
            raise
        if isinstance(exc, MemoryError):
            raise DictionaryError(f"{label}: the machine ran out of memory while converting it") from None
        raise DictionaryError(f"{label}: cannot be converted ({type(exc).__name__}: {first_line(exc, 100)})") from None
    d.eval()
    d.requires_grad_(False)
    return d


__all__ = ["conversion_bytes", "convert_gemma_scope"]
