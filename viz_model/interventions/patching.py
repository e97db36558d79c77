"""Activation patching with TransformerLens' names and semantics (``transformer_lens.patching``).

Run the *corrupted* prompt, but take one activation (one layer's residual stream at one position, one head's
output at every position, ...) from the *clean* run, and measure how much of the clean behaviour comes back
(Meng et al., 2022, "Locating and Editing Factual Associations in GPT"; Wang et al., 2022, "Interpretability in the
Wild"). Every function here runs its cells batched: many patched copies of the corrupted prompt in one forward
pass (:func:`viz_model.interventions.batching.run_cells`), not one forward per cell.

A ``patching_metric`` maps the logits of one run ``[1, pos, d_vocab]`` to a scalar tensor, as in TransformerLens;
:func:`logit_diff_metric` and :func:`prob_metric` build the two common ones and :func:`normalise` rescales results
so that 0 = the corrupted run and 1 = the clean run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from viz_model.model import VizTransformer
from viz_model.placement import weight
from viz_model.interventions.batching import Progress, encode_once, hooks_by_layer, prefix_run, reads_logits_at, run_cells

Metric = Callable[[torch.Tensor], torch.Tensor]


def logit_diff_metric(answer_id: int, wrong_id: int, pos: int = -1) -> Metric:
    """``logits[0, pos, answer_id] - logits[0, pos, wrong_id]`` (the logit difference of Wang et al., 2022)."""
    return reads_logits_at(lambda logits: logits[0, pos, answer_id].float() - logits[0, pos, wrong_id].float(), pos)


def prob_metric(answer_id: int, pos: int = -1) -> Metric:
    """``softmax(logits[0, pos])[answer_id]``: the probability of the clean answer, in [0, 1]."""
    return reads_logits_at(lambda logits: torch.softmax(logits[0, pos].float(), dim=-1)[answer_id], pos)


def normalise(results: torch.Tensor, clean_value: float, corrupted_value: float) -> torch.Tensor:
    """``(results - corrupted) / (clean - corrupted)``: 1 = fully restored, 0 = no effect.

    Raises:
        ValueError: when the clean and corrupted runs give the same metric (nothing to restore).
    """
    span = clean_value - corrupted_value
    if abs(span) < 1e-12:
        raise ValueError("the clean and corrupted prompts give the same metric value: there is nothing to restore")
    return (results - corrupted_value) / span


def _clean(clean_cache: Mapping[str, torch.Tensor], name: str, n_pos: int) -> torch.Tensor:
    try:
        value = clean_cache[name]
    except KeyError:
        raise KeyError(f"the clean cache has no {name}: record it with model.run_with_cache(clean_tokens)") from None
    if value.shape[1] != n_pos:
        raise ValueError(f"the clean prompt has {value.shape[1]} tokens and the corrupted one {n_pos}: "
                         "activation patching needs prompts of the same length")
    return value[:1].float()


def _check_prompt(tokens: torch.Tensor) -> None:
    if tokens.ndim != 2 or tokens.shape[0] != 1:
        raise ValueError(f"give one prompt, [1, pos]; got shape {tuple(tokens.shape)}")


def _sweep(model: VizTransformer, corrupted_tokens: torch.Tensor, cells: list[tuple[int, int]], hook: str,
           write, patching_metric: Metric, progress: Progress | None, reuse_prefix: bool, **kwargs) -> torch.Tensor:
    """Run the cells ``(layer, index)``, each patching ``blocks.{layer}.{hook}`` with ``write``; from the corrupted
    run's layer inputs when ``reuse_prefix`` (see :func:`.batching.run_cells`)."""
    _check_prompt(corrupted_tokens)
    prefix = None
    if reuse_prefix:
        kwargs = encode_once(model, kwargs)
        prefix = prefix_run(model, corrupted_tokens, **kwargs)[1]
    hooks_for = lambda chunk: hooks_by_layer(chunk, lambda layer: f"blocks.{layer}.{hook}", write)
    return run_cells(model, corrupted_tokens, cells, hooks_for, patching_metric, progress, prefix, **kwargs)


def _sweep_positions(model: VizTransformer, corrupted_tokens: torch.Tensor, clean_cache, patching_metric: Metric,
                     hook: str, progress: Progress | None = None, reuse_prefix: bool = True, **kwargs) -> torch.Tensor:
    """``[n_layers, pos]``: ``blocks.{layer}.{hook}`` at one position taken from the clean run."""
    n_layers, n_pos = model.cfg.n_layers, corrupted_tokens.shape[-1]
    clean = {layer: _clean(clean_cache, f"blocks.{layer}.{hook}", n_pos) for layer in range(n_layers)}

    def write(x, rows, positions, layer):
        x[rows, positions] = clean[layer][0, positions].to(x.dtype)

    cells = [(layer, pos) for layer in range(n_layers) for pos in range(n_pos)]
    return _sweep(model, corrupted_tokens, cells, hook, write, patching_metric, progress, reuse_prefix,
                  **kwargs).view(n_layers, n_pos)


