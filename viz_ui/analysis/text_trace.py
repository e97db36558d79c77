"""Run a model on a text and keep what the views need as numpy arrays (no Streamlit here)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from tokenizers import Tokenizer

from viz_model import Config, VizTransformer, generate
from viz_model.components import masked_scores
from viz_model.limits import attention_bytes, attn_budget_bytes, max_tokens_for_budget
from viz_model.model import score_kind
from viz_model.tokenizer import token_bytes, tokenizer_kind  # noqa: F401  (re-exported for pages)

from viz_ui.analysis.text import error_line, recoverable
from viz_ui.analysis.trace_bounded import Held, Layers, LogitRows, host_array, layer_bytes, layer_names, recomputed

LONG_INPUT = 256  # tokens beyond which a trace stores float16 (see run_trace)
HALF_ABOVE_MB = 128  # a trace whose blocks' hooks would hold more in float32 stores float16 too (see run_trace)
DEFAULT_TRACE_MB = 1024  # see trace_budget_bytes
MAX_CACHED_LAYERS = 4  # recomputed layers a bounded trace keeps at most (see run_trace)


def trace_budget_bytes() -> int:
    """What a trace may keep, in bytes: ``VIZ_TRACE_MB`` (megabytes, default 1,024). A trace whose plain capture
    would hold more is bounded (see :func:`run_trace`), and a bounded trace caches recomputed layers in half of it;
    a value that is no positive number means the default."""
    try:
        mb = float(os.environ.get("VIZ_TRACE_MB", DEFAULT_TRACE_MB))
    except ValueError:
        mb = DEFAULT_TRACE_MB
    return int((mb if mb > 0 else DEFAULT_TRACE_MB) * 2**20)


class Arrays(dict):
    """Hook name → array. Long or large traces keep float16 (see :func:`run_trace`); reading returns float32, so
    views and tests always compute and draw in float32.

    Long traces also leave the attention scores and patterns out (``derived``): reading ``...hook_attn_scores``
    or ``...hook_pattern`` recomputes that layer's ``[head_index, query_pos, key_pos]`` values from its recorded
    (rotated) q and k, kept in float32 for this, with the model's own operations
    (:func:`viz_model.components.masked_scores`, then softmax as in ``Attention.forward``): the very numbers
    the model computed, while a 1,024-token GPT-2-small trace holds 600 MB less. Iterating lists the stored
    names only; :meth:`names` lists every readable one.

    A bounded trace (:mod:`viz_ui.analysis.trace_bounded`, see :func:`run_trace`) stores no block hook: ``layers``
    recomputes them on read, bit-identical, and ``hook_logits`` is a :class:`~viz_ui.analysis.trace_bounded.LogitRows`.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # name -> (q name, k name, config, cross-attention, softmax: pattern rather than scores, the layer's
        # relative position bias module or None: T5)
        self.derived: dict[str, tuple] = {}
        self.layers: Layers | None = None  # a bounded trace's block hooks

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self.derived:
            q_name, k_name, cfg, cross, pattern, rel_pos = self.derived[name]
            return derived_scores(self[q_name], self[k_name], cfg, cross, pattern, rel_pos)
        if self.layers is not None and name in self.layers:
            return self.layers.read(name)
        value = super().__getitem__(name)
        return value.astype(np.float32) if value.dtype == np.float16 else value

    def __contains__(self, name) -> bool:
        return super().__contains__(name) or name in self.derived or (self.layers is not None and name in self.layers)

    def get(self, name: str, default=None):
        return self[name] if name in self else default

    def names(self) -> list[str]:
        """Every hook name readable here, stored, recomputed or derived."""
        return [*self.keys(), *(self.layers.layer_of if self.layers is not None else ()), *self.derived]

    def nbytes(self) -> int:
        """Bytes this trace holds now: every stored array, and for a bounded trace its residual stream, its logit
        rows and the layers in its cache (what :func:`bounded_bytes` bounds)."""
        total = sum(a.nbytes for a in self.values())
        if self.layers is not None:
            total += self.layers.resid.nbytes + self.layers.cached_bytes()
        return total


