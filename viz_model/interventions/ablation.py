"""Head ablation: switch attention heads off and see what the model does without them.

A head is ablated at its output ``blocks.{layer}.attn.hook_z`` ``[batch, pos, head_index, d_head]`` (its input to
``W_O``), as in TransformerLens: *zero* ablation sets the head's z to 0, so it adds nothing but ``b_O`` to the
residual stream (equal to zeroing its rows of ``W_O``); *mean* ablation replaces it by its mean over the positions
of a reference text (by default the current text), which keeps the average signal and removes the
token-specific information (Wang et al., 2022, "Interpretability in the Wild", section 3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from viz_model.model import VizTransformer
from viz_model.interventions.batching import Progress, encode_once, hooks_by_layer, prefix_run, reads_logits_at, run_cells

Head = tuple[int, int]  # (layer, head)
KINDS = ("zero", "mean")


@torch.no_grad()
def head_means(model: VizTransformer, tokens: torch.Tensor, **kwargs) -> torch.Tensor:
    """The mean of every head's ``hook_z`` over the batch and the positions of ``tokens``.

    Returns:
        ``[n_layers, n_heads, d_head]`` float32 (decoder self-attention heads).
    """
    names = [f"blocks.{layer}.attn.hook_z" for layer in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(tokens, names_filter=names, **kwargs)
    return torch.stack([cache[name].float().mean(dim=(0, 1)) for name in names])


def _check(model: VizTransformer, heads: Iterable[Head], kind: str, means: torch.Tensor | None) -> list[Head]:
    cfg = model.cfg
    heads = [(int(layer), int(head)) for layer, head in heads]
    for layer, head in heads:
        if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
            raise ValueError(f"no head L{layer}H{head}: the model has {cfg.n_layers} layers of {cfg.n_heads} heads")
    if kind not in KINDS:
        raise ValueError(f"unknown ablation {kind!r} (one of: {', '.join(KINDS)})")
    if kind == "mean" and (means is None or tuple(means.shape) != (cfg.n_layers, cfg.n_heads, cfg.d_head)):
        raise ValueError("mean ablation needs means [n_layers, n_heads, d_head] from head_means()")
    return heads


def head_ablation_hooks(model: VizTransformer, heads: Iterable[Head], kind: str = "zero",
                        means: torch.Tensor | None = None) -> list[tuple[str, Callable]]:
    """``fwd_hooks`` for :meth:`run_with_hooks` that ablate ``heads`` (``(layer, head)`` pairs) in every batch row.

    Args:
        kind: ``"zero"`` or ``"mean"`` (then ``means`` from :func:`head_means`).

    Raises:
        ValueError: a head the model does not have, an unknown kind, missing means.
    """
    heads = _check(model, heads, kind, means)
    by_layer: dict[int, set[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, set()).add(head)
    fns = []
    for layer, layer_heads in by_layer.items():
        idx = torch.tensor(sorted(layer_heads))

        def fn(z, hook, idx=idx, layer=layer):
            z = z.clone()
            z[:, :, idx] = 0.0 if kind == "zero" else means[layer, idx].to(z.dtype)  # [n, d_head] over every pos
            return z
        fns.append((f"blocks.{layer}.attn.hook_z", fn))
    return fns


@torch.no_grad()
def ablate_heads(model: VizTransformer, tokens: torch.Tensor, heads: Iterable[Head], kind: str = "zero",
                 means: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
    """Logits ``[batch, pos, d_vocab]`` of ``tokens`` with ``heads`` ablated (see :func:`head_ablation_hooks`)."""
    return model.run_with_hooks(tokens, head_ablation_hooks(model, heads, kind, means), **kwargs)


@torch.no_grad()
def head_ablation_effects(model: VizTransformer, tokens: torch.Tensor, token_id: int, pos: int = -1,
                          kind: str = "zero", means: torch.Tensor | None = None, base: Iterable[Head] = (),
                          progress: Progress | None = None, reuse_prefix: bool = True, **kwargs) -> torch.Tensor:
    """The change in ``log p(token_id)`` at ``pos`` when each head alone is ablated (on top of the heads in
    ``base``, which are ablated in every run including the reference one), all heads in batched passes.

    With ``reuse_prefix`` (the default) the reference run records every layer's input, and a copy that ablates a
    head of layer ``l`` starts from it and runs only blocks ``l ..`` (:func:`.batching.run_cells`): the same numbers
    as running the whole model per copy (``reuse_prefix=False``) for about half the work.

    Args:
        tokens: one prompt ``[1, pos]``.
        progress: ``(heads done, n_layers * n_heads)`` after every batched pass; raise from it to cancel.
        **kwargs: passed to ``forward`` (``src_tokens`` of an encoder-decoder: encoded once for every pass).

    Returns:
        ``[n_layers, n_heads]`` float32, nats: log-prob with the head ablated minus log-prob without it (negative =
        the head helped predict ``token_id``). Heads in ``base`` give 0.

    Raises:
        ValueError: as :func:`head_ablation_hooks`; ``tokens`` not ``[1, pos]``.
    """
    cfg = model.cfg
    base = _check(model, base, kind, means)
    if tokens.ndim != 2 or tokens.shape[0] != 1:
        raise ValueError(f"give one prompt, [1, pos]; got shape {tuple(tokens.shape)}")
    kwargs = encode_once(model, kwargs) if reuse_prefix else kwargs
    logprob = reads_logits_at(lambda logits: torch.log_softmax(logits[0, pos].float(), dim=-1)[token_id], pos)
    base_hooks = lambda: head_ablation_hooks(model, base, kind, means) if base else []
    logits, prefix = prefix_run(model, tokens, base_hooks(), **kwargs)
    reference = float(logprob(logits))

    def write(z, rows, heads, layer):  # row r ablates its own cell's head
        z[rows, :, heads] = 0.0 if kind == "zero" else means[layer, heads][:, None, :].to(z.dtype)

    def hooks_for(chunk):  # on top of the base heads, ablated in every row
        return base_hooks() + hooks_by_layer(chunk, lambda layer: f"blocks.{layer}.attn.hook_z", write)

    cells = [(layer, head) for layer in range(cfg.n_layers) for head in range(cfg.n_heads)]
    effects = run_cells(model, tokens, cells, hooks_for, logprob, progress,
                        prefix if reuse_prefix else None, **kwargs) - reference
    for layer, head in base:
        effects[layer * cfg.n_heads + head] = 0.0
    return effects.view(cfg.n_layers, cfg.n_heads)
