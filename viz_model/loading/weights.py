"""Assemble a :class:`VizTransformer` from a config and a state dict in this project's names, checking
every weight first, so that a bad file gives one clear line instead of a crash or silent garbage.

Order of work, so that a hostile file costs nothing: the config's types and ranges, then its memory estimate
(:func:`viz_model.limits.check_budget`), then the model's skeleton with uninitialised parameters, then
every weight's name, shape, dtype and values, then the weights are moved into the model one by one
(``load_state_dict(assign=True)``: no second copy), and last a short probe run whose every activation must
be finite.
"""

from __future__ import annotations

from collections.abc import MutableMapping

import torch

from torch import nn

from viz_model.components import LayerNorm, PosEmbed, QKNorm, RMSNorm, sinusoidal_table
from viz_model.config import Config, ConfigError
from viz_model.loading.dtypes import DtypeError, parse_dtype, resolve_device, tensors_dtype
from viz_model.limits import (BudgetError, check_budget, check_resident_budget, count_params, current_element_size,
                     estimate_bytes, memory_limit)
from viz_model.model import VizTransformer
from viz_model.placement import Placement, PlacementError, current_placement, dispatch, plan, resident_bytes

MAX_MESSAGE = 300  # characters of a CheckpointError's message
PROBE_TOKENS = 8


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message names the problem in one line (newlines and runs of
    spaces collapsed, at most 300 characters)."""

    def __init__(self, message: object = "") -> None:
        text = " ".join(str(message).split())
        if len(text) > MAX_MESSAGE:
            text = text[: MAX_MESSAGE - 3] + "..."
        super().__init__(text)


def check_config(cfg: Config, label: str, file_bytes: int = 0, element_size: int | None = None) -> Config:
    """``cfg`` validated (types, ranges, consistency) and within the memory cap; returns ``cfg``.

    ``file_bytes``: the size of the weights file, when known (a file larger than the model's own copy of the
    weights, e.g. float64, adds the difference to the estimate). ``element_size``: bytes per weight of the model
    to be built (4 float32, 2 bfloat16/float16); None: the size set by :func:`viz_model.limits.model_element_size`
    for the load in progress, else 4.

    Raises:
        CheckpointError: ``"<label>: <the config problem>"`` or the estimate above ``VIZ_MAX_MODEL_MB``.
    """
    try:
        cfg.validate()
        placement = current_placement()
        if placement is None:
            check_budget(cfg, file_bytes, element_size)
        else:
            _check_placed_budget(cfg, placement, element_size, file_bytes)
    except (ConfigError, BudgetError, PlacementError) as exc:
        raise CheckpointError(f"{label}: {exc}") from None
    return cfg


def _skeleton(cfg: Config, element_size: int) -> VizTransformer:
    """``cfg``'s model on the ``meta`` device (shapes and dtypes, no memory): matrices in a dtype of
    ``element_size`` bytes, norms float32, as :func:`build_model` makes them."""
    with torch.device("meta"):
        model = _Unfilled(cfg)
    if element_size == 2:
        keep = norm_parameters(model)
        for name, p in model.named_parameters():
            p.data = p.data.to(torch.float32 if name in keep else torch.bfloat16)
    return model


def _check_placed_budget(cfg: Config, placement: Placement, element_size: int | None, file_bytes: int = 0) -> None:
    """The memory check of a load placed by a device map: only the weights that stay in this machine's memory
    count (:func:`viz_model.placement.resident_bytes` of the map :func:`viz_model.placement.plan` makes for the
    model's ``meta`` skeleton; :func:`viz_model.limits.check_resident_budget`).

    That holds when the file's weights are used as they are (memory-mapped pages that the kernel can drop). A load
    that converts them (a bfloat16 file loaded as float32: ``file_bytes`` differs from the model's own bytes by more
    than 5 %) builds the whole converted model in memory before its blocks are placed, so the whole model must fit
    (:func:`viz_model.limits.check_budget`); the refusal says to keep the checkpoint's own dtype."""
    e = current_element_size() if element_size is None else int(element_size)
    own = e * count_params(cfg)
    if file_bytes and abs(file_bytes - own) > 0.05 * own:
        try:
            check_budget(cfg, file_bytes, e)
        except BudgetError:
            need = estimate_bytes(cfg, e) + max(0, file_bytes - own)
            raise BudgetError(f"converting the weights to {8 * e}-bit floats builds the whole model in memory before "
                              f"its blocks are placed (about {need / 2**20:,.0f} MB, above the {memory_limit()[1] / 2**20:,.0f} "
                              "MB it may use): load it in the checkpoint's own dtype (dtype='auto') to place it with a "
                              "device map") from None
    skeleton = _skeleton(cfg, e)
    check_resident_budget(cfg, resident_bytes(skeleton, plan(skeleton, placement)), e)


class _Unfilled(VizTransformer):
    """A VizTransformer whose parameters are left as allocated (``torch.empty``: pages the kernel maps only when
    written, so they cost address space but no memory) instead of being initialised at random: every one of
    them is replaced by a checked weight of the file (``load_state_dict(assign=True)``). Building on the
    ``meta`` device would cost nothing too, but its first use imports torch's Python decompositions (about
    1.5 s and 60 MB per process)."""

    def init_weights(self, seed: int | None = None) -> None:
        pass


def _materialize_buffers(model: VizTransformer) -> None:
    """Non-persistent buffers (the sinusoidal position tables) are not in a checkpoint: compute them for real
    after a build on the meta device."""
    for module in model.modules():
        if isinstance(module, PosEmbed) and isinstance(module.W_pos, torch.Tensor) and module.W_pos.is_meta:
            n_ctx, d_model = module.W_pos.shape
            module.W_pos = sinusoidal_table(n_ctx, d_model)
    left = [name for name, b in model.named_buffers() if b.is_meta]
    if left:
        raise RuntimeError(f"buffers left unmaterialized: {left[:3]}")


def _all_finite(tensor: torch.Tensor) -> bool:
    """Whether every value is finite, from the tensor's minimum and maximum (``torch.aminmax``: NaN propagates
    through both, +inf is the maximum, -inf the minimum). One pass and no temporary: ``isfinite(x).all()`` builds a
    boolean copy and took 12x longer on a bfloat16 embedding of 128,256 x 2,048 (4.2 s against 0.36 s)."""
    if tensor.numel() == 0:
        return True
    low, high = torch.aminmax(tensor)
    return bool(torch.isfinite(low) & torch.isfinite(high))


def _non_finite(x: torch.Tensor, name: str) -> bool:
    if not x.is_floating_point():
        return False
    if name.endswith("hook_attn_scores"):  # masked scores are -inf by design
        return bool(torch.isnan(x).any() or torch.isposinf(x).any())
    return not bool(torch.isfinite(x).all())


@torch.no_grad()
def probe(model: VizTransformer, label: str) -> None:
    """Run ``model`` on a few token ids (``min(8, n_ctx)``; the encoder reads the same ids) and refuse it when
    any hook records NaN or an infinity (scores may hold the mask's -inf): finite weights can still overflow
    (an embedding of 1e30 squared in a norm).

    Raises:
        CheckpointError: naming the first hook, in the order of the forward pass, that went non-finite.
    """
    cfg = model.cfg
    n = min(PROBE_TOKENS, cfg.n_ctx)
    ids = (torch.arange(n, device=model.device) * 7919 % cfg.d_vocab).unsqueeze(0)
    bad: list[str] = []

    def check(x: torch.Tensor, hook) -> None:
        if not bad and _non_finite(x, hook.name):
            bad.append(hook.name)

    kwargs = {"src_tokens": ids} if cfg.is_encoder_decoder else {}
    with model.hooks((name, check) for name in model.hook_dict):
        out = model(ids, **kwargs)
    if not bad and _non_finite(out, "output"):
        bad.append("the output")
    if bad:
        raise CheckpointError(f"{label}: the model's activations are not finite (NaN or infinite values from "
                              f"{bad[0]} on, on a {n}-token probe): the weights or the config (layer_norm_eps, "
                              "embed_scale) are not usable")


def norm_parameters(model: VizTransformer) -> set[str]:
    """Names of the weights and biases of every norm (LayerNorm, RMSNorm, q/k norm): they stay float32 in a
    bfloat16 or float16 model (a few thousand values; Gemma's ``1 + weight`` would lose its offset in bfloat16)."""
    return {f"{name}.{leaf}" if name else leaf for name, module in model.named_modules()
            if isinstance(module, (LayerNorm, RMSNorm, QKNorm)) for leaf, _ in module.named_parameters(recurse=False)}


MATMUL_LEAVES = ("W_in", "W_out", "W_gate", "W_U", "W_router", "W_shared_gate")


def _linear_layout(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """A bfloat16 / float16 matrix used as ``x @ W`` (``W [in, out]``) stored as ``nn.Linear`` stores it, ``[out, in]``,
    and used through a transposed view: on a CPU, bfloat16 products with ``[in, out]`` storage took 5-20x longer
    (bench/load_dtype.py). Hugging Face weights arrive that way already (views, untouched); this project's own
    checkpoints store ``[in, out]`` and are laid out once here. ``W_O [head, d_head, d_model]`` likewise, for its
    ``[head * d_head, d_model]`` product. Values are unchanged."""
    leaf = name.rsplit(".", 1)[-1]
    if tensor.ndim == 2 and (leaf in MATMUL_LEAVES or name == "mlm_head.W") and tensor.stride(-1) == 1 \
            and tensor.shape[-1] > 1:
        return tensor.T.contiguous().T
    if tensor.ndim == 3 and leaf == "W_O" and tensor.stride(-1) == 1:
        return tensor.permute(2, 0, 1).contiguous().permute(1, 2, 0)
    return tensor


def build_model(cfg: Config, state: MutableMapping[str, torch.Tensor], label: str, file_bytes: int = 0,
                dtype: torch.dtype | str = torch.float32, device: torch.device | str | None = "cpu") -> VizTransformer:
    """A model in eval mode (dropout 0) with ``state`` loaded, after :func:`check_config`.

    ``dtype``: the model's dtype (float32, bfloat16, float16), or ``"auto"``: the dtype holding most of
    ``state``'s bytes (see :mod:`viz_model.loading.dtypes`); norm weights stay float32 either way. ``device``: where the
    weights go (``"cpu"``, ``"cuda"``; None or ``"auto"``: see :func:`viz_model.loading.dtypes.resolve_device`).

    ``state`` is consumed: its entries are moved into the model one by one, each cast to the model's dtype
    (``Tensor.to``: a tensor already in that dtype is used as it is, whatever its strides: a transposed view of
    a Hugging Face ``[out, in]`` matrix serves as ``W [in, out]``), so the weights of a memory-mapped safetensors
    file in the model's dtype are never copied (the parameters are the file's pages, private and copy-on-write,
    as ``transformers`` does) and a converted file's tensors are released as they go. ``label`` names the file in
    messages; ``file_bytes`` as in :func:`check_config`.

    Within :func:`viz_model.placement.placing` (``load_model(..., device_map=...)``) the model is built on the CPU,
    then dispatched by its device map (:func:`viz_model.placement.dispatch`) before the probe; ``device`` is unused.

    Raises:
        CheckpointError: an unknown dtype or device; invalid config or over the memory cap; missing, unexpected or
            mis-shaped weights; NaN or infinite weights; non-finite activations on a short probe (:func:`probe`);
            a device map that cannot be used (:func:`viz_model.placement.plan`).
    """
    try:
        dtype = parse_dtype(dtype)
        if dtype == "auto":
            dtype = tensors_dtype(state.values())
        device = resolve_device(device)
    except DtypeError as exc:
        raise CheckpointError(f"{label}: {exc}") from None
    placement = current_placement()
    if placement is not None:  # built on the CPU, then dispatched
        device = torch.device("cpu")
    check_config(cfg, label, file_bytes, dtype.itemsize)
    cfg.dropout = 0.0
    try:
        model = _Unfilled(cfg)
        model.__class__ = VizTransformer
    except ConfigError as exc:
        raise CheckpointError(f"{label}: {exc}") from None
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{label}: weights do not match the config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    for name, shape in expected.items():
        tensor = state[name]
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"{label}: {name} is not a tensor")
        if tuple(tensor.shape) != shape:
            raise CheckpointError(f"{label}: {name} has shape {tuple(tensor.shape)}, the config needs {shape}")
        if not tensor.is_floating_point():
            raise CheckpointError(f"{label}: {name} is not a floating-point tensor ({tensor.dtype})")
        if not _all_finite(tensor):
            raise CheckpointError(f"{label}: {name} holds NaN or infinite values")
    checked, keep_float32 = {}, norm_parameters(model)
    for name in expected:  # a view in the model's dtype stays a view (of the mapped file: no copy, any layout)
        tensor = state.pop(name).to(device=device, dtype=torch.float32 if name in keep_float32 else dtype)
        if dtype != torch.float32:  # norms of a float32 file stay float32: copied, or these few values would keep the
            # whole converted file mapped (and its touched pages resident)
            tensor = _linear_layout(name, tensor.clone() if name in keep_float32 else tensor)
        checked[name] = tensor
    model.load_state_dict(checked, assign=True)
    del checked
    _materialize_buffers(model)
    for module in model.modules():  # the sinusoidal tables, in the model's dtype and on its device
        if isinstance(module, PosEmbed) and isinstance(module.W_pos, torch.Tensor) and not isinstance(module.W_pos, nn.Parameter):
            module.W_pos = module.W_pos.to(device=device, dtype=dtype)
    model.eval()
    if placement is not None:  # blocks to GPUs, the CPU and disk (accelerate), before the probe runs through them
        try:
            dispatch(model, placement, plan(model, placement))
        except PlacementError as exc:
            raise CheckpointError(f"{label}: {exc}") from None
    probe(model, label)
    return model