def derived_scores(q: np.ndarray, k: np.ndarray, cfg, cross: bool, pattern: bool, rel_pos=None) -> np.ndarray:
    """One attention layer's ``[head_index, query_pos, key_pos]`` scores (``pattern``: softmax of them) from its
    recorded (rotated) ``q`` ``[query_pos, n_heads, d_head]`` and ``k`` ``[key_pos, n_kv_heads, d_head]`` as a trace
    reads them (float32), with the model's own operations (:func:`viz_model.components.masked_scores`, then softmax as
    in ``Attention.forward``): what a trace's derived hooks return (:class:`Arrays`). ``cfg``, ``cross``, ``rel_pos``:
    the attention module's."""
    q, k = (torch.tensor(a).unsqueeze(0) for a in (q, k))  # copies: stored arrays are read-only
    with torch.no_grad():
        scores = masked_scores(q, k, cfg, cross, rel_pos)
    return (torch.softmax(scores, dim=-1) if pattern else scores)[0].numpy()


def as_read(tensor: torch.Tensor) -> np.ndarray:
    """A hook's value ``[batch, ...]`` of a forward pass as a trace reads its first item back: float32 for float16
    and bfloat16 values (:class:`Arrays`, :func:`~viz_ui.analysis.trace_bounded.host_array`)."""
    value = host_array(tensor[0])
    return value.astype(np.float32) if value.dtype == np.float16 else value


def text_labels(tokenizer, text: str, n_tokens: int) -> list[str]:
    """The labels of the first ``n_tokens`` tokens of ``text``, as a trace of it holds them (:attr:`Trace.labels`).

    Raises:
        ValueError: as :func:`run_trace`, for a text the tokenizer fails on.
    """
    return _labels(tokenizer, encode_text(tokenizer, text).ids[:n_tokens])


def _arrays(cache, model: VizTransformer, derive: bool) -> Arrays:
    """The batch-0 slice of every cached tensor as a read-only numpy array, in the dtype the cache stored it
    (see :func:`run_trace`), taken one at a time so that lazily computed hooks (scores and patterns) never pile
    up in float32. With ``derive`` the scores and patterns are not computed at all but derived on reading from
    the layer's q and k (see :class:`Arrays`)."""
    out = Arrays()
    for name in list(cache):
        kind = score_kind(name)
        if derive and kind:
            attn, q_name, k_name = model.score_inputs(name)
            out.derived[name] = (q_name, k_name, attn.cfg, attn.cross, kind == "hook_pattern", attn.rel_pos)
            continue
        out[name] = host_array(cache.take(name)[0])
        out[name].flags.writeable = False  # traces are shared between sessions (viz_ui.app.state.get_trace)
    return out


@dataclass
class Trace:
    """One forward pass of a model over a text.

    ``arrays`` maps hook names to arrays with the batch axis removed: ``[pos, d_model]`` for the
    residual stream, ``[head_index, query_pos, key_pos]`` for patterns and scores, ``[pos, d_vocab]``
    for logits. ``n_tokens_total`` counts the tokens before truncation.

    A text is cut to ``token_limit`` tokens: the model's context ``n_ctx``, or fewer when the attention of that many
    tokens would not fit the memory budget (``memory_limit``, see :func:`token_limit`); :attr:`cut_message` says
    which, in one line.
    """

    text: str
    ids: np.ndarray  # [pos] int64
    labels: list[str]  # display form of each token (spaces as "·", newlines as "\\n")
    offsets: list[tuple[int, int]]  # character span of each token in ``text``
    n_tokens_total: int
    arrays: dict[str, np.ndarray] = field(default_factory=Arrays)
    # encoder-decoder models: ``text`` is the source, run through the encoder (hooks ``encoder.*``); ``ids`` and
    # ``labels`` are then the decoder's input: the start token and the greedy output (its last token, the end
    # token, is predicted and never read), so that ``blocks.*`` hooks and the logits line up with them.
    src_ids: np.ndarray | None = None  # [src_pos] int64
    src_labels: list[str] | None = None
    token_limit: int | None = None  # the most tokens this trace could keep: min(n_ctx, memory_limit)
    memory_limit: int | None = None  # the memory budget's cap when it is below n_ctx (else None)
    n_ctx: int | None = None  # the model's context
    seconds: float | None = None  # how long the run took (set by viz_ui.app.state.get_trace: the model's speed)

    def __post_init__(self) -> None:
        for ids in (self.ids, self.src_ids):
            if ids is not None:
                ids.flags.writeable = False  # traces are shared between sessions (viz_ui.app.state.get_trace)

    @property
    def is_encoder_decoder(self) -> bool:
        return self.src_ids is not None

    @property
    def output_ids(self) -> list[int]:
        """The decoder's output: what each decoder position predicted greedily (encoder-decoder traces)."""
        return [int(i) for i in np.asarray(self.arrays["hook_logits"]).argmax(-1)]  # LogitRows: a bounded trace's

    @property
    def n_tokens(self) -> int:
        return len(self.ids)

    @property
    def truncated(self) -> bool:
        """Whether the text (the source, for encoder-decoder models) was cut (to the context or the memory budget)."""
        return self.n_tokens_total > self.n_used

    @property
    def n_used(self) -> int:
        """Tokens of the text that were run (the source's, for encoder-decoder models)."""
        return self.n_tokens if self.src_ids is None else len(self.src_ids)

    @property
    def cut_by_memory(self) -> bool:
        """Whether the text was cut below the model's context because of the attention memory budget."""
        return self.truncated and self.memory_limit is not None and self.n_tokens_total > self.memory_limit

    @property
    def cut_message(self) -> str | None:
        """One line for the page when the text was cut (None otherwise): how many tokens were used and why.
        Plain text (numbers only), safe for Markdown."""
        if not self.truncated:
            return None
        head = f"The text has {self.n_tokens_total:,} tokens; only the first {self.n_used:,} are used"
        if self.cut_by_memory:
            return (f"{head}: cut to {self.memory_limit:,} tokens because of the memory budget (the attention of every "
                    f"head over n tokens takes n² numbers; VIZ_ATTN_BUDGET_MB). Use a shorter text to see more.")
        context = f" (this model's context is {self.n_ctx:,} tokens)" if self.n_ctx else " (the model's context)"
        return f"{head}{context}."


