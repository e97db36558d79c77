"""Interventions on transcoder features (and error nodes) in the live model, as circuit-tracer's
``ReplacementModel.feature_intervention`` and ``feature_intervention_generate``.

Setting feature ``f`` of layer ``l``'s transcoder to ``value`` at position ``p`` adds ``(value - a) * W_dec[f]`` to
``blocks.{l}.hook_mlp_out`` at ``p``, where ``a`` is the feature's activation in that very run (computed from the
run's own ``blocks.{l}.ln2.hook_normalized``). The MLPs and norms stay live, so the change propagates through the
model; with ``freeze_attention`` the attention patterns of the prompt's positions are those of the clean run (as
circuit-tracer's default), so the change travels only through the values (OV), not by moving attention.
An error node is scaled by adding ``(scale - 1) * error`` (its clean error vector) at its layer and position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from viz_model.circuits.replacement import CircuitError, as_ids, check_transcoders
from viz_model.features.dictionary import SparseDictionary

Intervention = tuple[int, int, int, float]  # (layer, pos, feature, value)
ErrorScale = tuple[int, int, float]  # (layer, pos, scale)


def _check(model, tcs, interventions, error_scales, n_pos: int) -> None:
    for layer, pos, feature, value in interventions:
        if not 0 <= layer < model.cfg.n_layers or not 0 <= pos < n_pos:
            raise CircuitError(f"intervention at layer {layer}, position {pos} is outside the model or prompt")
        if not 0 <= feature < tcs[layer].d_sae:
            raise CircuitError(f"layer {layer}'s transcoder has no feature {feature}")
        if not torch.isfinite(torch.tensor(float(value))):
            raise CircuitError("an intervention's value must be a finite number")
    for layer, pos, scale in error_scales:
        if not 0 <= layer < model.cfg.n_layers or not 0 <= pos < n_pos or not torch.isfinite(torch.tensor(float(scale))):
            raise CircuitError(f"error scale at layer {layer}, position {pos} is outside the model or prompt")


@torch.no_grad()
def _clean(model, tcs, prompt: torch.Tensor, freeze_attention: bool, error_scales: Sequence[ErrorScale]) -> dict:
    """From one clean run of the prompt: the attention patterns to freeze and the error vectors to scale."""
    n_layers = model.cfg.n_layers
    error_layers = sorted({int(item[0]) for item in error_scales})
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(n_layers)] if freeze_attention else []
    names += [f"blocks.{l}.hook_mlp_out" for l in error_layers] + [f"blocks.{l}.ln2.hook_normalized" for l in error_layers]
    if not names:
        return {}
    _, cache = model.run_with_cache(prompt[None].to(model.device), names_filter=names)
    clean = {name: cache[name] for name in names if name.endswith("hook_pattern")}
    for layer in error_layers:
        x = cache[f"blocks.{layer}.ln2.hook_normalized"][0]
        clean[("error", layer)] = cache[f"blocks.{layer}.hook_mlp_out"][0] - tcs[layer].decode(tcs[layer].encode(x))
    return clean


def _hooks(model, tcs, n_prompt: int, clean: dict, interventions: Sequence[Intervention],
           error_scales: Sequence[ErrorScale], freeze_attention: bool, record: dict):
    """The hooks of one intervened run whose first ``n_prompt`` positions are the prompt's."""
    n_layers = model.cfg.n_layers
    by_layer: dict[int, list[Intervention]] = {}
    for item in interventions:
        by_layer.setdefault(int(item[0]), []).append(item)
    errors: dict[int, list[ErrorScale]] = {}
    for item in error_scales:
        errors.setdefault(int(item[0]), []).append(item)
    inputs: dict[int, torch.Tensor] = {}
    hooks = []

    def freeze(pattern, hook):
        frozen = pattern.clone()
        frozen[..., :n_prompt, :n_prompt] = clean[hook.name].to(pattern.dtype)[..., :n_prompt, :n_prompt]
        return frozen

    def read(layer):
        def fn(x, hook):
            inputs[layer] = x
        return fn

    def write(layer):
        tc = tcs[layer]

        def fn(out, hook):
            f = tc.encode(inputs[layer])  # this run's activations [batch, pos, d_sae]
            out = out.clone()
            for _, pos, feature, value in by_layer.get(layer, ()):
                delta = (float(value) - f[:, pos, feature])[:, None] * tc.W_dec[feature]
                out[:, pos] += delta.to(out.dtype)
                f[:, pos, feature] = float(value)
            if layer in errors:
                err = clean[("error", layer)]
                for _, pos, scale in errors[layer]:
                    out[:, pos] += ((float(scale) - 1.0) * err[pos]).to(out.dtype)
            record[layer] = f
            return out
        return fn

    for layer in range(n_layers):
        hooks.append((f"blocks.{layer}.ln2.hook_normalized", read(layer)))
        hooks.append((f"blocks.{layer}.hook_mlp_out", write(layer)))
        if freeze_attention:
            hooks.append((f"blocks.{layer}.attn.hook_pattern", freeze))
    return hooks


