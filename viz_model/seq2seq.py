"""Encoder-decoder use: translate a text (greedy or sampled) and measure exact-match accuracy."""

from __future__ import annotations

from collections import defaultdict

import torch
from tokenizers import Tokenizer

from viz_model.model import VizTransformer
from viz_model.sampling import Step, generate


def translate(model: VizTransformer, tokenizer: Tokenizer, text: str, temperature: float = 0.0, seed: int = 0,
              max_new: int | None = None, record=False) -> tuple[str, list[Step]]:
    """The decoder's output for the source ``text`` (greedy when ``temperature == 0``) and its steps.

    Starts from ``decoder_start_id`` and stops after ``decoder_end_id`` or ``max_new`` tokens (default:
    the context). The output text leaves out the end token.

    Raises:
        ValueError: for a model without encoder, or a text with no tokens.
    """
    if not model.cfg.is_encoder_decoder:
        raise ValueError("translate needs an encoder-decoder model")
    src = tokenizer.encode(text).ids[:model.cfg.n_ctx]
    if not src:
        raise ValueError("the text has no tokens")
    steps = generate(model, [model.cfg.decoder_start_id], max_new or model.cfg.n_ctx, temperature, seed=seed,
                     record=record, src_ids=src)
    ids = [s.token_id for s in steps if s.token_id != model.cfg.decoder_end_id]
    return tokenizer.decode(ids), steps


@torch.no_grad()
def greedy_batch(model: VizTransformer, sources: list[list[int]], max_new: int) -> list[list[int]]:
    """Greedy outputs (without start and end tokens) for many sources; sources of equal length run as one
    batch (no padding is ever needed). Returns one id list per source, in order."""
    cfg = model.cfg
    by_len: dict[int, list[int]] = defaultdict(list)
    for i, src in enumerate(sources):
        by_len[len(src)].append(i)
    out: list[list[int]] = [[] for _ in sources]
    for idx in by_len.values():
        for start in range(0, len(idx), 512):
            chunk = idx[start:start + 512]
            enc = model.encode(torch.tensor([sources[i] for i in chunk]))
            kv = model.new_kv_cache()
            feed = torch.full((len(chunk), 1), cfg.decoder_start_id)
            done = torch.zeros(len(chunk), dtype=torch.bool)
            rows: list[torch.Tensor] = []
            for _ in range(max_new):
                token = model(feed, kv_cache=kv, encoder_out=enc)[:, -1].argmax(-1)
                rows.append(token)
                done |= token == cfg.decoder_end_id
                if bool(done.all()) or kv.n_pos >= cfg.n_ctx:
                    break
                feed = token[:, None]
            table = torch.stack(rows, 1).tolist()
            for i, ids in zip(chunk, table):
                out[i] = ids[:ids.index(cfg.decoder_end_id)] if cfg.decoder_end_id in ids else ids
    return out


def exact_match(model: VizTransformer, tokenizer: Tokenizer, pairs: list[tuple[str, str]]) -> tuple[float, list]:
    """Share of ``(source, target)`` pairs whose greedy output equals the target exactly, and the misses
    as ``(source, target, output)``."""
    sources = [tokenizer.encode(src).ids for src, _ in pairs]
    longest = max(len(tokenizer.encode(tgt).ids) for _, tgt in pairs) + 2
    outputs = [tokenizer.decode(ids) for ids in greedy_batch(model, sources, longest)]
    misses = [(src, tgt, got) for (src, tgt), got in zip(pairs, outputs) if got != tgt]
    return 1 - len(misses) / len(pairs), misses