def token_label(tokenizer: Tokenizer, token_id: int) -> str:
    """How a token is drawn: its text with spaces as "·" and line breaks as "\\n"; bytes that are only
    part of a UTF-8 character (a byte-level token may split an emoji) as ``<F0 9F>``.
    """
    if tokenizer.id_to_token(token_id) is None:  # e.g. nanoGPT pads GPT-2's 50,257 tokens to 50,304 rows
        return f"<unused {token_id}>"
    raw = token_bytes(tokenizer, token_id)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "<" + " ".join(f"{b:02X}" for b in raw) + ">"
    return text.replace(" ", "·").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def token_limit(cfg: Config, budget: int | None = None) -> tuple[int, int | None]:
    """``(limit, memory_limit)``: the most tokens a trace runs, ``min(n_ctx, memory_limit)``, where
    ``memory_limit`` (None when it is not below ``n_ctx``) is the longest text whose attention working set, the
    scores and pattern of every head ``2 · n_heads · n² · 4`` bytes, fits the budget (``VIZ_ATTN_BUDGET_MB``,
    default 512 MB; :func:`viz_model.limits.max_tokens_for_budget`): the views read whole ``[n_heads, n, n]``
    patterns of a layer, whatever the forward pass does in blocks."""
    cap = max_tokens_for_budget(cfg.n_heads, budget)
    return min(cfg.n_ctx, cap), (cap if cap < cfg.n_ctx else None)


def encode_text(tokenizer, text: str):
    """``tokenizer.encode(text)``, with any failure as a one-line ``ValueError``: an uploaded tokenizer may raise
    anything, or panic (a Rust ``PanicException``, which is no ``Exception``, e.g. a pre-tokenizer regex that
    backtracks past Oniguruma's limit), and the session must carry on.

    Raises:
        ValueError: the tokenizer's own ``ValueError`` (e.g. words typed for a model without tokenizer), or
            "the tokenizer failed on this text (...)".
    """
    with tokenizer_errors("the tokenizer failed on this text"):
        return tokenizer.encode(text)


@contextmanager
def tokenizer_errors(what: str) -> Iterator[None]:
    """Turn any failure inside the block (an ``Exception``, or a Rust panic, see :func:`viz_ui.analysis.text.recoverable`)
    into ``ValueError("<what> (<first line of the error>)")``; a ``ValueError`` passes as it is. For every call
    into an uploaded tokenizer (``encode``, ``decode``, ...), so that the page can show one line and carry on:
    ``with tokenizer_errors("the output cannot be decoded"): text = tokenizer.decode(ids)``."""
    try:
        yield
    except ValueError:
        raise
    except BaseException as exc:
        if not recoverable(exc):
            raise
        raise ValueError(f"{what} ({error_line(exc)})") from None


