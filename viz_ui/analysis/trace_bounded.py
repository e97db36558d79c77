"""A trace whose memory is bounded: the residual stream is kept, every layer's internals are recomputed on read.

A plain trace keeps every hook of every layer: on a Llama-3.2-1B-shaped model at 1,024 tokens that is ~3 GB in
float32 (~1.6 GB in float16, plus 525 MB of float32 logits). A *bounded* trace (:func:`capture`) keeps

- the residual stream entering every block and leaving the last one, ``(n_layers + 1) · pos · d_model`` values
  in the model's dtype: ``blocks.{i}.hook_resid_pre`` and ``blocks.{i}.hook_resid_post`` are read from it as
  they are (the same tensors the forward pass passed on);
- every hook outside the blocks (embeddings, ``ln_final.*``, T5's ``rel_pos.hook_bias``) as recorded;
- the logits of the positions the pages open on (the last one, and every ``[MASK]``), float32 as computed;
  the other rows are computed when read (:class:`LogitRows`);

and recomputes a block's other hooks when one is read, by running that one block (the model's own module) on
its recorded input: the very operations on the very numbers of the forward pass, so every value is bit-identical
to a plain capture's float32 (tests/test_trace_bounded.py). The last ``n_cached`` layers read stay in a
least-recently-used cache. Attention scores and patterns are derived from the layer's q and k as in a plain long
trace (:class:`viz_ui.analysis.text_trace.Arrays`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import torch

from viz_model import VizTransformer

LOGIT_CACHE_ROWS = 16  # logit rows computed on read that stay cached ([d_vocab] float32 each)


def host_array(tensor: torch.Tensor) -> np.ndarray:
    """A tensor as a read-only numpy array on the CPU: bfloat16 (which numpy lacks) becomes float32, exactly;
    float16 and float32 keep their dtype."""
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    out = tensor.cpu().numpy()
    out.flags.writeable = False
    return out


class Held:
    """``Held(model)()`` is ``model``: a bounded trace's default ``model_ref``, which keeps the model alive (and
    pickles it with the trace)."""

    def __init__(self, model: VizTransformer) -> None:
        self.model = model

    def __call__(self) -> VizTransformer:
        return self.model


class _Lru:
    """A thread-safe least-recently-used cache ``key -> value`` of at most ``size`` entries (sessions share
    traces and read them from their own threads). Dropped from pickles: it is refilled on read."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, compute: Callable[[], object]):
        with self._lock:  # one computation at a time: two sessions reading the same layer compute it once
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            value = compute()
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
            return value

    def values(self) -> list:
        with self._lock:
            return list(self._items.values())

    def __getstate__(self) -> dict:
        return {"size": self.size}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["size"])


class Layers:
    """Hooks of the blocks of a bounded trace, recomputed a block at a time from the block's recorded input.

    ``resid``: ``[n_layers + 1, pos, d_model]`` in the model's dtype (row ``i`` enters block ``i``, the last row
    leaves the last block); ``names[i]``: the hook names of block ``i`` to record (as a plain capture records
    them); ``model_ref()``: the model (called on each recomputation, so that a trace need not pin a model that
    the app's cache let go: the app passes a function that loads it again).
    """

    def __init__(self, resid: torch.Tensor, names: list[list[str]], model_ref: Callable[[], VizTransformer],
                 n_cached: int) -> None:
        self.resid = resid
        self.names = names
        self.model_ref = model_ref
        self.layer_of = {name: i for i, layer in enumerate(names) for name in layer}
        self.inner = [recomputed(layer) for layer in names]  # what a recomputation records
        self.cache = _Lru(n_cached)

    def __contains__(self, name: str) -> bool:
        return name in self.layer_of

    def read(self, name: str) -> np.ndarray:
        """The value of hook ``name`` of a block, batch axis removed, float32 (float16 for a float16 model).

        Raises:
            KeyError: for a name that is not a recorded hook of a block.
        """
        layer = self.layer_of[name]
        if name == f"blocks.{layer}.hook_resid_pre":
            return host_array(self.resid[layer])
        if name == f"blocks.{layer}.hook_resid_post":
            return host_array(self.resid[layer + 1])
        return self.cache.get(layer, lambda: self._run(layer))[name]

    @torch.no_grad()
    def _run(self, layer: int) -> dict[str, np.ndarray]:
        model = self.model_ref()
        out: dict[str, np.ndarray] = {}
        me = threading.get_ident()

        def save(tensor: torch.Tensor, hook) -> None:  # the model is shared: another session's pass may run it now
            if threading.get_ident() == me:
                out[hook.name] = host_array(tensor[0])
        with model.hooks((name, save) for name in self.inner[layer]):
            model.blocks[layer](self.resid[layer].unsqueeze(0).to(model.device))
        return out

    def cached_bytes(self) -> int:
        """Bytes held now by the recomputed layers in the cache."""
        return sum(a.nbytes for layer in self.cache.values() for a in layer.values())


