"""Gemma Scope's ``params.npz`` (Lieberum et al. 2024) converted to SAELens's layout, as SAELens's own
``gemma_2_sae_huggingface_loader`` (``sae_lens/loading/pretrained_sae_loaders.py``) does: a JumpReLU SAE with
``apply_b_dec_to_input = False``; the arrays ``W_enc`` [d_in, d_sae], ``W_dec`` [d_sae, d_in], ``b_enc``, ``b_dec``,
``threshold`` (lower-case ``w_enc`` / ``w_dec`` accepted). The release's folder names say the hook (``layer_12`` of
a ``-res`` release: ``blocks.12.hook_resid_post``; ``-mlp``: ``blocks.12.hook_mlp_out``), which the caller passes.

Checked like a checkpoint: each ``.npy`` member's header (dtype, shape) is read from the zip before any array, object
arrays (pickles) are never loaded (``allow_pickle=False``), sizes are held to the memory cap, NaN/inf refused.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np
import torch

from viz_model.loading.checkpoint import first_line
from viz_model.limits import max_model_bytes
from viz_model.features.dictionary import SparseDictionary
from viz_model.features.saelens import DictionaryError, load_dictionary, save_dictionary

NAMES = {"w_enc": "W_enc", "w_dec": "W_dec", "b_enc": "b_enc", "b_dec": "b_dec", "threshold": "threshold"}


def _headers(path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    out = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            name = info.filename.removesuffix(".npy")
            with z.open(info) as f:
                version = np.lib.format.read_magic(f)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, _fortran, dtype = read(f)
            out[NAMES.get(name.lower(), name)] = (tuple(int(s) for s in shape), dtype)
    return out


def convert_gemma_scope(npz_path: str | Path, folder: str | Path, hook_name: str) -> SparseDictionary:
    """Write Gemma Scope's ``params.npz`` as a SAELens-layout folder (float32) and return it loaded.

    Raises:
        DictionaryError: not a zip of .npy arrays, missing or extra arrays, non-float or object dtypes, shapes that
            disagree, a size above the memory cap, NaN/inf.
    """
    path = Path(npz_path)
    label = path.name
    try:
        heads = _headers(path)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise DictionaryError(f"{label}: not a readable .npz of arrays ({first_line(exc)})") from None
    want = {"W_enc", "W_dec", "b_enc", "b_dec", "threshold"}
    if set(heads) != want:
        raise DictionaryError(f"{label}: expected arrays {sorted(want)}, found {sorted(heads)[:8]}")
    for name, (shape, dtype) in heads.items():
        if dtype.kind != "f" or dtype.itemsize not in (2, 4):
            raise DictionaryError(f"{label}: {name} has dtype {dtype} (float32 or float16 expected)")
    (d_in, d_sae) = heads["W_enc"][0] if len(heads["W_enc"][0]) == 2 else (0, 0)
    expect = {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_in), "b_enc": (d_sae,), "b_dec": (d_in,), "threshold": (d_sae,)}
    for name, shape in expect.items():
        if heads[name][0] != shape or min(shape) < 1:
            raise DictionaryError(f"{label}: {name} has shape {list(heads[name][0])}, W_enc implies {list(shape)}")
    if 4 * sum(math.prod(s) for s in expect.values()) > max_model_bytes():
        raise DictionaryError(f"{label}: its weights are above the {max_model_bytes() / 2**20:,.0f} MB cap (VIZ_MAX_MODEL_MB)")
    d = SparseDictionary(d_in, d_sae, hook_name, "jumprelu", apply_b_dec_to_input=False, empty=True)
    with np.load(path, allow_pickle=False) as data, torch.no_grad():
        for key in data.files:
            name = NAMES.get(key.lower(), key)
            t = torch.from_numpy(np.ascontiguousarray(data[key])).float()
            if not torch.isfinite(t).all():
                raise DictionaryError(f"{label}: {name} holds NaN or infinite values")
            getattr(d, name).copy_(t)
    save_dictionary(d, folder, model_name="gemma-scope (converted)")
    return load_dictionary(folder)