def _labels(tokenizer, ids) -> list[str]:
    with tokenizer_errors("the tokenizer cannot spell its tokens"):
        return [token_label(tokenizer, i) for i in ids]


def _derive(model: VizTransformer, n_q: int, n_k: int, budget: int) -> bool:
    """Whether storing every attention layer's scores and pattern (float32) would exceed the budget."""
    n_attn = sum(1 for name in model.hook_dict if name.endswith("hook_attn_scores"))
    return attention_bytes(model.cfg.n_heads, n_q, n_k) * n_attn > budget


def run_trace(model: VizTransformer, tokenizer: Tokenizer, text: str, bounded: bool | None = None,
              model_ref: Callable[[], VizTransformer] | None = None) -> Trace:
    """Tokenize ``text`` (keeping the first :func:`token_limit` tokens: the context, or fewer under the attention
    memory budget), run the model with every hook recorded except ``hook_probs`` (an exact function of
    ``hook_logits``). Scores and patterns are derived on reading (see :class:`Arrays`) for long texts and whenever
    storing them for every layer would exceed the budget (many heads).

    Float16: a long text (over ``LONG_INPUT`` tokens), or a trace whose blocks' hooks would hold more than
    ``HALF_ABOVE_MB`` in float32 (a 64-token text on a 1 B model), stores every hook in float16 except the logits,
    the q and k the attention is derived from, and the last block's output; reading returns float32.

    Encoder-decoder models: ``text`` is the source; the decoder's output is generated greedily (until the
    end token or the context is full) and the model is then run once over [start] + output, so every hook
    of the encoder, the decoder and the cross-attention is recorded for the model's own answer.

    Bounded traces (:mod:`viz_ui.analysis.trace_bounded`): when a plain capture would keep more than
    :func:`trace_budget_bytes` (``bounded=None``; True or False forces the choice), a model without encoder keeps
    only its residual stream, the hooks outside the blocks and the logits of the last position and of every
    ``[MASK]``; a block's hooks are recomputed when read (bit-identical), the ``n_cached`` layers last read staying
    cached, ``n_cached = clamp((budget / 2 - kept) // layer, 1, MAX_CACHED_LAYERS)`` (see :func:`bounded_bytes`).
    ``model_ref`` returns the model for those recomputations (default: ``model`` itself, which the trace then
    keeps alive).

    Raises:
        ValueError: when ``text`` encodes to no tokens, or the tokenizer fails on it (see :func:`encode_text`).
    """
    enc = encode_text(tokenizer, text)
    if not enc.ids:
        raise ValueError("the text has no tokens")
    budget = attn_budget_bytes()
    n_ctx, memory_limit = token_limit(model.cfg, budget)
    limits = {"token_limit": n_ctx, "memory_limit": memory_limit, "n_ctx": model.cfg.n_ctx}
    ids = enc.ids[:n_ctx]
    # hook_probs is softmax(hook_logits): leaving it out halves what Streamlit copies; a mixture of experts' per-expert
    # hooks (experts.{e}.*) hold only the tokens routed to that expert, [n_routed, d_mlp], not [pos, ...]: the
    # layer's hook_post holds the same values per position
    keep = lambda name: name != "hook_probs" and ".experts." not in name  # noqa: E731
    # long inputs: every value is kept in float16 but the logits, the q and k the attention is derived from
    # (hook_rot_q/k under rotary positions; see Arrays) and the last block's output the other logit rows are decoded
    # from (below), which stay float32 (a GPT-2-small trace at 1,024 tokens would otherwise hold 1.5 GB); views
    # convert what they draw back to float32
    # large models store float16 at any length (HALF_ABOVE_MB): a 64-token trace of a 1.24 B model holds 200 MB in
    # float32, 115 MB so; the cache keeps up to 32 traces, and faulting in fresh memory was half of that model's pass
    # on this machine's VM (0.55 s instead of 1.2 s of kernel time per trace, bench/real_size.py)
    names = None if model.cfg.is_encoder_decoder else layer_names(model, keep, score_kind)
    small = {}
    if len(ids) > LONG_INPUT or (names and blocks_bytes(model, names, len(ids)) > HALF_ABOVE_MB * 2**20):
        # q and k stay float32: the scores and patterns are derived from them (see Arrays)
        qk = {n for name in model.hook_dict if name.endswith("hook_attn_scores") for n in model.score_inputs(name)[1:]}
        small = {"store_dtype": torch.float16, "keep_float32": ("hook_logits", *sorted(qk))}
    if not model.cfg.is_encoder_decoder:
        labels = _labels(tokenizer, ids)
        common = dict(text=text, ids=np.array(ids, dtype=np.int64), labels=labels, offsets=list(enc.offsets[:n_ctx]),
                      n_tokens_total=len(enc.ids), **limits)
        if bounded is None:
            bounded = plain_bytes(model, names, len(ids), bool(small)) > trace_budget_bytes()
        if bounded:
            arrays = _bounded(model, ids, names, keep, mask_positions(tokenizer, ids), model_ref or Held(model))
            return Trace(arrays=arrays, **common)
        # the unembedding is deferred: only the last position's row and the [MASK]s' are decoded now (the start
        # page, the output page's default and a masked model's answers read them); the other rows on first read
        # (LogitRows), from the last block's output kept in float32
        rows = sorted({len(ids) - 1, *mask_positions(tokenizer, ids)}) if model.has_lm_head else None
        final = f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"
        if small and rows:
            small["keep_float32"] = (*small["keep_float32"], final)
        _, cache = model.run_with_cache(torch.tensor([ids]), names_filter=keep, logit_positions=rows, **small)
        final_resid = cache[final][0].detach().cpu().clone() if rows else None
        arrays = _arrays(cache, model, derive=bool(small) or _derive(model, len(ids), len(ids), budget))
        if rows:
            logits = arrays["hook_logits"]
            kept = {p: logits[p].copy() for p in rows}
            for row in kept.values():
                row.flags.writeable = False  # traces are shared between sessions
            arrays["hook_logits"] = LogitRows(kept, final_resid, model.cfg.d_vocab,
                                              model_ref or Held(model), keep_all=True)
        return Trace(arrays=arrays, **common)
    cfg = model.cfg
    steps = generate(model, [cfg.decoder_start_id], n_ctx - 1, 0.0, src_ids=ids)
    out = [s.token_id for s in steps]
    dec = [cfg.decoder_start_id] + (out[:-1] if out and out[-1] == cfg.decoder_end_id else out)
    labels, src_labels = _labels(tokenizer, dec), _labels(tokenizer, ids)
    _, cache = model.run_with_cache(torch.tensor([dec]), names_filter=keep, src_tokens=torch.tensor([ids]))
    n = max(len(dec), len(ids))
    return Trace(text=text, ids=np.array(dec, dtype=np.int64), labels=labels, offsets=[(0, 0)] * len(dec),
                 n_tokens_total=len(enc.ids), arrays=_arrays(cache, model, derive=_derive(model, n, n, budget)),
                 src_ids=np.array(ids, dtype=np.int64), src_labels=src_labels, **limits)


