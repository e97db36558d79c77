"""Steering (adding a direction to one hook) and feature ablation through a sparse dictionary.

- :func:`steer`: activation addition ``h <- h + alpha * direction`` at one hook (Turner et al. 2023, "Activation
  Addition: Steering Language Models Without Optimization", arXiv:2308.10248), at every position or the given ones.
- :func:`contrastive_direction`: the mean activation over one text minus that over another (the same paper's
  difference of two prompts, here averaged over positions so the texts may differ in length).
- :func:`ablate_features`: the hook's value replaced by the dictionary's reconstruction with some features set to
  0 plus the dictionary's error term (the "error node" of Marks et al. 2024, "Sparse Feature Circuits"), so that
  ablating no feature leaves the model exactly as it was.
- :func:`steered_continuations`: greedy continuations, intact and steered, side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch

from viz_model.model import VizTransformer
from viz_model.sampling import generate


def _tokens(tokens: torch.Tensor) -> torch.Tensor:
    tokens = torch.as_tensor(tokens, dtype=torch.int64)
    return tokens[None] if tokens.ndim == 1 else tokens


def _positions(positions: Iterable[int] | None, n_pos: int) -> list[int] | None:
    if positions is None:
        return None
    out = sorted({p + n_pos if p < 0 else p for p in (int(q) for q in positions)})
    if out and not (0 <= out[0] and out[-1] < n_pos):
        raise ValueError(f"positions must lie in [-{n_pos}, {n_pos}), got {list(positions)}")
    return out


def steering_hook(direction: torch.Tensor, alpha: float, positions: Sequence[int] | None = None) -> Callable:
    """A hook ``fn(act, hook)`` that returns ``act + alpha * direction`` at ``positions`` of axis 1 (all when None)
    and ``act`` elsewhere. ``direction``'s shape is that of one position's activation (``act.shape[2:]``, e.g.
    ``[d_model]``); the sum is computed in the activation's dtype. Positions count from the start of the sequence
    also when a KV cache feeds the model a few positions at a time (the hook counts what it has seen; a call with
    more than one position after the first starts the count again, as a re-run of the whole sequence does)."""
    seen = [0]

    def hook(act: torch.Tensor, _hook) -> torch.Tensor:
        n = act.shape[1]
        if seen[0] and n > 1:
            seen[0] = 0
        offset, seen[0] = seen[0], seen[0] + n
        delta = (alpha * direction.to(device=act.device, dtype=torch.float32)).to(act.dtype)
        if positions is None:
            return act + delta
        local = [p - offset for p in positions if offset <= p < offset + n]
        if not local:
            return act
        out = act.clone()
        out[:, local] = act[:, local] + delta
        return out

    return hook


def _check_direction(model: VizTransformer, hook_name: str, direction: torch.Tensor) -> None:
    if hook_name not in model.hook_dict:
        raise KeyError(f"the model has no hook named {hook_name!r}")
    if not torch.isfinite(direction).all():
        raise ValueError("the direction holds NaN or infinite values")


def steer(model: VizTransformer, tokens: torch.Tensor, hook_name: str, direction: torch.Tensor, alpha: float,
          positions: Iterable[int] | None = None, **kw) -> torch.Tensor:
    """Logits ``[batch, pos, d_vocab]`` of ``tokens`` (``[pos]`` or ``[batch, pos]``) with ``alpha * direction``
    added to the value of ``hook_name`` at ``positions`` (None: every position; negative positions count from the
    end), through :meth:`run_with_hooks` (``**kw`` go to the model's forward). ``alpha = 0`` gives the unsteered
    logits exactly (``x + 0 = x``); at the steered positions the hook's value becomes exactly
    ``value + alpha * direction`` as computed in the activation's dtype.

    Raises:
        KeyError: an unknown hook.
        ValueError: a direction with NaN/inf, positions out of range, or a direction
            whose shape is not one position's activation shape (from broadcasting).
    """
    tokens = _tokens(tokens)
    direction = torch.as_tensor(direction).detach()
    _check_direction(model, hook_name, direction)
    pos = _positions(positions, tokens.shape[1])
    with torch.no_grad():
        return model.run_with_hooks(tokens, [(hook_name, steering_hook(direction, float(alpha), pos))], **kw)


@torch.no_grad()
def contrastive_direction(model: VizTransformer, text_a_tokens: torch.Tensor, text_b_tokens: torch.Tensor,
                          hook_name: str, **kw) -> torch.Tensor:
    """``mean over positions of hook(text a) - mean over positions of hook(text b)``, float32, shaped as one
    position's activation (``[d_model]`` for a residual hook). The texts may differ in length.

    Raises:
        KeyError: an unknown hook.
        ValueError: an empty text (or the model's errors for bad ids).
    """
    means = []
    for tokens in (_tokens(text_a_tokens), _tokens(text_b_tokens)):
        if tokens.shape[1] == 0:
            raise ValueError("a contrastive direction needs two non-empty texts")
        if hook_name not in model.hook_dict:
            raise KeyError(f"the model has no hook named {hook_name!r}")
        _, cache = model.run_with_cache(tokens, names_filter=[hook_name], **kw)
        means.append(cache[hook_name].float().mean(dim=(0, 1)))
    return means[0] - means[1]


def feature_ablation_hooks(dictionary, features: Iterable[int]) -> list[tuple[str, Callable]]:
    """``fwd_hooks`` that ablate ``features`` of ``dictionary`` (see :func:`ablate_features`).

    Raises:
        ValueError: a feature out of range.
    """
    feats = sorted({int(i) for i in features})
    if feats and not (0 <= feats[0] and feats[-1] < dictionary.d_sae):
        raise ValueError(f"features must lie in [0, {dictionary.d_sae}), got {feats[:5]}")
    idx = torch.tensor(feats, dtype=torch.long)
    store: dict[str, torch.Tensor] = {}

    def read(act: torch.Tensor, _hook) -> None:
        store["f"] = dictionary.encode(act)[..., idx]

    def write(act: torch.Tensor, _hook) -> torch.Tensor:
        f = store.pop("f")
        # recon(f with feats at 0) + error = y - sum_{i in feats} f_i W_dec[i]   (b_dec and the rest cancel)
        delta = f.to(dictionary.W_dec.dtype) @ dictionary.W_dec[idx]  # on the dictionary's device
        return act - delta.to(device=act.device, dtype=act.dtype)

    if not feats:
        return []
    def both(act: torch.Tensor, hook) -> torch.Tensor:
        read(act, hook)
        return write(act, hook)

    if dictionary.out_hook == dictionary.hook_name:
        return [(dictionary.hook_name, both)]
    return [(dictionary.hook_name, read), (dictionary.out_hook, write)]


def ablate_features(model: VizTransformer, tokens: torch.Tensor, dictionary, features: Iterable[int], **kw
                    ) -> torch.Tensor:
    """Logits ``[batch, pos, d_vocab]`` with ``features`` of ``dictionary`` switched off at every position: the
    value of the dictionary's output hook (its own hook for an SAE, ``hook_name_out`` for a transcoder) is replaced
    by ``decode(f with those features at 0) + error``, ``error = value - decode(f)``, ``f = encode(input)``. That
    equals ``value - sum_{i in features} f_i W_dec[i]``, which is how it is computed, so that ablating no feature
    gives the intact logits exactly.

    Raises:
        ValueError: a feature out of range; the model's errors for bad tokens.
        KeyError: a hook the model lacks.
    """
    with torch.no_grad():
        return model.run_with_hooks(_tokens(tokens), feature_ablation_hooks(dictionary, features), **kw)


def greedy_continuation(model: VizTransformer, ids: Sequence[int], n_new: int = 20,
                        fwd_hooks: Iterable[tuple[str, Callable]] = ()) -> list[int]:
    """The ``n_new`` ids that greedy decoding (:func:`viz_model.generate`, temperature 0, with a KV cache) appends
    to ``ids`` while ``fwd_hooks`` are active (fewer when the context fills).

    Raises:
        KeyError: an unknown hook.
        ValueError: empty ``ids``.
    """
    with model.hooks(list(fwd_hooks)):
        return [s.token_id for s in generate(model, list(ids), n_new, temperature=0)]


def steered_continuations(model: VizTransformer, ids: Sequence[int], hook_name: str, direction: torch.Tensor,
                          alpha: float, n_new: int = 20, positions: Iterable[int] | None = None
                          ) -> tuple[list[int], list[int]]:
    """``(intact, steered)``: the greedy continuations of ``ids`` without and with ``alpha * direction`` added at
    ``hook_name`` (every position, generated ones included, when ``positions`` is None; else those prompt
    positions only).

    Raises:
        KeyError: as :func:`steer` and :func:`greedy_continuation`.
        ValueError: as :func:`steer` and :func:`greedy_continuation`.
    """
    direction = torch.as_tensor(direction).detach()
    _check_direction(model, hook_name, direction)
    pos = _positions(positions, len(ids))
    intact = greedy_continuation(model, ids, n_new)
    steered = greedy_continuation(model, ids, n_new, [(hook_name, steering_hook(direction, float(alpha), pos))])
    return intact, steered
