"""Models larger than memory: a model's blocks placed on GPUs, then the CPU, then disk, with accelerate's big-model
inference (https://huggingface.co/docs/accelerate/usage_guides/big_modeling), and the one way to read a placed
module's real weights.

A *device map* names a device for each module: ``0`` or ``"cuda:1"`` (a GPU), ``"cpu"``, or ``"disk"``. ``"auto"`` asks
:func:`accelerate.infer_auto_device_map` for one within ``max_memory`` (bytes per device; unset: the free memory of
every GPU and of the CPU), never splitting a :class:`viz_model.components.Block`. :func:`accelerate.dispatch_model`
then hooks every placed module: its inputs move to its device, and an offloaded block's parameters (``"disk"``;
``"cpu"`` too when a GPU runs the model) are loaded just before its ``forward`` and dropped after it, leaving them on
the ``meta`` device (shape and dtype, no values) between calls (a whole block at a time: ``preload_module_classes``).
Code that reads a weight outside a forward pass goes through :func:`weight` or :func:`module_weights`, which load an
offloaded module's values for the time of the read.

Each load offloads into a new private folder inside ``offload_folder`` (accelerate would reuse an existing
``index.json`` there, i.e. stale weights of another model), removed when the model is garbage-collected.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import os
import re
import shutil
import tempfile
import threading
import warnings
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

NO_SPLIT = ["Block"]  # the unit never split across devices (viz_model.components.Block, encoder blocks too)
MAX_MAP_ENTRIES = 10_000  # a useful map names blocks (512 at most per stack) and a few modules; more is refused
MAX_BYTES = 2**60  # a max_memory above an exbibyte is a typo or hostile
PINNED = ("RelativePositionBias",)  # read by every attention layer outside its own forward (T5): never offloaded


class PlacementError(ValueError):
    """A device map, ``max_memory`` or ``offload_folder`` that cannot be used; one line."""


@dataclass(frozen=True)
class Placement:
    """Where a model's modules go: ``device_map`` ``"auto"`` or ``{module name: device}`` (device ``int`` GPU index,
    ``"cpu"`` or ``"disk"``), ``max_memory`` ``{device: bytes}`` for ``"auto"`` (None: what is free), and the folder
    that receives disk-offloaded weights (None: no disk offload allowed)."""

    device_map: str | dict[str, int | str]
    max_memory: dict[int | str, int] | None = None
    offload_folder: Path | None = None


_CURRENT: contextvars.ContextVar[Placement | None] = contextvars.ContextVar("viz_placement", default=None)


@contextlib.contextmanager
def placing(placement: Placement | None) -> Iterator[None]:
    """Within this block the model being loaded is placed by ``placement`` (read by
    :func:`viz_model.loading.weights.check_config` for the memory check and by :func:`viz_model.loading.weights.build_model`)."""
    token = _CURRENT.set(placement)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_placement() -> Placement | None:
    """The placement of the load in progress (None: the whole model on one device)."""
    return _CURRENT.get()


# ----------------------------------------------------------------------------------------------- parsing


def _gpu(index: int, text: object) -> int:
    count = torch.cuda.device_count()
    if not 0 <= index < count:
        raise PlacementError(f"device {str(text)[:40]!r}: no such GPU (torch sees {count})")
    return index


def parse_device(value: object) -> int | str:
    """``"cpu"``, ``"disk"``, or a GPU index from ``0``, ``"0"``, ``"cuda"`` or ``"cuda:1"``.

    Raises:
        PlacementError: anything else, or a GPU this machine does not have.
    """
    if isinstance(value, bool):
        raise PlacementError(f"device {value!r} is not a device (cpu, disk, or a GPU index)")
    if isinstance(value, int):
        return _gpu(value, value)
    if isinstance(value, torch.device):
        value = str(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("cpu", "disk"):
            return text
        match = re.fullmatch(r"(?:cuda(?::(\d{1,3}))?|(\d{1,3}))", text)
        if match:
            return _gpu(int(match.group(1) or match.group(2) or 0), value)
    raise PlacementError(f"device {str(value)[:40]!r} is not a device (cpu, disk, or a GPU index such as 0 or cuda:1)")


def parse_size(value: object, key: object) -> int:
    """Bytes from an int or a string such as ``"2GB"``, ``"500MiB"`` (accelerate's ``convert_file_size_to_int``).

    Raises:
        PlacementError: not a size, negative, or above 2^60 bytes.
    """
    from accelerate.utils import convert_file_size_to_int

    where = f"max_memory[{str(key)[:20]}]: {str(value)[:40]!r}"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise PlacementError(f"{where} is not a size (bytes, or e.g. '2GB')")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise PlacementError(f"{where} is not a whole number of bytes")
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("-"):
            raise PlacementError(f"{where} is negative")
        try:
            size = int(text) if text.isdigit() else convert_file_size_to_int(text)
        except (ValueError, TypeError, OverflowError):
            raise PlacementError(f"{where} is not a size (bytes, or e.g. '2GB', '500MiB')") from None
    else:
        size = int(value)
    if size < 0:
        raise PlacementError(f"{where} is negative")
    if size > MAX_BYTES:
        raise PlacementError(f"{where} is more than 2^60 bytes")
    return size


def parse_max_memory(value: object) -> dict[int | str, int] | None:
    """``{device: bytes}`` from a dict (``{"cpu": "2GB", 0: "20GiB"}``) or its text form ``"cpu=2GB,0=20GiB"``
    (the command line's); None stays None. Devices as :func:`parse_device` (``"disk"`` is not a memory).

    Raises:
        PlacementError: one line naming the bad entry.
    """
    if value is None:
        return None
    if isinstance(value, str):
        pairs = [part.split("=", 1) for part in value.split(",") if part.strip()]
        if not pairs or any(len(p) != 2 for p in pairs):
            raise PlacementError(f"max_memory {value[:60]!r} is not of the form cpu=2GB,0=20GiB")
        value = {k.strip(): v.strip() for k, v in pairs}
    if not isinstance(value, Mapping) or len(value) > 64:
        raise PlacementError("max_memory must map devices to sizes, e.g. {'cpu': '2GB', 0: '20GiB'}")
    out: dict[int | str, int] = {}
    for key, size in value.items():
        device = parse_device(key)
        if device == "disk":
            raise PlacementError("max_memory: disk has no memory limit (give offload_folder instead)")
        out[device] = parse_size(size, key)
    return out


def parse_placement(device_map: object = None, max_memory: object = None,
                    offload_folder: str | Path | None = None) -> Placement | None:
    """A :class:`Placement` from :func:`viz_model.load_model`'s arguments; None when all three are None (the whole
    model on one device). ``max_memory`` or ``offload_folder`` without ``device_map`` mean ``device_map="auto"``.
    A dict device map's devices are checked here, its module names once the model exists (:func:`plan`);
    ``offload_folder`` must be a writable folder (it is created when missing).

    Raises:
        PlacementError: one line naming the bad value.
    """
    if device_map is None and max_memory is None and offload_folder is None:
        return None
    device_map = "auto" if device_map is None else device_map
    if isinstance(device_map, str):
        if device_map.strip().lower() != "auto":
            raise PlacementError(f"device_map {device_map[:40]!r} is not 'auto' or a {{module: device}} dict")
        device_map = "auto"
    elif isinstance(device_map, Mapping):
        if not device_map or len(device_map) > MAX_MAP_ENTRIES:
            raise PlacementError(f"device_map must name between 1 and {MAX_MAP_ENTRIES:,} modules")
        if not all(isinstance(k, str) for k in device_map):
            raise PlacementError("device_map's keys must be module names (strings)")
        device_map = {k: parse_device(v) for k, v in device_map.items()}
    else:
        raise PlacementError(f"device_map must be 'auto' or a {{module: device}} dict, not {type(device_map).__name__}")
    memory = parse_max_memory(max_memory)
    folder = None
    if offload_folder is not None:
        if not isinstance(offload_folder, (str, os.PathLike)) or not str(offload_folder).strip():
            raise PlacementError(f"offload_folder must be a folder's path, not {str(offload_folder)[:40]!r}")
        folder = Path(offload_folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PlacementError(f"offload_folder {str(offload_folder)[:80]} cannot be made ({type(exc).__name__})") from None
        if not folder.is_dir():
            raise PlacementError(f"offload_folder {str(offload_folder)[:80]} is not a folder")
    return Placement(device_map, memory, folder)


# ------------------------------------------------------------------------------------------ device maps


def _entry(device_map: Mapping[str, int | str], name: str) -> tuple[str, int | str | None]:
    """The entry of ``device_map`` that places parameter or module ``name``: its longest prefix (``""`` covers
    everything): ``(key, device)``, or ``("", None)`` when none does."""
    parts = name.split(".")
    for n in range(len(parts), -1, -1):
        key = ".".join(parts[:n])
        if key in device_map:
            return key, device_map[key]
    return "", None


def _device_of(device_map: Mapping[str, int | str], name: str) -> int | str | None:
    return _entry(device_map, name)[1]


def main_device(device_map: Mapping[str, int | str]) -> int | str:
    """Where a dispatched model computes (accelerate's rule): the first GPU of the map, else ``"cpu"``."""
    gpus = [d for d in device_map.values() if d not in ("cpu", "disk")]
    return gpus[0] if gpus else "cpu"


def _offloaded(device: int | str, main: int | str) -> bool:
    return device == "disk" or (device == "cpu" and main != "cpu")


def plan(model: nn.Module, placement: Placement) -> dict[str, int | str]:
    """The device map for ``model`` (its real or ``meta`` parameters: only sizes are read): ``"auto"`` by
    :func:`accelerate.infer_auto_device_map` (``no_split_module_classes=["Block"]``, GPUs first, then CPU, then
    disk), else the given map, checked. T5's relative position bias (read by every attention layer outside its own
    forward) always stays on the main device.

    Raises:
        PlacementError: a module name the model does not have, a map that leaves parameters without a device, or
            ``"disk"`` without ``offload_folder``.
    """
    from accelerate import infer_auto_device_map
    from accelerate.utils import check_device_map
    from accelerate.utils.modeling import clean_device_map

    if placement.device_map == "auto":
        memory = dict(placement.max_memory) if placement.max_memory is not None else None
        device_map = dict(infer_auto_device_map(model, max_memory=memory, no_split_module_classes=NO_SPLIT,
                                                clean_result=False))
    else:
        device_map = dict(placement.device_map)
        names = {name for name, _ in model.named_modules()} | {name for name, _ in model.named_parameters()}
        unknown = [k for k in device_map if k not in names]
        if unknown:
            raise PlacementError(f"device_map names {unknown[0][:60]!r}, which is no module of this model "
                                 f"(e.g. embed, blocks.0, ln_final)")
        try:
            with warnings.catch_warnings():  # keys naming parameters (W_U), which accelerate handles, are warned about
                warnings.simplefilter("ignore")
                check_device_map(model, device_map)
        except ValueError as exc:
            missing = str(exc).split(":", 1)[-1].split(",")[0].strip()
            raise PlacementError(f"device_map gives no device for {missing[:60]} (name every module, or '' for "
                                 "the rest)") from None
    main = main_device(device_map)
    for name, module in model.named_modules():
        if type(module).__name__ in PINNED and _offloaded(_device_of(device_map, name), main):
            _split_to(model, device_map, name)
            for key in [k for k in device_map if k == name or k.startswith(name + ".")]:
                device_map[key] = main
    device_map = dict(clean_device_map(device_map)) if placement.device_map == "auto" else device_map
    if device_map.get("") == "disk":  # accelerate offloads named modules: the whole model is named child by child;
        # the root's own parameters (W_U, b_U) stay on the main device whatever the map says (accelerate's root hook)
        device_map = {**{name: "cpu" for name, _ in model.named_parameters(recurse=False)},
                      **{name: "disk" for name, _ in model.named_children()}}
    if "disk" in device_map.values() and placement.offload_folder is None:
        raise PlacementError("the model does not fit in max_memory and some blocks would go to disk, but no "
                             "offload_folder was given" if placement.device_map == "auto" else
                             "device_map puts modules on disk but no offload_folder was given")
    return device_map


def _split_to(model: nn.Module, device_map: dict[str, int | str], name: str) -> None:
    """Replace the entry that covers module ``name`` by entries for its children (and own parameters), on the same
    device, down to ``name`` itself, so that ``name`` can be given a device of its own."""
    while name not in device_map:
        key, device = _entry(device_map, name)
        parent = model.get_submodule(key) if key else model
        del device_map[key]
        prefix = f"{key}." if key else ""
        for child, _ in parent.named_children():
            device_map[prefix + child] = device
        for leaf, _ in parent.named_parameters(recurse=False):
            device_map[prefix + leaf] = device


def resident_bytes(model: nn.Module, device_map: Mapping[str, int | str]) -> int:
    """Bytes of ``model``'s parameters in this machine's memory once dispatched by ``device_map``: those on the CPU
    (also offloaded ones when a GPU computes: accelerate keeps them in CPU memory), the root module's own parameters
    when the CPU computes (accelerate leaves them on the main device), and the largest disk-offloaded module's,
    loaded while it runs. GPU and disk bytes are not counted."""
    main = main_device(device_map)
    resident, on_disk = 0, {}
    for name, p in model.named_parameters():
        nbytes = p.numel() * p.element_size()
        device = main if "." not in name else _device_of(device_map, name)
        if device == "cpu":
            resident += nbytes
        elif device == "disk":  # loaded a block at a time (dispatch), other modules one at a time
            block = re.match(r"((?:encoder\.)?blocks\.\d+)\.", name)
            unit = block.group(1) if block else name.rpartition(".")[0]
            on_disk[unit] = on_disk.get(unit, 0) + nbytes
    return resident + max(on_disk.values(), default=0)


def dispatch(model: nn.Module, placement: Placement, device_map: Mapping[str, int | str]) -> nn.Module:
    """``model`` (real weights on the CPU) dispatched by ``device_map`` with :func:`accelerate.dispatch_model`;
    disk-offloaded weights go to a new private folder in ``placement.offload_folder``, removed with the model.
    Attention modules whose weights are offloaded are told not to keep a fused copy (``keep_fused = False``).
    Returns ``model`` (``model.hf_device_map`` holds the map)."""
    from accelerate import dispatch_model

    folder = None
    if "disk" in device_map.values():
        try:
            folder = tempfile.mkdtemp(prefix="viz-offload-", dir=placement.offload_folder)
        except OSError as exc:
            raise PlacementError(f"no folder can be made in offload_folder ({type(exc).__name__})") from None
        weakref.finalize(model, shutil.rmtree, folder, True)
    log = logging.getLogger("accelerate.big_modeling")
    level = log.level
    log.setLevel(logging.ERROR)  # "Some parameters are on the meta device": what offloading means
    try:
        # a whole offloaded block is loaded at its forward: its mixture of experts calls the experts' hidden() and
        # project(), not their forward, which accelerate's per-module hooks would not see
        with warnings.catch_warnings():  # as in plan
            warnings.simplefilter("ignore")
            dispatch_model(model, dict(device_map), offload_dir=folder, preload_module_classes=NO_SPLIT)
    finally:
        log.setLevel(level)
    for module in model.modules():
        if any(getattr(h, "offload", False) and getattr(h, "place_submodules", False) for h in _hooks(module)):
            for sub in module.modules():  # whose hook loads this module's weights
                object.__setattr__(sub, "_viz_offload_owner", weakref.ref(module))
    lock = _WeightsLock()  # one per model, for every module whose hook loads and unloads weights on the module
    for module in model.modules():
        if any(getattr(h, "offload", False) for h in _hooks(module)):
            object.__setattr__(module, "_viz_weights_lock", lock)
            module.forward = _Locked(module.forward, lock)
    for module in model.modules():
        if hasattr(module, "_fused_qkv") and is_offloaded(module):
            module.keep_fused = False
            module.__dict__.pop("_fused", None)
            module.__dict__.pop("_fused_key", None)
    return model


class _WeightsLock:
    """A re-entrant lock held while an offloaded module's weights are loaded on it (its forward pass, a read by
    :func:`weight`). The app runs every session's script in its own thread on one shared model: accelerate loads an
    offloaded module's weights onto the module before its forward and puts them back on ``meta`` after it, so a second
    thread inside the same module computed with ``meta`` tensors ("Tensor on device meta is not on the expected
    device", tests/test_offload.py). A deep copy of the model gets a lock of its own."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def __enter__(self) -> "_WeightsLock":
        self._lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()

    def __deepcopy__(self, memo) -> "_WeightsLock":
        return _WeightsLock()


class _Locked:
    """An offloaded module's forward (accelerate's, which loads and unloads its weights) run under its model's
    :class:`_WeightsLock`. A callable object rather than a closure, so that a deep copy of the model calls its own
    module's forward under its own lock."""

    def __init__(self, forward, lock: _WeightsLock) -> None:
        self.forward, self.lock = forward, lock

    def __call__(self, *args, **kwargs):
        with self.lock:
            return self.forward(*args, **kwargs)


def _weights_lock(module: nn.Module) -> contextlib.AbstractContextManager:
    """The lock that guards ``module``'s loaded weights (see :class:`_WeightsLock`); a null one if not offloaded."""
    return module.__dict__.get("_viz_weights_lock") or contextlib.nullcontext()


# ------------------------------------------------------------------------------------------ reading weights


def _hooks(module: nn.Module) -> list:
    hook = getattr(module, "_hf_hook", None)
    return [] if hook is None else list(getattr(hook, "hooks", [hook]))


def _owner(module: nn.Module) -> nn.Module:
    """The module whose accelerate hook loads ``module``'s weights: the offloaded block it is part of, or itself."""
    ref = module.__dict__.get("_viz_offload_owner")
    owner = ref() if ref is not None else None
    return module if owner is None else owner


def is_offloaded(module: nn.Module) -> bool:
    """Whether ``module``'s own parameters are offloaded (``meta`` between forward passes)."""
    return any(getattr(h, "offload", False) for h in _hooks(_owner(module)))


def execution_device(module: nn.Module, fallback: torch.Tensor) -> torch.device:
    """The device ``module`` computes on: its accelerate hook's execution device, else ``fallback``'s device (one of
    its weights, for a model that is not dispatched)."""
    for h in _hooks(module):
        device = getattr(h, "execution_device", None)
        if device is not None:
            return torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    return fallback.device


def weight(module: nn.Module, name: str) -> torch.Tensor:
    """The real values of ``module``'s own parameter or buffer ``name`` (e.g. ``weight(block.attn, "W_O")``): the
    parameter itself (gradients flow through it, as through ``module.W_O``), or, when the module is offloaded, a
    detached copy loaded from disk (or CPU) onto its execution device with
    :func:`accelerate.utils.align_module_device` (an offloaded block is loaded whole for the read), which the module
    does not keep. Inside the module's forward the loaded weight itself. None stays None.

    Raises:
        AttributeError: when ``module`` has no attribute ``name``."""
    value = getattr(module, name)
    if not isinstance(value, torch.Tensor):
        return value
    if not value.is_meta or not is_offloaded(module):  # inside the module's forward its weights are loaded already
        return value
    from accelerate.utils import align_module_device

    owner = _owner(module)
    with _weights_lock(owner), align_module_device(owner):
        value = getattr(module, name)
        return value.detach() if isinstance(value, torch.Tensor) else value


def module_weights(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, real values)`` of every parameter of ``module`` and its submodules, as ``named_parameters`` lists
    them: each offloaded submodule's weights are loaded once (:func:`weight`'s way) for all of its own parameters,
    so at most one block's weights are extra in memory at a time, besides the tensors the caller keeps."""
    from accelerate.utils import align_module_device

    for prefix, sub in module.named_modules():
        leaves = list(sub.named_parameters(recurse=False))
        if any(p.is_meta for _, p in leaves) and is_offloaded(sub):
            owner = _owner(sub)
            with _weights_lock(owner), align_module_device(owner):
                leaves = [(leaf, getattr(sub, leaf).detach()) for leaf, _ in leaves]
        for leaf, value in leaves:
            yield (f"{prefix}.{leaf}" if prefix else leaf), value


def describe(model: nn.Module) -> str | None:
    """Where a dispatched model's blocks are, in words (``"6 blocks: 2 on cpu, 4 on disk"``), from
    ``model.hf_device_map``; None for a model that was not placed by a device map."""
    device_map = getattr(model, "hf_device_map", None)
    if not device_map:
        return None
    counts: dict[str, int] = {}
    blocks = [name for name, m in model.named_modules() if type(m).__name__ in NO_SPLIT]
    for name in blocks:
        device = _device_of(device_map, name)
        label = "disk" if device == "disk" else "cpu" if device == "cpu" else f"cuda:{device}"
        counts[label] = counts.get(label, 0) + 1
    parts = ", ".join(f"{n} on {label}" for label, n in counts.items())
    return f"{len(blocks)} blocks: {parts} (accelerate device map)"