def mask_positions(tokenizer, ids) -> list[int]:
    """Positions of the tokenizer's ``[MASK]`` token (BERT-style; also ``<mask>``) in ``ids``; none for a tokenizer
    without ``token_to_id`` (an uploaded one) or without such a token."""
    try:
        for piece in ("[MASK]", "<mask>"):
            mask_id = tokenizer.token_to_id(piece)
            if mask_id is not None:
                return [i for i, t in enumerate(ids) if int(t) == mask_id]
    except Exception:  # an uploaded tokenizer without token_to_id: no mask positions
        return []
    return []


def blocks_bytes(model: VizTransformer, names: list[list[str]], n_tokens: int) -> int:
    """What every block's hooks ``names`` (one list per layer, see :func:`layer_names`) hold for ``n_tokens`` tokens
    in float32, in bytes, estimated from the first block's."""
    return model.cfg.n_layers * layer_bytes(names[0], n_tokens, model) if names and names[0] else 0


def plain_bytes(model: VizTransformer, names: list[list[str]], n_tokens: int, half: bool) -> int:
    """What a plain capture of ``n_tokens`` tokens keeps, in bytes, estimated: every block's hooks (float32, or
    float16 with ``half``: long texts, see :func:`run_trace`), the logits (float32) and the residual-sized hooks
    outside the blocks (about 4 per position)."""
    blocks = blocks_bytes(model, names, n_tokens) // (2 if half else 1)
    logits = n_tokens * model.cfg.d_vocab * 4 if model.has_lm_head else 0
    return blocks + logits + 4 * n_tokens * model.cfg.d_model * 4


