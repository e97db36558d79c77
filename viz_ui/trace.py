"""Run a model on a text and keep what the views need as numpy arrays (no Streamlit here)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from tokenizers import Tokenizer

from viz_model import Config, VizTransformer, generate
from viz_model.components import masked_scores
from viz_model.model import score_kind
from viz_model.tokenizer import token_bytes, tokenizer_kind  # noqa: F401  (re-exported for pages)

LONG_INPUT = 256  # tokens beyond which a trace stores float16 (see run_trace)


class Arrays(dict):
    """Hook name → array. Long traces keep float16 (see :func:`run_trace`); reading returns float32, so views
    and tests always compute and draw in float32.

    Long traces also leave the attention scores and patterns out (``derived``): reading ``...hook_attn_scores``
    or ``...hook_pattern`` recomputes that layer's ``[head_index, query_pos, key_pos]`` values from its recorded
    (rotated) q and k, kept in float32 for this, with the model's own operations
    (:func:`viz_model.components.masked_scores`, then softmax as in ``Attention.forward``): the very numbers
    the model computed, while a 1,024-token GPT-2-small trace holds 600 MB less. Iterating lists the stored
    names only; :meth:`names` lists every readable one.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # name -> (q name, k name, config, cross-attention, softmax: pattern rather than scores)
        self.derived: dict[str, tuple[str, str, Config, bool, bool]] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self.derived:
            q_name, k_name, cfg, cross, pattern = self.derived[name]
            q, k = (torch.tensor(self[n]).unsqueeze(0) for n in (q_name, k_name))  # copies: stored arrays are read-only
            scores = masked_scores(q, k, cfg, cross)
            return (torch.softmax(scores, dim=-1) if pattern else scores)[0].numpy()
        value = super().__getitem__(name)
        return value.astype(np.float32) if value.dtype == np.float16 else value

    def __contains__(self, name) -> bool:
        return super().__contains__(name) or name in self.derived

    def get(self, name: str, default=None):
        return self[name] if name in self else default

    def names(self) -> list[str]:
        """Every hook name readable here, stored or derived."""
        return [*self.keys(), *self.derived]


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
            out.derived[name] = (q_name, k_name, attn.cfg, attn.cross, kind == "hook_pattern")
            continue
        out[name] = cache.take(name)[0].numpy()
        out[name].flags.writeable = False  # traces are shared between sessions (viz_ui.state.get_trace)
    return out


@dataclass
class Trace:
    """One forward pass of a model over a text.

    ``arrays`` maps hook names to arrays with the batch axis removed: ``[pos, d_model]`` for the
    residual stream, ``[head_index, query_pos, key_pos]`` for patterns and scores, ``[pos, d_vocab]``
    for logits. ``n_tokens_total`` counts the tokens before truncation to the context.
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

    def __post_init__(self) -> None:
        for ids in (self.ids, self.src_ids):
            if ids is not None:
                ids.flags.writeable = False  # traces are shared between sessions (viz_ui.state.get_trace)

    @property
    def is_encoder_decoder(self) -> bool:
        return self.src_ids is not None

    @property
    def output_ids(self) -> list[int]:
        """The decoder's output: what each decoder position predicted greedily (encoder-decoder traces)."""
        return [int(i) for i in self.arrays["hook_logits"].argmax(-1)]

    @property
    def n_tokens(self) -> int:
        return len(self.ids)

    @property
    def truncated(self) -> bool:
        """Whether the text (the source, for encoder-decoder models) was cut to the context."""
        return self.n_tokens_total > (self.n_tokens if self.src_ids is None else len(self.src_ids))


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


def run_trace(model: VizTransformer, tokenizer: Tokenizer, text: str) -> Trace:
    """Tokenize ``text`` (keeping the first ``n_ctx`` tokens), run the model with every hook recorded
    except ``hook_probs`` (an exact function of ``hook_logits``).

    Encoder-decoder models: ``text`` is the source; the decoder's output is generated greedily (until the
    end token or the context is full) and the model is then run once over [start] + output, so every hook
    of the encoder, the decoder and the cross-attention is recorded for the model's own answer.

    Raises:
        ValueError: when ``text`` encodes to no tokens.
    """
    enc = tokenizer.encode(text)
    if not enc.ids:
        raise ValueError("the text has no tokens")
    n_ctx = model.cfg.n_ctx
    ids = enc.ids[:n_ctx]
    keep = lambda name: name != "hook_probs"  # noqa: E731  (softmax(hook_logits): halves what Streamlit copies)
    # long inputs: every value is kept in float16 but the logits and the q and k the attention is derived from
    # (hook_rot_q/k under rotary positions; see Arrays), which stay float32 (a GPT-2-small trace at 1,024 tokens
    # would otherwise hold 1.5 GB); views convert what they draw back to float32
    small = {}
    if len(ids) > LONG_INPUT:  # q and k stay float32: the scores and patterns are derived from them (see Arrays)
        qk = {n for name in model.hook_dict if name.endswith("hook_attn_scores") for n in model.score_inputs(name)[1:]}
        small = {"store_dtype": torch.float16, "keep_float32": ("hook_logits", *sorted(qk))}
    if not model.cfg.is_encoder_decoder:
        _, cache = model.run_with_cache(torch.tensor([ids]), names_filter=keep, **small)
        return Trace(text=text, ids=np.array(ids, dtype=np.int64), labels=[token_label(tokenizer, i) for i in ids],
                     offsets=list(enc.offsets[:n_ctx]), n_tokens_total=len(enc.ids),
                     arrays=_arrays(cache, model, derive=bool(small)))
    cfg = model.cfg
    steps = generate(model, [cfg.decoder_start_id], n_ctx - 1, 0.0, src_ids=ids)
    out = [s.token_id for s in steps]
    dec = [cfg.decoder_start_id] + (out[:-1] if out and out[-1] == cfg.decoder_end_id else out)
    _, cache = model.run_with_cache(torch.tensor([dec]), names_filter=keep, src_tokens=torch.tensor([ids]))
    labels = [token_label(tokenizer, i) for i in dec]
    return Trace(text=text, ids=np.array(dec, dtype=np.int64), labels=labels, offsets=[(0, 0)] * len(dec),
                 n_tokens_total=len(enc.ids), arrays=_arrays(cache, model, derive=False),
                 src_ids=np.array(ids, dtype=np.int64), src_labels=[token_label(tokenizer, i) for i in ids])
