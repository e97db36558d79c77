"""A precomputed index of each feature's top-activating contexts on a corpus, and its activation histogram.

Files (written by :func:`save_index`, read by :func:`load_index`):

- ``<model folder>/corpus.safetensors``: ``tokens`` int16 ``[n_windows, window]``, the corpus the index was built
  on, cut into windows that were each run through the model from position 0.
- ``<dictionary folder>/top_contexts.safetensors``: for ``d_sae`` features and ``n_top`` contexts each (at most one
  per window, strongest first): ``window`` int32 ``[d_sae, n_top]`` (-1: fewer contexts), ``start`` and ``peak``
  int16 (the context's first position and the strongest position, within the window), ``value`` float16 (the
  activation at the peak), ``acts`` float16 ``[d_sae, n_top, context]`` (the feature's activation over the context,
  computed in the whole window); and over the corpus ``freq`` float32 ``[d_sae]`` (fraction of tokens where the
  feature is active), ``act_max`` float32, ``hist`` int32 ``[d_sae, bins]`` (counts of its non-zero activations on
  equal bins from 0 to ``act_max``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

CORPUS_FILE, INDEX_FILE = "corpus.safetensors", "top_contexts.safetensors"


@torch.no_grad()
def build_index(acts: torch.Tensor, n_top: int = 8, context: int = 24, bins: int = 20,
                lead: int = 19) -> dict[str, torch.Tensor]:
    """The index tensors (module docstring) from a corpus's feature activations ``acts`` ``[n_windows, window,
    d_sae]`` (any float dtype). A context is ``context`` tokens that start ``lead`` tokens before the peak,
    shifted to stay inside its window.

    Raises:
        ValueError: ``acts`` not 3-D, or windows shorter than ``context``.
    """
    if acts.ndim != 3 or acts.shape[1] < context:
        raise ValueError(f"acts must be [n_windows, window >= {context}, d_sae], got {tuple(acts.shape)}")
    n_win, window, d_sae = acts.shape
    best, peak = acts.max(dim=1)  # [n_win, d_sae]: each window's strongest position per feature
    k = min(n_top, n_win)
    top = best.float().topk(k, dim=0)  # [k, d_sae]
    win = top.indices.T.contiguous()  # [d_sae, k]
    val = top.values.T.contiguous()
    pk = peak.gather(0, top.indices).T.contiguous()
    start = (pk - lead).clamp(0, window - context)
    feats = torch.arange(d_sae)[:, None, None]
    pos = start[:, :, None] + torch.arange(context)
    ctx = acts[win[:, :, None], pos, feats]  # [d_sae, k, context]
    empty = val <= 0
    win[empty] = -1
    flat = acts.reshape(-1, d_sae).float()
    act_max = flat.max(0).values
    hist = torch.zeros(d_sae, bins, dtype=torch.int32)
    for i in range(d_sae):
        v = flat[:, i]
        v = v[v > 0]
        if len(v):
            hist[i] = torch.histc(v, bins, 0.0, float(act_max[i])).to(torch.int32)
    if k < n_top:  # pad to n_top
        pad = n_top - k
        win = torch.cat([win, torch.full((d_sae, pad), -1, dtype=win.dtype)], 1)
        val, pk, start = (torch.cat([t, torch.zeros(d_sae, pad, dtype=t.dtype)], 1) for t in (val, pk, start))
        ctx = torch.cat([ctx, torch.zeros(d_sae, pad, context, dtype=ctx.dtype)], 1)
    return {"window": win.to(torch.int32), "start": start.to(torch.int16), "peak": pk.to(torch.int16),
            "value": val.to(torch.float16), "acts": ctx.to(torch.float16),
            "freq": (flat > 0).float().mean(0), "act_max": act_max, "hist": hist}


def save_index(index: dict[str, torch.Tensor], folder: str | Path) -> Path:
    """Write ``index`` (from :func:`build_index`) as ``folder/top_contexts.safetensors``; returns the path."""
    path = Path(folder) / INDEX_FILE
    save_file({k: v.contiguous() for k, v in index.items()}, str(path))
    return path


def save_corpus(windows: torch.Tensor, folder: str | Path) -> Path:
    """Write token windows ``[n_windows, window]`` (ids < 32,768) as ``folder/corpus.safetensors`` (int16)."""
    if windows.numel() and int(windows.max()) >= 2**15:
        raise ValueError("corpus ids must be below 32,768 to be stored as int16")
    path = Path(folder) / CORPUS_FILE
    save_file({"tokens": windows.to(torch.int16).contiguous()}, str(path))
    return path


@dataclass
class Context:
    """One top-activating context of a feature: ``tokens`` (ids), ``acts`` (the feature's activation at each),
    ``peak`` (index into both of the strongest token) and ``value`` (its activation)."""
    tokens: list[int]
    acts: list[float]
    peak: int
    value: float


class FeatureIndex:
    """A dictionary's index (module docstring) with its corpus; ``contexts(i)`` lists feature ``i``'s contexts."""

    def __init__(self, index: dict[str, torch.Tensor], corpus: torch.Tensor) -> None:
        self.index, self.corpus = index, corpus.long()
        self.d_sae, self.n_top = index["window"].shape

    def contexts(self, feature: int) -> list[Context]:
        """Feature ``feature``'s top contexts, strongest first (fewer than ``n_top`` when it fires in fewer windows).

        Raises:
            IndexError: a feature out of range.
        """
        if not 0 <= feature < self.d_sae:
            raise IndexError(f"no feature {feature}: the index has {self.d_sae}")
        out = []
        ix = self.index
        n = ix["acts"].shape[-1]
        for j in range(self.n_top):
            w = int(ix["window"][feature, j])
            if w < 0:
                break
            s = int(ix["start"][feature, j])
            out.append(Context(self.corpus[w, s:s + n].tolist(), ix["acts"][feature, j].float().tolist(),
                               int(ix["peak"][feature, j]) - s, float(ix["value"][feature, j])))
        return out

    def histogram(self, feature: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(counts [bins], edges [bins + 1])`` of the feature's non-zero activations over the corpus."""
        counts = self.index["hist"][feature]
        return counts, torch.linspace(0.0, float(self.index["act_max"][feature]), len(counts) + 1)

    def frequency(self, feature: int) -> float:
        """The fraction of the corpus's tokens where the feature is active."""
        return float(self.index["freq"][feature])


def load_index(folder: str | Path) -> FeatureIndex:
    """The index of the dictionary in ``folder`` (``top_contexts.safetensors``) with the corpus of its parent folder.

    Raises:
        FileNotFoundError: either file missing. ValueError: tensors with inconsistent shapes or windows outside the corpus.
    """
    folder = Path(folder)
    index = load_file(str(folder / INDEX_FILE))
    corpus = load_file(str(folder.parent / CORPUS_FILE))["tokens"]
    shape = index["window"].shape
    if any(index[k].shape != shape for k in ("start", "peak", "value")) or index["acts"].shape[:2] != shape:
        raise ValueError(f"{folder.name}: {INDEX_FILE} has inconsistent shapes")
    if int(index["window"].max()) >= len(corpus) or int(index["start"].max()) + index["acts"].shape[-1] > corpus.shape[1]:
        raise ValueError(f"{folder.name}: {INDEX_FILE} points outside the corpus")
    return FeatureIndex(index, corpus)