def bounded_bytes(model: VizTransformer, n_tokens: int, n_kept_rows: int = 1, outer: int = 0) -> dict[str, int]:
    """The bytes a bounded trace of ``n_tokens`` tokens keeps, by part (the formula docs/memory.md gives; ``outer``:
    the bytes of the hooks outside the blocks, see the last item):

    - ``resid``: ``(n_layers + 1) · n_tokens · d_model · itemsize`` (the model's dtype);
    - ``logits``: ``n_kept_rows · d_vocab · 4`` (the last position and each ``[MASK]``);
    - ``cache``: at most ``n_cached · layer`` where ``layer`` is one block's hooks in float32
      (:func:`~viz_ui.analysis.trace_bounded.layer_bytes`) and ``n_cached = clamp((budget / 2 - kept) // layer, 1, 4)``,
      plus at most 16 logit rows read elsewhere (``16 · d_vocab · 4``);
    - the hooks outside the blocks are the stored arrays that remain (a few ``[pos, d_model]``; T5's bias
      ``[n_heads, pos, pos]``), counted by :meth:`Arrays.nbytes`.
    """
    cfg = model.cfg
    names = layer_names(model, lambda n: ".experts." not in n, score_kind)
    layer = layer_bytes(recomputed(names[0]), n_tokens, model) if names and names[0] else 0
    resid = (cfg.n_layers + 1) * n_tokens * cfg.d_model * torch.finfo(model.dtype).bits // 8
    logits = n_kept_rows * cfg.d_vocab * 4 if model.has_lm_head else 0
    n_cached = _n_cached(trace_budget_bytes() // 2 - resid - logits - outer, layer)
    return {"resid": resid, "logits": logits, "layer": layer, "n_cached": n_cached,
            "cache": n_cached * layer + (16 * cfg.d_vocab * 4 if model.has_lm_head else 0)}


def _n_cached(room: int, layer: int) -> int:
    return max(1, min(MAX_CACHED_LAYERS, room // max(layer, 1)))


def _bounded(model: VizTransformer, ids: list[int], names: list[list[str]], keep, masks: list[int],
             model_ref: Callable[[], VizTransformer]) -> Arrays:
    """Run the model once, keeping what a bounded trace keeps (see :func:`run_trace`)."""
    n_layers = model.cfg.n_layers
    inner = {n for layer in names for n in layer} | {n for n in model.hook_dict if n.startswith("blocks.")}
    outer = [n for n in model.hook_dict if keep(n) and n not in inner and n != "hook_logits"]
    resid_names = [f"blocks.{i}.hook_resid_pre" for i in range(n_layers)] + [f"blocks.{n_layers - 1}.hook_resid_post"]
    rows = sorted({len(ids) - 1, *masks}) if model.has_lm_head else None  # the only rows decoded now (LogitRows)
    logits, cache = model.run_with_cache(torch.tensor([ids]), names_filter=[*outer, *resid_names], logit_positions=rows)
    out = Arrays()
    for name in outer:
        out[name] = host_array(cache.take(name)[0])
    resid = torch.stack([cache.take(name)[0] for name in resid_names]).cpu()  # [n_layers + 1, pos, d_model]
    del cache
    kept_bytes = resid.nbytes + sum(a.nbytes for a in out.values())
    if model.has_lm_head:
        kept = {p: host_array(logits[0, p].float().clone()) for p in rows}
        out["hook_logits"] = LogitRows(kept, resid[-1], model.cfg.d_vocab, model_ref)
        kept_bytes += sum(r.nbytes for r in kept.values())
    del logits
    layer = layer_bytes(recomputed(names[0]), len(ids), model) if names and names[0] else 0
    out.layers = Layers(resid, names, model_ref, _n_cached(trace_budget_bytes() // 2 - kept_bytes, layer))
    for name in model.hook_dict:  # scores and patterns: derived from the recomputed q and k
        kind = score_kind(name)
        if kind and keep(name) and name.startswith("blocks."):
            attn, q_name, k_name = model.score_inputs(name)
            out.derived[name] = (q_name, k_name, attn.cfg, attn.cross, kind == "hook_pattern", attn.rel_pos)
    return out