def get_act_patch_resid_pre(model: VizTransformer, corrupted_tokens: torch.Tensor, clean_cache: Mapping[str, torch.Tensor],
                            patching_metric: Metric, progress: Progress | None = None, reuse_prefix: bool = True,
                            **kwargs) -> torch.Tensor:
    """Patch the residual stream entering each layer (``blocks.{layer}.hook_resid_pre``), one position at a time.

    Args:
        corrupted_tokens: ``[1, pos]`` int64.
        clean_cache: from ``model.run_with_cache(clean_tokens)`` (same length), holding every ``hook_resid_pre``.
        patching_metric: logits ``[1, pos, d_vocab]`` -> scalar tensor.
        progress: called after every batched pass with ``(cells done, total cells)``; raise from it to cancel (the
            exception propagates, the hooks are removed).
        reuse_prefix: True (default): one corrupted run records every layer's input and a cell at layer ``l`` runs
            only blocks ``l ..`` from it (:meth:`VizTransformer.forward_from`); False: every cell runs the whole
            model. The results are the same (up to float rounding); the work is in :func:`.batching.sweep_cost`.
        **kwargs: passed to ``forward`` (e.g. ``src_tokens`` ``[1, src_pos]`` of an encoder-decoder, encoded once).

    Returns:
        ``[n_layers, pos]`` float32: the metric of the corrupted run with that one activation from the clean run.

    Raises:
        KeyError: when the clean cache lacks a needed hook.
        ValueError: prompts of different lengths, or ``corrupted_tokens`` not ``[1, pos]``.
    """
    return _sweep_positions(model, corrupted_tokens, clean_cache, patching_metric, "hook_resid_pre", progress,
                            reuse_prefix, **kwargs)


def get_act_patch_attn_out(model: VizTransformer, corrupted_tokens: torch.Tensor, clean_cache: Mapping[str, torch.Tensor],
                           patching_metric: Metric, progress: Progress | None = None, reuse_prefix: bool = True,
                           **kwargs) -> torch.Tensor:
    """As :func:`get_act_patch_resid_pre` for each layer's attention output ``blocks.{layer}.hook_attn_out``
    ``[batch, pos, d_model]`` (all heads plus ``b_O``). Returns ``[n_layers, pos]``; arguments and errors as there.
    """
    return _sweep_positions(model, corrupted_tokens, clean_cache, patching_metric, "hook_attn_out", progress,
                            reuse_prefix, **kwargs)


def get_act_patch_mlp_out(model: VizTransformer, corrupted_tokens: torch.Tensor, clean_cache: Mapping[str, torch.Tensor],
                          patching_metric: Metric, progress: Progress | None = None, reuse_prefix: bool = True,
                          **kwargs) -> torch.Tensor:
    """As :func:`get_act_patch_resid_pre` for each layer's feed-forward output ``blocks.{layer}.hook_mlp_out``
    ``[batch, pos, d_model]``. Returns ``[n_layers, pos]``; arguments and errors as there."""
    return _sweep_positions(model, corrupted_tokens, clean_cache, patching_metric, "hook_mlp_out", progress,
                            reuse_prefix, **kwargs)


def get_act_patch_attn_head_out_all_pos(model: VizTransformer, corrupted_tokens: torch.Tensor,
                                        clean_cache: Mapping[str, torch.Tensor], patching_metric: Metric,
                                        progress: Progress | None = None, reuse_prefix: bool = True,
                                        **kwargs) -> torch.Tensor:
    """Patch one head's output at every position: its ``blocks.{layer}.attn.hook_z`` ``[batch, pos, head_index,
    d_head]`` slice, the head's input to ``W_O`` (TransformerLens patches ``hook_z`` the same way).

    Returns:
        ``[n_layers, n_heads]`` float32. Arguments (``progress``, ``reuse_prefix``) and errors as
        :func:`get_act_patch_resid_pre`.
    """
    n_layers, n_heads, n_pos = model.cfg.n_layers, model.cfg.n_heads, corrupted_tokens.shape[-1]
    clean = {layer: _clean(clean_cache, f"blocks.{layer}.attn.hook_z", n_pos) for layer in range(n_layers)}

    def write(z, rows, heads, layer):
        z[rows, :, heads] = clean[layer][0][:, heads].transpose(0, 1).to(z.dtype)  # [n_cells, pos, d_head]

    cells = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    return _sweep(model, corrupted_tokens, cells, "attn.hook_z", write, patching_metric, progress, reuse_prefix,
                  **kwargs).view(n_layers, n_heads)


# ---- attribution patching: a linear estimate of every cell from one forward and one backward pass -------------