def feature_intervention(model, tokens, transcoders: Mapping[int, SparseDictionary],
                         interventions: Sequence[Intervention], freeze_attention: bool = True,
                         error_scales: Sequence[ErrorScale] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``tokens`` with features set to values (module docstring).

    Args:
        tokens: ``[pos]`` or ``[1, pos]`` ids. transcoders: one per layer (as :func:`viz_model.circuits.attribute`).
        interventions: ``(layer, pos, feature, value)`` tuples; ``value`` in the feature's activation units
            (0 ablates it).
        freeze_attention: keep the clean run's attention patterns.
        error_scales: ``(layer, pos, scale)``: multiply that error node's vector by ``scale``.

    Returns:
        ``(logits [pos, d_vocab] float32, activations [n_layers, pos, d_sae] float32)``: the transcoders' activations
        in this run, the intervened features holding their set values (all transcoders must share ``d_sae``;
        otherwise activations are padded with zeros to the widest).

    Raises:
        CircuitError: an intervention outside the model, prompt or transcoder; a bad transcoder set or tokens.
    """
    tcs = check_transcoders(model, transcoders)
    ids = as_ids(model, tokens)
    _check(model, tcs, interventions, error_scales, len(ids))
    record: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        clean = _clean(model, tcs, ids, freeze_attention, error_scales)
        hooks = _hooks(model, tcs, len(ids), clean, interventions, error_scales, freeze_attention, record)
        logits = model.run_with_hooks(ids[None].to(model.device), fwd_hooks=hooks)
    width = max(tc.d_sae for tc in tcs.values())
    acts = torch.zeros(model.cfg.n_layers, len(ids), width)
    for layer, f in record.items():
        acts[layer, :, :f.shape[-1]] = f[0].float().cpu()
    return logits[0].float().cpu(), acts


def feature_intervention_generate(model, tokens, transcoders: Mapping[int, SparseDictionary],
                                  interventions: Sequence[Intervention], max_new_tokens: int = 20,
                                  freeze_attention: bool = True, error_scales: Sequence[ErrorScale] = (),
                                  stop_ids: Sequence[int] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy continuation of ``tokens`` with the interventions applied at the prompt's positions at every step
    (the generated positions are computed live; with ``freeze_attention`` the prompt's own attention rows keep their
    clean patterns).

    Returns:
        ``(new ids [n_new] int64, first-step logits [d_vocab] float32)``; generation stops early at a ``stop_ids`` token
        or the model's context.

    Raises:
        CircuitError: as :func:`feature_intervention`.
    """
    tcs = check_transcoders(model, transcoders)
    ids = as_ids(model, tokens)
    _check(model, tcs, interventions, error_scales, len(ids))
    out: list[int] = []
    first = None
    seq = ids
    with torch.no_grad():
        clean = _clean(model, tcs, ids, freeze_attention, error_scales)
        for _ in range(max(0, int(max_new_tokens))):
            if len(seq) >= model.cfg.n_ctx:
                break
            record: dict[int, torch.Tensor] = {}
            hooks = _hooks(model, tcs, len(ids), clean, interventions, error_scales, freeze_attention, record)
            logits = model.run_with_hooks(seq[None].to(model.device), fwd_hooks=hooks,
                                          logit_positions=[len(seq) - 1])[0, -1].float().cpu()
            first = logits if first is None else first
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            if nxt in stop_ids:
                break
            seq = torch.cat([seq, torch.tensor([nxt])])
    if first is None:
        first = torch.zeros(model.cfg.d_vocab)
    return torch.tensor(out, dtype=torch.long), first