class LogitRows:
    """The logits of a trace, ``[pos, d_vocab]`` float32, read a row at a time: ``rows[pos]``.

    ``kept`` rows (position → ``[d_vocab]``) are the forward pass's own; any other row is computed on read from
    the residual stream leaving the last block (``final`` ``[pos, d_model]``) with the model's own
    :meth:`~viz_model.VizTransformer.decode` (final norm, unembedding, bias, soft-cap) on that one position: the
    same operations on the same numbers, equal to the full pass's row up to float32 summation order (a
    matrix-vector product adds in another order than the pass's matrix product; measured below 1e-5 relative).
    ``np.asarray(rows)`` and ``rows.astype(dtype)`` build the whole ``[pos, d_vocab]`` array.

    ``keep_all`` (a plain trace's logits, short enough to hold whole): the first read of the whole array decodes
    every missing row in one batched product (the forward pass's own computation, deferred) and keeps the result;
    rows read one at a time before that are computed one at a time. Without it (a bounded trace: 1,024 positions
    of a 128k vocabulary would be 512 MB) only the last :data:`LOGIT_CACHE_ROWS` rows read stay cached.
    """

    ndim = 2
    dtype = np.dtype(np.float32)

    def __init__(self, kept: dict[int, np.ndarray], final: torch.Tensor, d_vocab: int,
                 model_ref: Callable[[], VizTransformer], keep_all: bool = False) -> None:
        self.kept, self.final, self.model_ref, self.keep_all = kept, final, model_ref, keep_all
        self.shape = (final.shape[0], d_vocab)
        self.cache = _Lru(LOGIT_CACHE_ROWS)
        self._all: np.ndarray | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            pos = int(key) + (self.shape[0] if key < 0 else 0)
            if not 0 <= pos < self.shape[0]:
                raise IndexError(f"position {key} is outside the trace's {self.shape[0]} tokens")
            if self._all is not None:
                return self._all[pos]
            return self.kept[pos] if pos in self.kept else self.cache.get(pos, lambda: self._row(pos))
        return np.asarray(self)[key]

    @torch.no_grad()
    def _row(self, pos: int) -> np.ndarray:
        model = self.model_ref()
        return host_array(model.decode(self.final[pos:pos + 1].to(model.device))[0].float())

    @torch.no_grad()
    def _whole(self) -> np.ndarray:
        with self._lock:  # sessions share traces: the first reader decodes, the others wait and reuse it
            if self._all is None:
                model = self.model_ref()
                out = model.decode(self.final.to(model.device)).float().cpu().numpy()
                for pos, row in self.kept.items():  # the forward pass's own rows stay as they were
                    out[pos] = row
                out.flags.writeable = False
                self._all = out
            return self._all

    def astype(self, dtype, **kwargs) -> np.ndarray:
        """Every row, ``[pos, d_vocab]``, as ``dtype`` (as ``ndarray.astype``: the MoE page's softmax uses it)."""
        return np.asarray(self).astype(dtype, **kwargs)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if self.keep_all:
            out = self._whole()
        else:
            out = np.stack([self[i] for i in range(self.shape[0])]) if self.shape[0] else np.zeros(self.shape, np.float32)
        return out if dtype is None else out.astype(dtype)

    @property
    def nbytes(self) -> int:
        """Bytes held: the kept rows, the cached ones and the whole array once built (the residual it decodes is
        counted by the trace)."""
        held = sum(r.nbytes for r in self.kept.values()) + sum(r.nbytes for r in self.cache.values())
        return held + (self._all.nbytes if self._all is not None else 0)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def layer_names(model: VizTransformer, keep: Callable[[str], bool], skip: Callable[[str], bool]) -> list[list[str]]:
    """Per block, the hook names a plain capture records there: those ``keep`` accepts, less those ``skip``
    names (the attention scores and patterns, derived from q and k)."""
    return [[n for n in model.hook_dict if n.startswith(f"blocks.{i}.") and keep(n) and not skip(n)]
            for i in range(model.cfg.n_layers)]


def recomputed(names: list[str]) -> list[str]:
    """The hooks of a block that a recomputation records: all of ``names`` but the block's input and output
    (``hook_resid_pre``, ``hook_resid_post``), which the bounded trace keeps."""
    return [n for n in names if not n.endswith((".hook_resid_pre", ".hook_resid_post")) or n.count(".") != 2]


def layer_bytes(names: list[str], n_tokens: int, model: VizTransformer) -> int:
    """Bytes of the hooks ``names`` of one block at ``n_tokens`` tokens (float32, or the model's float16), from a
    one-token run's shapes (every block hook but the scores and patterns grows linearly with the tokens)."""
    sizes: dict[str, int] = {}
    record = lambda t, hook: sizes.__setitem__(hook.name, t[0].numel() * max(4 if t.dtype != torch.float16 else 2, 1))  # noqa: E731
    with torch.no_grad(), model.hooks((n, record) for n in names):
        x = torch.zeros(1, 1, model.cfg.d_model, dtype=model.dtype, device=model.device)
        model.blocks[int(names[0].split(".")[1])](x)
    return sum(sizes.values()) * n_tokens