def _attr_terms(model: VizTransformer, corrupted_tokens: torch.Tensor, clean_cache: Mapping[str, torch.Tensor],
                patching_metric: Metric, names: list[str], **kwargs
                ) -> tuple[float, list[torch.Tensor]]:
    """The corrupted run's metric and, per hook in ``names``, ``(clean - corrupted) * d metric / d activation``
    (float32, batch row 0, the activation's own shape)."""
    _check_prompt(corrupted_tokens)
    n_pos = corrupted_tokens.shape[-1]
    clean = [_clean(clean_cache, name, n_pos) for name in names]
    kwargs = encode_once(model, kwargs)
    acts: dict[str, torch.Tensor] = {}

    def leaf(x, hook):  # the graph starts at block 0's input: no gradient flows to the parameters or embeddings
        return x.detach().requires_grad_(True)

    def keep(x, hook):
        acts[hook.name] = x

    with torch.enable_grad(), model.hooks([("blocks.0.hook_resid_pre", leaf)] + [(name, keep) for name in names]):
        value = patching_metric(model(corrupted_tokens, **kwargs))
        if not (isinstance(value, torch.Tensor) and value.numel() == 1 and value.requires_grad):
            raise ValueError("attribution patching needs a patching metric that returns a differentiable scalar tensor")
        grads = torch.autograd.grad(value, [acts[name] for name in names], allow_unused=True)
    terms = []
    for name, source, grad in zip(names, clean, grads):
        corrupted = acts.pop(name).detach()[:1].float()
        grad = torch.zeros_like(corrupted) if grad is None else grad[:1].float()
        terms.append(((source.to(corrupted.device) - corrupted) * grad)[0])
    return float(value.detach()), terms


def _attr_positions(model, corrupted_tokens, clean_cache, patching_metric, hook, progress, **kwargs) -> torch.Tensor:
    names = [f"blocks.{layer}.{hook}" for layer in range(model.cfg.n_layers)]
    value, terms = _attr_terms(model, corrupted_tokens, clean_cache, patching_metric, names, **kwargs)
    return _done(value + torch.stack([term.sum(-1) for term in terms]).cpu(), progress)  # [n_layers, pos]


def _done(grid: torch.Tensor, progress: Progress | None) -> torch.Tensor:
    if progress is not None:  # every cell at once
        progress(grid.numel(), grid.numel())
    return grid


def get_attr_patch_resid_pre(model: VizTransformer, corrupted_tokens: torch.Tensor,
                             clean_cache: Mapping[str, torch.Tensor], patching_metric: Metric,
                             progress: Progress | None = None, **kwargs) -> torch.Tensor:
    """Attribution patching (Nanda, 2023, "Attribution Patching: Activation Patching At Industrial Scale"; Syed et
    al., 2023, "Attribution Patching Outperforms Automated Circuit Discovery") of the residual stream entering each
    layer, one position at a time: the first-order Taylor estimate of :func:`get_act_patch_resid_pre`,

        ``metric(corrupted) + Σ_d (clean[l, pos, d] - corrupted[l, pos, d]) · ∂metric/∂act[l, pos, d]``

    with the gradient taken on the corrupted run. Every cell comes from the given clean cache, one corrupted forward
    pass and one backward pass (``torch.autograd.grad`` on the activations only, under ``torch.enable_grad`` also
    inside a caller's ``no_grad``; the parameters get no ``.grad``). The value is the estimated *metric of the
    patched run*, as the exact function returns, so :func:`normalise` applies in the same way. It is exact where the
    metric is linear in the activation and can be far off where it is not (large patches, early layers, a
    probability metric near saturation).

    The arguments are those of :func:`get_act_patch_resid_pre` (``patching_metric`` must be differentiable: a tensor
    op of the logits); ``progress`` is called once, ``(n_cells, n_cells)``, when done.

    Returns:
        ``[n_layers, pos]`` float32, in the metric's units.

    Raises:
        KeyError, ValueError: as :func:`get_act_patch_resid_pre`; ValueError also for a metric without a gradient.
    """
    return _attr_positions(model, corrupted_tokens, clean_cache, patching_metric, "hook_resid_pre", progress, **kwargs)


def get_attr_patch_attn_out(model: VizTransformer, corrupted_tokens: torch.Tensor,
                            clean_cache: Mapping[str, torch.Tensor], patching_metric: Metric,
                            progress: Progress | None = None, **kwargs) -> torch.Tensor:
    """:func:`get_attr_patch_resid_pre` for ``blocks.{layer}.hook_attn_out``: the linear estimate of
    :func:`get_act_patch_attn_out`. Returns ``[n_layers, pos]``."""
    return _attr_positions(model, corrupted_tokens, clean_cache, patching_metric, "hook_attn_out", progress, **kwargs)


