"""Turning logits into a next-token distribution and choosing tokens from it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from viz_model.hooks import ActivationCache, NamesFilter
from viz_model.model import VizTransformer
from viz_model.rotary import cache_needs_recompute

MAX_TEMPERATURE = 100.0


def next_token_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None) -> torch.Tensor:
    """The distribution a decoder samples from, re-applied to already computed logits.

    ``p = softmax(logits / T)``; top-k keeps the k most likely tokens; top-p (nucleus sampling,
    Holtzman et al., 2020) keeps the smallest set of most likely tokens whose probability reaches p;
    the kept probabilities are renormalised. ``T == 0`` means greedy: all mass on the argmax.

    Args:
        logits: ``[..., d_vocab]`` (float).
        temperature: ``T >= 0``; values above ``MAX_TEMPERATURE`` are clipped to it.
        top_k: keep this many tokens (None or 0: all).
        top_p: nucleus mass in ``(0, 1]`` (None or 1: all).

    Returns:
        probabilities ``[..., d_vocab]`` (float32) that sum to 1 along the last axis.

    Raises:
        ValueError: for a negative or NaN temperature, negative top_k, or top_p outside (0, 1].
    """
    if not (temperature >= 0 and temperature == temperature):
        raise ValueError(f"temperature must be a number >= 0, got {temperature}")
    if top_k is not None and top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must lie in (0, 1], got {top_p}")
    logits = logits.float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    # subtract the maximum first: a tiny T would otherwise turn logits / T into inf and softmax into NaN
    shifted = logits - logits.max(-1, keepdim=True).values
    probs = torch.softmax(shifted / min(temperature, MAX_TEMPERATURE), dim=-1)
    keep = torch.ones_like(probs, dtype=torch.bool)
    order = probs.argsort(dim=-1, descending=True)
    ranked = probs.gather(-1, order)
    if top_k:
        rank_keep = torch.arange(probs.shape[-1]) < top_k
        keep &= rank_keep.expand_as(probs).scatter(-1, order, rank_keep.expand_as(probs))
    if top_p is not None and top_p < 1:
        before = ranked.cumsum(-1) - ranked  # mass of the strictly more likely tokens
        keep &= torch.zeros_like(keep).scatter(-1, order, before < top_p)
    probs = probs * keep
    return probs / probs.sum(-1, keepdim=True)


@dataclass
class Step:
    """One generated token: its id, its probability under the sampling distribution, the model's
    plain (temperature 1) probability of it, and the hooks recorded while computing it (if asked)."""

    token_id: int
    prob: float
    model_prob: float
    cache: ActivationCache | None = None


def iter_generate(model: VizTransformer, ids: list[int], n_new: int, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None, seed: int = 0,
                  record: NamesFilter | bool = False, src_ids: list[int] | None = None) -> Iterator[Step]:
    """Append up to ``n_new`` tokens to ``ids`` one at a time (greedy when ``temperature == 0``), yielding
    each :class:`Step` as soon as it is chosen.

    Generation uses a KV cache: the prompt is run once, then each step runs the model on the newest
    token only, reusing the keys and values of the earlier ones. With ``record`` (True, or a hook
    filter as in ``run_with_cache``), each step carries the hooks of the forward pass that chose its
    token: for the first step the whole prompt, afterwards the newest position only (patterns
    ``[1, head_index, 1, key_pos]``). Sampling uses a ``torch.Generator`` seeded with ``seed``, so the
    same inputs give the same tokens. Generation stops early when the context ``n_ctx`` is full: a prompt
    of ``n_ctx - m`` tokens allows at most ``m + 1`` new tokens (the last one is predicted, never read).

    LongRoPE (Phi-3 128k): the step whose sequence first exceeds ``rotary_original_ctx`` drops the cache and runs
    the whole sequence again (its recorded hooks cover every position), since the long factors then rotate every
    key differently; transformers' Phi-3 does the same (:func:`viz_model.rotary.cache_needs_recompute`).

    Encoder-decoder models: ``src_ids`` is the source; the encoder runs once and every step's
    cross-attention reads its output; ``ids`` is the decoder's prefix (usually ``[decoder_start_id]``), and
    generation stops after the model's ``decoder_end_id``.

    Raises:
        ValueError: for empty ``ids``, a missing or empty ``src_ids`` for an encoder-decoder model, or
            invalid sampling settings (see :func:`next_token_probs`).
    """
    if not ids:
        raise ValueError("generation needs at least one token to start from")
    next_token_probs(torch.zeros(1), temperature, top_k, top_p)  # validate the settings up front
    seq2seq = model.cfg.is_encoder_decoder
    if seq2seq and not src_ids:
        raise ValueError("an encoder-decoder model needs a non-empty source (src_ids)")
    gen = torch.Generator().manual_seed(seed)
    kv = model.new_kv_cache()
    names = None if record is True else record
    feed, seq = list(ids), list(ids)
    extra = {}
    with torch.no_grad():
        if seq2seq:
            extra["encoder_out"] = model.encode(torch.tensor([src_ids]))
        for _ in range(n_new):
            if kv.n_pos + len(feed) > model.cfg.n_ctx:  # the newest token no longer fits: stop
                return
            if cache_needs_recompute(model.cfg, kv.n_pos, len(feed)):  # LongRoPE: the cached keys are short-rotated
                kv, feed = model.new_kv_cache(), list(seq)
            tokens = torch.tensor([feed])
            if record is not False:
                logits, cache = model.run_with_cache(tokens, names, kv_cache=kv, **extra)
            else:
                logits, cache = model(tokens, kv_cache=kv, **extra), None
            logits = logits[0, -1].float().cpu()  # sampled on the CPU with its seeded generator, in float32
            probs = next_token_probs(logits, temperature, top_k, top_p)
            token = int(torch.multinomial(probs, 1, generator=gen)) if temperature > 0 else int(probs.argmax())
            feed = [token]
            seq.append(token)
            yield Step(token, float(probs[token]), float(torch.softmax(logits.float(), -1)[token]), cache)
            if seq2seq and token == model.cfg.decoder_end_id:
                return


def generate(model: VizTransformer, ids: list[int], n_new: int, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, seed: int = 0,
             record: NamesFilter | bool = False, src_ids: list[int] | None = None) -> list[Step]:
    """All the steps of :func:`iter_generate` as a list."""
    return list(iter_generate(model, ids, n_new, temperature, top_k, top_p, seed, record, src_ids))
