"""Training timelines: the checkpoints of one training run, read and written as a folder.

A timeline is a folder (or a ``.zip`` of one) in either of two layouts:

- ``timeline.json`` beside the snapshots::

      {"format": "viz-timeline", "version": 1,
       "steps": [0, 1, 2, 5, ...],                      # optimiser steps done, strictly increasing
       "snapshots": ["step_000000.safetensors", ...],   # one per step, relative to the folder
       "train_loss": [6.3, ...], "valid_loss": [...],   # nats/token per snapshot, or null / absent
       "scores": {"induction": [[[...n_heads] ...n_layers] ...snapshots], ...},   # optional, each in [0, 1]
       ...}                                             # other keys (recipe, notes) are kept, never executed

  Each snapshot is anything :func:`viz_model.load_model` reads (a native ``.safetensors`` file, a Hugging Face
  folder, a nanoGPT ``ckpt.pt``).
- no ``timeline.json``: checkpoints whose names carry the step, e.g. ``step-1000``, ``step_001000.safetensors``,
  ``checkpoint-step1000.safetensors`` (files or folders); no losses are known then.

A folder is untrusted input, as an upload is: every field's type, length and range is checked, snapshot
paths must stay inside the folder (no absolute paths, no ``..``, no link that leads out), and every problem
is one :class:`viz_model.CheckpointError` line (a ``ValueError``), never a traceback.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import torch
from tokenizers import Tokenizer

from viz_model.loading.checkpoint import first_line
from viz_model.head_scores import REPEATED_SCORES, repeated_scores
from viz_model.limits import count_params, estimate_bytes, max_model_bytes
from viz_model.model import VizTransformer
from viz_model.loading.sources import MAX_UPLOAD_MB, _guard, _read_json, _safe_unzip, load_model, private_dir
from viz_model.loading.weights import CheckpointError

Progress = Callable[[float, str], None]
TIMELINE_FILE = "timeline.json"
FORMAT, VERSION = "viz-timeline", 1
MAX_SNAPSHOTS = 240  # a zip may hold 256 entries (viz_model.loading.sources.MAX_MEMBERS): the snapshots, the json, a card
MAX_STEP = 10**12
MAX_JSON_BYTES = 4 * 2**20  # timeline.json: the shipped one, scores included, is under 100 KB
MAX_SCORE_KINDS = 8
STEP_NAME = re.compile(r"(?:^|[^A-Za-z0-9])step[-_]?(\d{1,13})(?:\.(?:safetensors|pt|pth|bin))?$", re.IGNORECASE)
PHASE_RISE = 0.3  # the best induction score must rise at least this much for a phase change to be named


def _quiet(fraction: float, message: str) -> None:
    pass


@dataclass
class Timeline:
    """A timeline's index (no weights loaded): ``snapshots[i]`` is the checkpoint after ``steps[i]`` steps."""

    name: str  # the folder's (or archive's) name, for messages and the page
    folder: Path
    steps: list[int]
    snapshots: list[Path]  # inside ``folder``
    train_loss: list[float] | None = None  # nats/token per snapshot
    valid_loss: list[float] | None = None
    scores: dict[str, list] = field(default_factory=dict)  # kind -> [snapshot][layer][head]
    info: dict = field(default_factory=dict)  # every other key of timeline.json (recipe, notes), as read

    def __len__(self) -> int:
        return len(self.steps)


@dataclass
class LoadedTimeline:
    """A timeline with every snapshot loaded (float32, eval mode)."""

    timeline: Timeline
    models: list[VizTransformer]
    tokenizer: Tokenizer | None  # the first snapshot's (None when the checkpoints carry none)


# ----------------------------------------------------------------------------------------------- schedule


def log_spaced_steps(total: int, n: int) -> list[int]:
    """At least ``n`` distinct steps from 0 (initialisation) to ``total``, log-spaced: ``0`` then
    ``round(total ** (j / (k - 1)))`` for ``j = 0 .. k - 1``, with ``k`` the smallest count that gives ``n``
    distinct steps (early steps coincide after rounding). Dense where training changes fastest, sparse later.

    Raises:
        ValueError: when ``total < 1`` or ``n > total + 1`` (there are not that many steps).
    """
    if total < 1 or n > total + 1:
        raise ValueError(f"cannot pick {n} distinct steps out of 0..{total}")
    k = max(2, n - 1)
    while True:
        steps = sorted({0, total, *(round(total ** (j / (k - 1))) for j in range(k))})
        if len(steps) >= n:
            return steps
        k += 1


