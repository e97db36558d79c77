"""Sparse dictionaries on disk in SAELens's layout, read as carefully as checkpoints.

A dictionary is a folder with ``cfg.json`` and ``sae_weights.safetensors`` (SAELens's ``SAE.save_model`` /
``SAE.load_from_disk``; a Gemma Scope ``params.npz`` converted by SAELens has the same tensors):

- ``cfg.json``: ``architecture`` (``"standard"``, ``"jumprelu"``, ``"topk"``; SAELens's transcoder names
  ``"transcoder"`` and ``"jumprelu_transcoder"`` are read as ReLU / JumpReLU transcoders), ``d_in``, ``d_sae``,
  ``hook_name`` (also read from ``metadata.hook_name``, where SAELens 6 keeps it), ``apply_b_dec_to_input``
  (default true, as SAELens), ``k`` for topk, and for a transcoder ``hook_name_out`` and ``d_out``.
  ``normalize_activations`` must be absent or ``"none"`` and ``reshape_activations`` absent or ``"none"``:
  dictionaries that rescale or reshape their input are refused rather than run wrongly.
- ``sae_weights.safetensors``: ``W_enc`` [d_in, d_sae], ``b_enc`` [d_sae], ``W_dec`` [d_sae, d_out], ``b_dec``
  [d_out], and ``threshold`` [d_sae] for JumpReLU; float32, float16 or bfloat16.

Order of checks, so that a hostile folder costs nothing: the file sizes, ``cfg.json`` (at most 1 MB, read as the model
loader reads JSON: UTF-8, nesting, long numbers; types and ranges; the peak memory of loading the weights,
:func:`load_bytes`, within the memory cap :func:`viz_model.limits.max_model_bytes`), then the
safetensors header alone (names, dtypes, shapes, against the cfg), then the tensors one by one, each refused when it
holds NaN or infinity. Every refusal is one :class:`DictionaryError` line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from viz_model.loading.checkpoint import ASSETS, first_line, reraise_interrupts
from viz_model.limits import max_model_bytes
from viz_model.loading.sources import _read_json
from viz_model.loading.weights import CheckpointError
from viz_model.features.dictionary import ARCHITECTURES, SparseDictionary

CFG_FILE, WEIGHTS_FILE = "cfg.json", "sae_weights.safetensors"
SHIPPED = ASSETS.parent / "dictionaries"  # assets/dictionaries/<model name>/<hook name>/
MAX_CFG_BYTES = 1 << 20
MAX_WIDTH = 1 << 24  # d_in, d_sae, d_out: far above any published dictionary (Gemma Scope: 1 M features)
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
ALIASES = {"transcoder": "standard", "jumprelu_transcoder": "jumprelu"}


class DictionaryError(CheckpointError):
    """A dictionary folder that cannot be loaded; one line naming the problem (as :class:`CheckpointError`)."""


def _int(cfg: dict, key: str, label: str) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WIDTH:
        raise DictionaryError(f"{label}: cfg.json's {key} must be an integer in [1, {MAX_WIDTH}], got {value!r}")
    return value


def read_cfg(folder: str | Path) -> dict:
    """The checked fields of a dictionary folder's ``cfg.json``: ``architecture`` (one of ``ARCHITECTURES``),
    ``d_in``, ``d_sae``, ``d_out``, ``hook_name``, ``hook_name_out`` (None for an SAE), ``k`` (None unless topk),
    ``apply_b_dec_to_input``. Reads nothing else.

    Raises:
        DictionaryError: a missing or large file, not JSON, missing or mistyped keys, an unknown architecture, an
            input normalisation or reshape this loader does not apply, weights above the memory cap.
    """
    folder = Path(folder)
    label = folder.name or str(folder)
    path = folder / CFG_FILE
    if not path.is_file():
        raise DictionaryError(f"{label}: no {CFG_FILE} (a dictionary folder holds {CFG_FILE} and {WEIGHTS_FILE})")
    try:  # the model loader's reader: size, UTF-8, JSON, nesting (RecursionError) and long numbers, each one line
        cfg = _read_json(path, label, MAX_CFG_BYTES)
    except CheckpointError as exc:
        raise DictionaryError(str(exc)) from None
    except OSError as exc:
        raise DictionaryError(f"{label}: {CFG_FILE} cannot be read ({type(exc).__name__})") from None
    if not isinstance(cfg, dict):
        raise DictionaryError(f"{label}: {CFG_FILE} must hold a JSON object, got {type(cfg).__name__}")
    meta = cfg.get("metadata") if isinstance(cfg.get("metadata"), dict) else {}
    arch = cfg.get("architecture", meta.get("architecture"))
    arch = ALIASES.get(arch, arch) if isinstance(arch, str) else arch
    if arch not in ARCHITECTURES:
        raise DictionaryError(f"{label}: architecture {str(arch)[:40]!r} is not supported (one of: {', '.join(ARCHITECTURES)})")
    for key in ("normalize_activations", "reshape_activations"):
        value = cfg.get(key, "none")
        if value not in ("none", None):
            raise DictionaryError(f"{label}: {key}={str(value)[:40]!r} is not supported (only 'none')")
    hook = cfg.get("hook_name", meta.get("hook_name"))
    hook_out = cfg.get("hook_name_out", meta.get("hook_name_out")) or None
    for key, value in (("hook_name", hook), ("hook_name_out", hook_out)):
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 200):
            raise DictionaryError(f"{label}: {key} must be a hook name (a short string), got {str(value)[:40]!r}")
    if hook is None:
        raise DictionaryError(f"{label}: {CFG_FILE} has no hook_name")
    d_in, d_sae = _int(cfg, "d_in", label), _int(cfg, "d_sae", label)
    d_out = _int(cfg, "d_out", label) if hook_out is not None else d_in
    if hook_out is None and "d_out" in cfg and cfg["d_out"] != d_in:
        raise DictionaryError(f"{label}: an SAE (no hook_name_out) must have d_out == d_in, got {cfg['d_out']!r} and {d_in}")
    k = None
    if arch == "topk":
        k = cfg.get("k")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= d_sae:
            raise DictionaryError(f"{label}: a topk dictionary needs an integer k in [1, d_sae={d_sae}], got {k!r}")
    apply = cfg.get("apply_b_dec_to_input", True)
    if not isinstance(apply, bool):
        raise DictionaryError(f"{label}: apply_b_dec_to_input must be true or false, got {apply!r}")
    checked = {"architecture": arch, "d_in": d_in, "d_sae": d_sae, "d_out": d_out, "hook_name": hook,
               "hook_name_out": hook_out, "k": k, "apply_b_dec_to_input": apply}
    need = load_bytes(checked)
    if need > max_model_bytes():
        raise DictionaryError(f"{label}: loading its weights needs {need / 2**20:,.0f} MB, above the "
                              f"{max_model_bytes() / 2**20:,.0f} MB cap (VIZ_MAX_MODEL_MB)")
    return checked


def load_bytes(cfg: dict) -> int:
    """Peak memory of :func:`load_dictionary` for ``cfg`` (from :func:`read_cfg`), in bytes, from the cfg alone::

        4 N + 5 M

    ``N`` = the dictionary's parameters (``d_sae (d_in + d_out + 2) + d_out``, held as float32), ``M`` = the largest
    tensor's elements: one tensor is read at a time (at most 4 bytes an element) with its finiteness mask (1 byte).
    """
    shapes = expected_shapes({**cfg, "architecture": "jumprelu"})  # the threshold counted for every architecture
    return 4 * sum(math.prod(s) for s in shapes.values()) + 5 * max(math.prod(s) for s in shapes.values())


def expected_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """The tensors a dictionary of ``cfg`` (from :func:`read_cfg`) must have, name -> shape."""
    shapes = {"W_enc": (cfg["d_in"], cfg["d_sae"]), "b_enc": (cfg["d_sae"],),
              "W_dec": (cfg["d_sae"], cfg["d_out"]), "b_dec": (cfg["d_out"],)}
    if cfg["architecture"] == "jumprelu":
        shapes["threshold"] = (cfg["d_sae"],)
    return shapes


def load_dictionary(folder: str | Path, dtype: torch.dtype = torch.float32) -> SparseDictionary:
    """A dictionary folder in SAELens's layout (module docstring) as a :class:`SparseDictionary` in eval mode,
    its weights converted to ``dtype`` (float32 by default: a float16 file is computed in float32).

    Raises:
        DictionaryError: any problem, in one line (missing files, bad cfg, foreign or missing or extra tensors,
            wrong shapes or dtypes, NaN/inf, a size above the cap), found before the weights are allocated
            (except the NaN/inf check, which reads each tensor).
    """
    folder = Path(folder)
    label = folder.name or str(folder)
    cfg = read_cfg(folder)
    path = folder / WEIGHTS_FILE
    if not path.is_file():
        raise DictionaryError(f"{label}: no {WEIGHTS_FILE}")
    shapes = expected_shapes(cfg)
    try:
        with safe_open(str(path), framework="pt") as f:
            names = set(f.keys())
            missing, extra = sorted(set(shapes) - names), sorted(names - set(shapes))
            if missing:
                raise DictionaryError(f"{label}: {WEIGHTS_FILE} lacks {', '.join(missing)}")
            if extra:
                raise DictionaryError(f"{label}: {WEIGHTS_FILE} has unexpected tensors {', '.join(extra)[:120]}")
            for name, shape in shapes.items():
                part = f.get_slice(name)
                if part.get_dtype() not in DTYPES:
                    raise DictionaryError(f"{label}: {name} has dtype {part.get_dtype()} (float32, float16 or bfloat16 expected)")
                got = tuple(int(s) for s in part.get_shape())
                if got != shape:
                    raise DictionaryError(f"{label}: {name} has shape {list(got)}, cfg.json implies {list(shape)}")
            d = SparseDictionary(cfg["d_in"], cfg["d_sae"], cfg["hook_name"], cfg["architecture"], cfg["k"],
                                 cfg["hook_name_out"], cfg["d_out"], cfg["apply_b_dec_to_input"], dtype=dtype, empty=True)
            with torch.no_grad():
                for name in shapes:
                    t = f.get_tensor(name)
                    if not torch.isfinite(t).all():
                        raise DictionaryError(f"{label}: {name} holds NaN or infinite values")
                    getattr(d, name).copy_(t)
    except DictionaryError:
        raise
    except BaseException as exc:  # safetensors raises its own types (and pyo3 panics) for corrupt files
        reraise_interrupts(exc)
        raise DictionaryError(f"{label}: {WEIGHTS_FILE} cannot be read ({first_line(exc)})") from None
    if cfg["architecture"] == "jumprelu" and (d.threshold < 0).any():
        raise DictionaryError(f"{label}: threshold holds negative values")
    d.eval()
    d.requires_grad_(False)
    return d


def dictionary_cfg(d: SparseDictionary, **extra) -> dict:
    """The ``cfg.json`` object of ``d`` (SAELens keys; ``extra`` keys are added, e.g. ``model_name``)."""
    cfg = {"architecture": d.architecture, "d_in": d.d_in, "d_sae": d.d_sae, "hook_name": d.hook_name,
           "apply_b_dec_to_input": d.apply_b_dec_to_input, "normalize_activations": "none",
           "dtype": str(d.W_enc.dtype).removeprefix("torch.")}
    if d.k is not None:
        cfg["k"] = d.k
    if d.hook_name_out is not None:
        cfg.update(hook_name_out=d.hook_name_out, d_out=d.d_out)
    cfg.update(extra)
    return cfg


def save_dictionary(d: SparseDictionary, folder: str | Path, dtype: torch.dtype | None = None, **extra) -> Path:
    """Write ``d`` to ``folder`` (created) in SAELens's layout; ``dtype`` (e.g. ``torch.float16``) converts the
    tensors, None keeps theirs. ``extra`` keys go into ``cfg.json``. Returns the folder.

    Raises:
        ValueError: a dictionary with NaN or infinite weights (or that overflow ``dtype``).
    """
    folder = Path(folder)
    tensors = {}
    for name in expected_shapes({"architecture": d.architecture, "d_in": d.d_in, "d_sae": d.d_sae, "d_out": d.d_out}):
        t = getattr(d, name).detach().to("cpu", dtype or getattr(d, name).dtype).contiguous()
        if not torch.isfinite(t).all():
            raise ValueError(f"{name} holds NaN or infinite values (in {t.dtype})")
        tensors[name] = t
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / WEIGHTS_FILE))
    cfg = dictionary_cfg(d, **extra)
    cfg["dtype"] = str(tensors["W_enc"].dtype).removeprefix("torch.")
    (folder / CFG_FILE).write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    return folder


def shipped_dictionaries(model_name: str, root: str | Path = SHIPPED) -> dict[str, Path]:
    """``{hook name: folder}`` of the dictionaries shipped for ``model_name`` (e.g. ``"tinystories-6l"``, the stem of
    the model's file) under ``assets/dictionaries/<model name>/``, ordered by layer; empty when there are none."""
    base = Path(root) / model_name
    if not base.is_dir() or model_name in ("", ".", "..") or "/" in model_name:
        return {}
    found = {p.name: p for p in base.iterdir() if (p / CFG_FILE).is_file()}
    def layer(name: str) -> tuple[int, str]:
        parts = name.split(".")
        return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1, name)
    return {name: found[name] for name in sorted(found, key=layer)}


def weights_bytes(folder: str | Path) -> int:
    """Bytes of a dictionary folder's weights file (0 when absent)."""
    path = Path(folder) / WEIGHTS_FILE
    return path.stat().st_size if path.is_file() else 0


__all__ = ["DictionaryError", "dictionary_cfg", "expected_shapes", "load_bytes", "load_dictionary", "read_cfg",
           "save_dictionary", "shipped_dictionaries", "weights_bytes"]
