"""Run a model on a text and keep what the views need as numpy arrays (no Streamlit here)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from tokenizers import Tokenizer

from viz_model import VizTransformer
from viz_model.tokenizer import token_bytes, tokenizer_kind  # noqa: F401  (re-exported for pages)


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
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n_tokens(self) -> int:
        return len(self.ids)

    @property
    def truncated(self) -> bool:
        return self.n_tokens_total > self.n_tokens


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

    Raises:
        ValueError: when ``text`` encodes to no tokens.
    """
    enc = tokenizer.encode(text)
    if not enc.ids:
        raise ValueError("the text has no tokens")
    n_ctx = model.cfg.n_ctx
    ids = enc.ids[:n_ctx]
    # hook_probs is softmax(hook_logits): dropped to halve what Streamlit's cache copies per rerun
    _, cache = model.run_with_cache(torch.tensor([ids]), names_filter=lambda name: name != "hook_probs")
    arrays = {name: t[0].float().numpy() for name, t in cache.items()}
    return Trace(text=text, ids=np.array(ids, dtype=np.int64),
                 labels=[token_label(tokenizer, i) for i in ids], offsets=list(enc.offsets[:n_ctx]),
                 n_tokens_total=len(enc.ids), arrays=arrays)