def phase_change(steps: Sequence[int], values: Sequence[float], rise: float = PHASE_RISE) -> tuple[int, int] | None:
    """Where a score jumps: the first step whose value reaches the midpoint between the first value and the
    largest one, as ``(previous step, that step)``; None when the largest value is less than ``rise`` above the
    first (no clear jump). ``values``: e.g. the best induction score of each snapshot."""
    if len(values) < 2:
        return None
    top = max(values)
    if top - values[0] < rise:
        return None
    middle = (values[0] + top) / 2
    i = next(i for i, v in enumerate(values) if v >= middle)
    return steps[max(0, i - 1)], steps[i]


# ----------------------------------------------------------------------------------------------- reading


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (isinstance(v, float) or _is_int(v)) and math.isfinite(v)


def _inside(folder: Path, rel: object, where: str, label: str) -> Path:
    """``folder / rel`` when ``rel`` is a plain relative path that stays inside ``folder`` (links resolved)."""
    if not isinstance(rel, str) or not rel or len(rel) > 300 or "\x00" in rel:
        raise CheckpointError(f"{label}: {where} must be a file name (a non-empty string of up to 300 characters)")
    p = PurePosixPath(rel.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or re.match(r"^[A-Za-z]:", rel):
        raise CheckpointError(f"{label}: {where} {rel[:80]!r} leaves the timeline's folder (absolute or with ..)")
    path = folder.joinpath(*p.parts)
    try:
        inside = path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a loop of links
        inside = False
    if not inside:
        raise CheckpointError(f"{label}: {where} {rel[:80]!r} leads out of the timeline's folder (a link)")
    if not path.exists():
        raise CheckpointError(f"{label}: {where} {rel[:80]!r} does not exist in the folder")
    return path


def _losses(value, n: int, key: str, label: str) -> list[float] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != n or not all(_is_number(v) for v in value):
        raise CheckpointError(f"{label}: {TIMELINE_FILE}: {key} must be null or a list of {n} finite numbers "
                              "(one per snapshot)")
    return [float(v) for v in value]


def _scores(value, n: int, label: str) -> dict[str, list]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_SCORE_KINDS:
        raise CheckpointError(f"{label}: {TIMELINE_FILE}: scores must be an object of at most {MAX_SCORE_KINDS} kinds")
    out = {}
    for kind, per_step in value.items():
        if not re.fullmatch(r"[A-Za-z0-9 _.-]{1,40}", kind):
            raise CheckpointError(f"{label}: {TIMELINE_FILE}: score names are short plain words ({kind[:40]!r})")
        ok = isinstance(per_step, list) and len(per_step) == n and all(
            isinstance(layers, list) and layers and all(isinstance(h, list) and h and all(
                _is_number(x) and 0 <= x <= 1 for x in h) for h in layers) for layers in per_step)
        shapes = {(len(layers), len(layers[0])) for layers in per_step} if ok else set()
        if not ok or len(shapes) != 1 or any(len(h) != len(layers[0]) for layers in per_step for h in layers):
            raise CheckpointError(f"{label}: {TIMELINE_FILE}: scores[{kind!r}] must hold, for each of the {n} "
                                  "snapshots, the same [layer][head] table of numbers in [0, 1]")
        out[kind] = per_step
    return out


def _from_json(folder: Path, label: str) -> Timeline:
    data = _read_json(folder / TIMELINE_FILE, label, MAX_JSON_BYTES)
    if not isinstance(data, dict):
        raise CheckpointError(f"{label}: {TIMELINE_FILE} must hold a JSON object")
    if data.get("format", FORMAT) != FORMAT:
        raise CheckpointError(f"{label}: {TIMELINE_FILE} is not a {FORMAT} file (format {str(data['format'])[:40]!r})")
    steps, snaps = data.get("steps"), data.get("snapshots")
    if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_SNAPSHOTS:
        raise CheckpointError(f"{label}: {TIMELINE_FILE}: steps must be a list of 1 to {MAX_SNAPSHOTS} integers")
    if not all(_is_int(s) and 0 <= s <= MAX_STEP for s in steps):
        raise CheckpointError(f"{label}: {TIMELINE_FILE}: steps must be integers from 0 to {MAX_STEP:,}")
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise CheckpointError(f"{label}: {TIMELINE_FILE}: steps must be strictly increasing")
    if not isinstance(snaps, list) or len(snaps) != len(steps):
        raise CheckpointError(f"{label}: {TIMELINE_FILE}: snapshots must be a list of {len(steps)} file names, one per "
                              f"step (got {len(snaps) if isinstance(snaps, list) else type(snaps).__name__})")
    paths = [_inside(folder, s, f"snapshot {i}", label) for i, s in enumerate(snaps)]
    if len({p.resolve() for p in paths}) != len(paths):
        raise CheckpointError(f"{label}: {TIMELINE_FILE}: a snapshot is listed twice")
    n = len(steps)
    info = {k: v for k, v in data.items() if k not in ("steps", "snapshots", "train_loss", "valid_loss", "scores")}
    return Timeline(label, folder, list(steps), paths, _losses(data.get("train_loss"), n, "train_loss", label),
                    _losses(data.get("valid_loss"), n, "valid_loss", label), _scores(data.get("scores"), n, label), info)


def _from_step_names(folder: Path, label: str) -> Timeline:
    found: dict[int, Path] = {}
    for entry in sorted(folder.iterdir()):
        match = STEP_NAME.search(entry.name)
        if not match or entry.is_symlink():
            continue
        step = int(match.group(1))
        if step > MAX_STEP:
            raise CheckpointError(f"{label}: {entry.name[:80]} names a step above {MAX_STEP:,}")
        if step in found:
            raise CheckpointError(f"{label}: two checkpoints for step {step} ({found[step].name[:60]}, {entry.name[:60]})")
        found[step] = entry
    if not found:
        raise CheckpointError(f"{label}: no {TIMELINE_FILE} and no checkpoints whose names carry the step "
                              "(e.g. step-1000, step_001000.safetensors)")
    if len(found) > MAX_SNAPSHOTS:
        raise CheckpointError(f"{label}: {len(found)} checkpoints, above the {MAX_SNAPSHOTS} a timeline may have")
    steps = sorted(found)
    return Timeline(label, folder, steps, [found[s] for s in steps])


def read_timeline(folder: str | Path, label: str | None = None) -> Timeline:
    """The index of the timeline in ``folder`` (``timeline.json``, or step-named checkpoints); no weights are read.

    Raises:
        CheckpointError: one line: not a folder; ``timeline.json`` too large, not JSON, or with a field of the
            wrong type or length (steps not strictly increasing integers, a snapshot path outside the folder or
            missing, losses or scores not one per snapshot); no ``timeline.json`` and no step-named checkpoint.
    """
    folder = Path(folder)
    label = label or folder.name or str(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{label}: no such folder (a timeline is a folder, or a .zip of one)")
    if (folder / TIMELINE_FILE).is_file():
        return _from_json(folder, label)
    return _from_step_names(folder, label)


def write_timeline(folder: str | Path, steps: Sequence[int], snapshots: Sequence[str],
                   train_loss: Sequence[float] | None = None, valid_loss: Sequence[float] | None = None,
                   scores: dict[str, Sequence] | None = None, **info) -> Path:
    """Write ``folder/timeline.json`` (the snapshots must already be there) and return its path; it is read back
    with :func:`read_timeline`, so a timeline that would be refused is never written. ``scores``: kind ->
    ``[snapshot][layer][head]`` (tensors or nested lists); ``info``: further JSON values (recipe, notes).

    Raises:
        CheckpointError: as :func:`read_timeline` (the file is removed again then).
    """
    folder = Path(folder)
    data = {"format": FORMAT, "version": VERSION, **info, "steps": [int(s) for s in steps],
            "snapshots": [str(s) for s in snapshots],
            "train_loss": None if train_loss is None else [round(float(x), 5) for x in train_loss],
            "valid_loss": None if valid_loss is None else [round(float(x), 5) for x in valid_loss],
            "scores": {k: torch.as_tensor(v).round(decimals=5).tolist() for k, v in (scores or {}).items()}}
    path = folder / TIMELINE_FILE
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    try:
        read_timeline(folder)
    except CheckpointError:
        path.unlink()
        raise
    return path


# ----------------------------------------------------------------------------------------------- loading


def load_snapshots(timeline: Timeline, progress: Progress = _quiet) -> LoadedTimeline:
    """Every snapshot of ``timeline`` loaded with :func:`viz_model.load_model` (float32, eval mode).

    Raises:
        CheckpointError: a snapshot that cannot be loaded (named, with its step); snapshots of different shapes
            (layers, heads, vocabulary, context); all of them together above the memory cap (``VIZ_MAX_MODEL_MB``:
            the parameters of every snapshot plus one forward pass).
    """
    models: list[VizTransformer] = []
    tokenizer = None
    n = len(timeline)
    for i, (step, path) in enumerate(zip(timeline.steps, timeline.snapshots)):
        progress(i / n, f"Loading step {step:,} ({i + 1} of {n})")
        try:
            model, tok = load_model(path)
        except CheckpointError as exc:
            raise CheckpointError(f"{timeline.name}: the snapshot of step {step:,} cannot be loaded: {exc}") from None
        cfg = model.cfg
        if cfg.is_encoder_decoder:
            raise CheckpointError(f"{timeline.name}: the snapshot of step {step:,} is an encoder-decoder; timelines show "
                                  "decoder-only and encoder models")
        if i == 0:
            need = estimate_bytes(cfg) + (n - 1) * 4 * count_params(cfg)
            if need > max_model_bytes():
                raise CheckpointError(f"{timeline.name}: {n} snapshots of {count_params(cfg):,} parameters would need "
                                      f"about {need / 2**20:,.0f} MB of memory, above this server's "
                                      f"{max_model_bytes() / 2**20:,.0f} MB cap (VIZ_MAX_MODEL_MB)")
            tokenizer = tok
        else:
            first = models[0].cfg
            shape = ("n_layers", "n_heads", "d_vocab", "n_ctx", "n_encoder_layers")
            if any(getattr(cfg, k) != getattr(first, k) for k in shape):
                raise CheckpointError(f"{timeline.name}: the snapshot of step {step:,} has another shape than the first "
                                      f"({', '.join(f'{k} {getattr(cfg, k)}' for k in shape[:4])})")
        models.append(model)
    progress(1.0, "Loaded")
    return LoadedTimeline(timeline, models, tokenizer)


def load_timeline(source: str | Path, progress: Progress = _quiet, label: str | None = None,
                  max_mb: int = MAX_UPLOAD_MB) -> LoadedTimeline:
    """Read and load a timeline: a folder, or a ``.zip`` of one (unpacked with the upload checks of
    :mod:`viz_model.loading.sources` into a private temporary folder that is removed before this returns).

    Raises:
        CheckpointError: one line for anything wrong with the folder, the archive, the index or a snapshot.
    """
    path = Path(source)
    label = label or path.name or str(path)

    def load() -> LoadedTimeline:
        if path.suffix.lower() == ".zip" and path.is_file():
            with private_dir("timeline") as tmp:
                progress(0.0, "Unpacking the archive")
                _safe_unzip(path, tmp, label, max_mb * 2**20)
                return load_snapshots(read_timeline(tmp, label), progress)
        return load_snapshots(read_timeline(path, label), progress)

    return _guard(label, load)


def load_timeline_upload(name: str, data: bytes, progress: Progress = _quiet,
                         max_mb: int = MAX_UPLOAD_MB) -> LoadedTimeline:
    """A timeline uploaded as a ``.zip`` (its bytes), loaded as :func:`load_timeline` does; the bytes live in a
    private temporary folder only while this runs.

    Raises:
        CheckpointError: not a ``.zip``, above ``max_mb`` MB, or as :func:`load_timeline`.
    """
    label = PurePosixPath(str(name).replace("\\", "/")).name[:120] or "upload.zip"
    if not label.lower().endswith(".zip"):
        raise CheckpointError(f"{label}: upload a timeline as a .zip of its folder")
    if len(data) > max_mb * 2**20:
        raise CheckpointError(f"{label} is {len(data) / 2**20:.0f} MB, above the {max_mb} MB cap")
    try:
        with private_dir("upload") as tmp:
            path = tmp / "timeline.zip"
            path.write_bytes(data)
            return load_timeline(path, progress, label, max_mb)
    except CheckpointError:
        raise
    except OSError as exc:
        raise CheckpointError(f"{label} cannot be stored for reading ({first_line(exc)})") from None


# ----------------------------------------------------------------------------------------------- scores


@torch.no_grad()
def snapshot_scores(models: Sequence[VizTransformer], length: int | None = None,
                    seed: int = 0) -> dict[str, torch.Tensor]:
    """:func:`viz_model.head_scores.repeated_scores` of every snapshot: kind -> ``[n_snapshots, n_layers,
    n_heads]`` (previous-token, duplicate-token, induction; the same random sequence for every snapshot)."""
    per = [repeated_scores(m, length, seed) for m in models]
    return {k: torch.stack([p[k] for p in per]) for k in REPEATED_SCORES}
