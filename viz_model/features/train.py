"""Training a sparse dictionary on a model's own activations, on this CPU, with progress and cancellation.

Recipe (Gao et al. 2024, "Scaling and evaluating sparse autoencoders", arXiv:2406.04093, sections 2.2-2.4 and
appendix A-B): a TopK activation (the sparsity is set by ``k``, no L1 penalty to tune); inputs scaled so that their
mean squared norm is 1 during training (a transcoder's target: its mean squared distance from its mean; the
scales are folded back into the saved weights); the decoder's rows
initialised at random with unit norm and the encoder as the decoder's transpose; ``b_dec`` started at the data's
mean; the decoder's rows kept at unit norm after every step (and the gradient's component along each row removed
first); an auxiliary loss ("AuxK") in which the ``k_aux = d_in / 2`` largest pre-activations of the *dead*
features (none active over the last ``dead_tokens`` training tokens) reconstruct the main reconstruction's error,
weighted 1/32 (and by ``min(n_dead / k_aux, 1)``, as SAELens' ``TopKTrainingSAE.calculate_topk_aux_loss``). Adam.
The ``standard`` (ReLU) architecture adds an L1 penalty ``l1 * sum_i f_i * ||W_dec[i]||`` instead (SAELens's
standard SAE loss).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from viz_model.features.dictionary import SparseDictionary, transcoder_out_hook

Progress = Callable[[float, str], None]


def _quiet(fraction: float, message: str) -> None:
    pass


@dataclass
class TrainResult:
    """What :func:`train_on_activations` reports besides the dictionary: the steps done, the last training
    FVU (on the batch, before the step), whether a cancel stopped it, and the dead fraction at the end."""
    steps: int
    fvu: float
    cancelled: bool
    dead_fraction: float


@torch.no_grad()
def collect_activations(model, windows: Sequence[torch.Tensor] | torch.Tensor, hook_names: Sequence[str],
                        batch_size: int = 16, dtype: torch.dtype = torch.float32,
                        progress: Progress = _quiet, cancel: threading.Event | None = None) -> dict[str, torch.Tensor]:
    """Every position's activation at each hook, for token windows run through ``model``.

    Args:
        windows: ``[n, pos]`` int64 ids (or a sequence of 1-D id tensors of one length), each at most ``n_ctx``.
        hook_names: hooks whose last dimension is the activation (e.g. ``blocks.2.hook_resid_post``).
        dtype: how the activations are kept (float16 halves the memory of a large collection).

    Returns:
        ``{hook name: [n * pos, d]}``, windows in order, positions in order within a window.

    Raises:
        KeyError: a hook the model does not have.
        ValueError: from the model (ids outside the vocabulary, too long).
    """
    windows = torch.stack(list(windows)) if not isinstance(windows, torch.Tensor) else windows
    out: dict[str, list[torch.Tensor]] = {name: [] for name in hook_names}
    for name in hook_names:
        if name not in model.hook_dict:
            raise KeyError(f"the model has no hook named {name!r}")
    for start in range(0, len(windows), batch_size):
        if cancel is not None and cancel.is_set():
            break
        _, cache = model.run_with_cache(windows[start:start + batch_size], names_filter=list(hook_names))
        for name in hook_names:
            act = cache[name]
            out[name].append(act.reshape(-1, act.shape[-1]).to(device="cpu", dtype=dtype))
        progress(min(1.0, (start + batch_size) / len(windows)), f"activations of {min(start + batch_size, len(windows))} "
                 f"of {len(windows)} windows")
    return {name: torch.cat(parts) if parts else torch.empty(0) for name, parts in out.items()}


def token_windows(token_ids: Sequence[int] | torch.Tensor, length: int) -> torch.Tensor:
    """Non-overlapping windows ``[n, length]`` (int64) of a token stream; the tail shorter than ``length`` is dropped.

    Raises:
        ValueError: ``length < 1`` or a stream shorter than one window.
    """
    ids = torch.as_tensor(token_ids, dtype=torch.int64).flatten()
    if length < 1 or len(ids) < length:
        raise ValueError(f"need at least one window of {length} tokens, got {len(ids)} tokens")
    n = len(ids) // length
    return ids[: n * length].view(n, length)


def init_dictionary(x_in: torch.Tensor, x_out: torch.Tensor, d_sae: int, hook_name: str, architecture: str = "topk",
                    k: int | None = 32, hook_name_out: str | None = None, seed: int = 0) -> SparseDictionary:
    """A fresh dictionary for (scaled) data ``x_in`` ``[n, d_in]`` -> ``x_out`` ``[n, d_out]``: unit-norm random
    decoder rows, ``W_enc = W_dec.T``, ``b_dec`` = mean of ``x_out``, ``b_enc = 0`` (Gao et al. 2024, sec. 2.4)."""
    gen = torch.Generator().manual_seed(seed)
    d = SparseDictionary(x_in.shape[-1], d_sae, hook_name, architecture, k, hook_name_out, x_out.shape[-1],
                         apply_b_dec_to_input=hook_name_out is None)
    with torch.no_grad():
        w = torch.randn(d_sae, d.d_out, generator=gen)
        d.W_dec.copy_(w / w.norm(dim=-1, keepdim=True))
        d.W_enc.copy_(d.W_dec.T if d.d_in == d.d_out else torch.randn(d.d_in, d_sae, generator=gen) / math.sqrt(d.d_in))
        d.b_dec.copy_(x_out[:65536].float().mean(0))
        if d.threshold is not None:
            d.threshold.fill_(1e-3)
    return d


def _fold_scale(d: SparseDictionary, scale_in: float, scale_out: float) -> None:
    """Turn a dictionary trained on ``x / scale_in -> y / scale_out`` into one for ``x -> y`` with the same unit
    decoder rows: features grow by ``scale_out`` (``b_enc``, ``threshold`` and, for a transcoder,
    ``W_enc`` rescaled), ``b_dec`` by ``scale_out``."""
    with torch.no_grad():
        d.W_enc.mul_(scale_out / scale_in)
        d.b_enc.mul_(scale_out)
        d.b_dec.mul_(scale_out)
        if d.threshold is not None:
            d.threshold.mul_(scale_out)


def train_on_activations(x_in: torch.Tensor, x_out: torch.Tensor | None, d_sae: int, hook_name: str,
                         architecture: str = "topk", k: int | None = 32, l1: float = 5.0,
                         hook_name_out: str | None = None, steps: int = 1000, batch_size: int = 4096,
                         lr: float = 1e-3, dead_tokens: int = 200_000, aux_coef: float = 1 / 32, seed: int = 0,
                         progress: Progress = _quiet, cancel: threading.Event | None = None
                         ) -> tuple[SparseDictionary, TrainResult]:
    """Train a dictionary on already collected activations (the recipe in the module docstring).

    Args:
        x_in: ``[n, d_in]`` activations read; x_out: ``[n, d_out]`` targets of a transcoder (None: an SAE, ``x_in``).
        d_sae: number of features. architecture: ``"topk"`` (with ``k``) or ``"standard"`` (with ``l1``).
        steps, batch_size, lr: Adam steps over random batches of rows; the learning rate decays linearly to 0
            over the last 20 % of the steps.
        progress: ``progress(fraction, message)`` about every 2 % of the steps. cancel: set it to stop after
            the current step; the dictionary trained so far is returned (``result.cancelled``).

    Returns:
        ``(dictionary, result)``: a float32 dictionary for unscaled activations, in eval mode.

    Raises:
        ValueError: empty or mismatched data, an architecture other than ``topk`` / ``standard``.
    """
    if architecture not in ("topk", "standard"):
        raise ValueError(f"train_dictionary trains 'topk' or 'standard' dictionaries, not {architecture!r}")
    x_out = x_in if x_out is None else x_out
    if x_in.ndim != 2 or x_out.ndim != 2 or len(x_in) != len(x_out) or len(x_in) == 0:
        raise ValueError(f"need [n, d] activations with the same n, got {tuple(x_in.shape)} and {tuple(x_out.shape)}")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    scale_in = float(x_in[:65536].float().pow(2).sum(-1).mean().sqrt()) or 1.0
    # an SAE's target is its input (one scale); a transcoder's target by its spread about the mean, which b_dec models
    sample = x_out[:65536].float()
    scale_out = scale_in if x_out is x_in else float((sample - sample.mean(0)).pow(2).sum(-1).mean().sqrt()) or 1.0
    d = init_dictionary(x_in[:65536].float() / scale_in, x_out[:65536].float() / scale_out, d_sae, hook_name,
                        architecture, k, hook_name_out, seed)
    params = [d.W_enc, d.b_enc, d.W_dec, d.b_dec]
    opt = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=6.25e-10)
    last_fired = torch.zeros(d_sae, dtype=torch.long)  # tokens since each feature last fired
    n = len(x_in)
    k_aux = d.d_in // 2
    fvu, step, cancelled = float("nan"), 0, False
    decay_from = int(0.8 * steps)
    for step in range(1, steps + 1):
        if cancel is not None and cancel.is_set():
            cancelled, step = True, step - 1
            break
        idx = torch.randint(0, n, (min(batch_size, n),), generator=gen)
        xb = x_in[idx].float() / scale_in
        yb = xb if x_out is x_in else x_out[idx].float() / scale_out
        pre = d.hidden_pre(xb)
        if architecture == "topk":
            top = pre.topk(d.k, dim=-1)
            vals = torch.relu(top.values)
            recon = F.embedding_bag(top.indices, d.W_dec, per_sample_weights=vals, mode="sum") + d.b_dec
            fired = torch.zeros(d_sae, dtype=torch.bool)
            fired[top.indices[vals > 0]] = True
            sparsity = recon.new_zeros(())
        else:
            f = torch.relu(pre)
            recon = f @ d.W_dec + d.b_dec
            fired = (f > 0).any(0)
            sparsity = l1 * (f * d.W_dec.norm(dim=-1)).sum(-1).mean()
        err = yb - recon
        mse = err.pow(2).sum(-1).mean()
        loss = mse + sparsity
        last_fired += len(xb)
        last_fired[fired] = 0
        dead = last_fired >= dead_tokens
        n_dead = int(dead.sum())
        if architecture == "topk" and n_dead:
            ka = min(k_aux, n_dead)
            aux_pre = pre.masked_fill(~dead, float("-inf")).topk(ka, dim=-1)
            aux_recon = F.embedding_bag(aux_pre.indices, d.W_dec, per_sample_weights=torch.relu(aux_pre.values), mode="sum")
            loss = loss + aux_coef * min(n_dead / k_aux, 1.0) * (aux_recon - err.detach()).pow(2).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():  # remove the gradient along each (unit) decoder row, step, renormalise
            d.W_dec.grad -= (d.W_dec.grad * d.W_dec).sum(-1, keepdim=True) * d.W_dec
            for g in opt.param_groups:
                g["lr"] = lr * min(1.0, (steps - step) / max(1, steps - decay_from)) if step > decay_from else lr
            opt.step()
            d.W_dec /= d.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-8)
        fvu = float(err.detach().pow(2).sum() / (yb - yb.mean(0)).pow(2).sum())
        if step % max(1, steps // 50) == 0 or step == steps:
            progress(step / steps, f"step {step}/{steps}: FVU {fvu:.3f}, dead {n_dead / d_sae:.1%}")
    _fold_scale(d, scale_in, scale_out)
    d.eval()
    d.requires_grad_(False)
    return d, TrainResult(step, fvu, cancelled, float((last_fired >= dead_tokens).float().mean()))


def train_dictionary(model, hook_name: str, texts: Iterable[str] | Sequence[Sequence[int]], d_sae: int,
                     tokenizer=None, architecture: str = "topk", k: int | None = 32, l1: float = 5.0,
                     transcoder: bool = False, window: int = 128, steps: int = 1000, batch_size: int = 4096,
                     lr: float = 1e-3, seed: int = 0, progress: Progress = _quiet,
                     cancel: threading.Event | None = None) -> tuple[SparseDictionary, TrainResult]:
    """Train an SAE on ``hook_name`` (or, with ``transcoder=True``, a transcoder from
    ``blocks.{l}.ln2.hook_normalized`` to ``blocks.{l}.hook_mlp_out``) of ``model`` on ``texts``.

    Args:
        texts: strings (then ``tokenizer`` is needed; their ids are joined into one stream) or lists of ids.
        window: the stream is cut into windows of this many tokens (at most ``n_ctx``), each run from position 0.
        d_sae, architecture, k, l1, steps, batch_size, lr, seed: see :func:`train_on_activations`.
        progress: ``progress(fraction, message)``: the first 10 % for collecting activations, the rest training.
        cancel: a ``threading.Event``; when set, stops early and returns what was trained.

    Returns:
        ``(dictionary, result)`` (see :func:`train_on_activations`).

    Raises:
        ValueError: no tokens, a window longer than the context, a transcoder on another hook, strings without a
            tokenizer.
        KeyError: a hook the model does not have.
    """
    ids: list[int] = []
    for text in texts:
        if isinstance(text, str):
            if tokenizer is None:
                raise ValueError("texts given as strings need the model's tokenizer")
            ids += tokenizer.encode(text).ids
        else:
            ids += [int(i) for i in text]
    window = min(window, model.cfg.n_ctx)
    out_hook = transcoder_out_hook(hook_name) if transcoder else None
    windows = token_windows(ids, min(window, len(ids)) if ids else window)
    acts = collect_activations(model, windows, [hook_name] + ([out_hook] if out_hook else []),
                               progress=lambda f, m: progress(0.1 * f, m))  # short: a cancel is seen by the training
    return train_on_activations(acts[hook_name], acts[out_hook] if out_hook else None, d_sae, hook_name,
                                architecture, k, l1, out_hook, steps, batch_size, lr, seed=seed,
                                progress=lambda f, m: progress(0.1 + 0.9 * f, m), cancel=cancel)