def get_attr_patch_mlp_out(model: VizTransformer, corrupted_tokens: torch.Tensor,
                           clean_cache: Mapping[str, torch.Tensor], patching_metric: Metric,
                           progress: Progress | None = None, **kwargs) -> torch.Tensor:
    """:func:`get_attr_patch_resid_pre` for ``blocks.{layer}.hook_mlp_out``: the linear estimate of
    :func:`get_act_patch_mlp_out`. Returns ``[n_layers, pos]``."""
    return _attr_positions(model, corrupted_tokens, clean_cache, patching_metric, "hook_mlp_out", progress, **kwargs)


def get_attr_patch_attn_head_out_all_pos(model: VizTransformer, corrupted_tokens: torch.Tensor,
                                         clean_cache: Mapping[str, torch.Tensor], patching_metric: Metric,
                                         progress: Progress | None = None, **kwargs) -> torch.Tensor:
    """:func:`get_attr_patch_resid_pre` for each head's ``blocks.{layer}.attn.hook_z`` at every position: the linear
    estimate of :func:`get_act_patch_attn_head_out_all_pos`, the head's term summed over positions and ``d_head``.

    Returns:
        ``[n_layers, n_heads]`` float32, in the metric's units.
    """
    names = [f"blocks.{layer}.attn.hook_z" for layer in range(model.cfg.n_layers)]
    value, terms = _attr_terms(model, corrupted_tokens, clean_cache, patching_metric, names, **kwargs)
    return _done(value + torch.stack([term.sum(dim=(0, 2)) for term in terms]).cpu(), progress)  # [n_layers, n_heads]


PATCH_HOOKS = {"resid_pre": "hook_resid_pre", "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out"}


@torch.no_grad()
def component_outputs(model: VizTransformer, cache: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What each component writes into the residual stream, per position: ``L{l}H{h}`` = ``z_h W_O[h]`` and
    ``L{l}.mlp`` = ``hook_mlp_out``, each ``[pos, d_model]`` (batch row 0). Decoder blocks only."""
    out = {}
    for layer, block in enumerate(model.blocks):
        z = cache[f"blocks.{layer}.attn.hook_z"][0].float()  # [pos, n_heads, d_head]
        W_O = weight(block.attn, "W_O").float()  # real values also where a device map offloads the block
        per_head = torch.einsum("phk,hkd->hpd", z.to(W_O.device), W_O)
        for head in range(model.cfg.n_heads):
            out[f"L{layer}H{head}"] = per_head[head]
        out[f"L{layer}.mlp"] = cache[f"blocks.{layer}.hook_mlp_out"][0].float()
    return out


@torch.no_grad()
def patch_downstream(model: VizTransformer, corrupted_tokens: torch.Tensor, clean_cache: Mapping[str, torch.Tensor],
                     site: str, layer: int, index: int, **kwargs) -> dict[str, float]:
    """A patch lens for one cell: what changed downstream when that one activation is taken from the clean run.

    Args:
        site: ``"resid_pre"``, ``"attn_out"``, ``"mlp_out"`` (``index`` = position) or ``"head"`` (``index`` = head,
            its ``hook_z`` at every position).

    Returns:
        ``{component: ‖Δ‖}`` for every head (``L{l}H{h}``) and MLP (``L{l}.mlp``): the Frobenius norm, over all
        positions, of the change of what it writes into the residual stream, patched run minus corrupted run
        (components before the patch are unchanged and give 0).

    Raises:
        ValueError: an unknown site, or prompts of different lengths.
        KeyError: a hook missing from the clean cache.
    """
    n_pos = corrupted_tokens.shape[-1]
    if site == "head":
        name = f"blocks.{layer}.attn.hook_z"
        src = _clean(clean_cache, name, n_pos)

        def fn(x, hook):
            x = x.clone()
            x[:, :, index] = src[:, :, index].to(x.dtype)
            return x
    elif site in PATCH_HOOKS:
        name = f"blocks.{layer}.{PATCH_HOOKS[site]}"
        src = _clean(clean_cache, name, n_pos)

        def fn(x, hook):
            x = x.clone()
            x[:, index] = src[:, index].to(x.dtype)
            return x
    else:
        raise ValueError(f"unknown patching site {site!r} (one of: head, {', '.join(PATCH_HOOKS)})")
    wanted = lambda n: n.endswith("attn.hook_z") and not n.startswith("encoder") and ".cross_attn." not in n \
        or n.endswith("hook_mlp_out") and not n.startswith("encoder")
    _, base = model.run_with_cache(corrupted_tokens, names_filter=wanted, **kwargs)
    with model.hooks([(name, fn)]):
        _, patched = model.run_with_cache(corrupted_tokens, names_filter=wanted, **kwargs)
    before, after = component_outputs(model, base), component_outputs(model, patched)
    return {key: float((after[key] - before[key]).norm()) for key in before}
