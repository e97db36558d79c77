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

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from viz_model.loading.checkpoint import first_line, reraise_interrupts
from viz_model.limits import max_model_bytes
from viz_model.features.saelens import CFG_FILE, DictionaryError, read_cfg

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


INDEX_DTYPES = {"window": "I32", "start": "I16", "peak": "I16", "value": "F16", "acts": "F16", "freq": "F32",
                "act_max": "F32", "hist": "I32"}  # safetensors' names of the dtypes save_index writes
INT_DTYPES = ("I16", "I32", "I64", "U8", "I8", "U16")  # a corpus's token ids


def _header(path: Path, label: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{name: (dtype, shape)}`` of a safetensors file, from its header alone."""
    with safe_open(str(path), framework="pt") as f:
        out = {}
        for name in f.keys():
            part = f.get_slice(name)
            out[name] = (part.get_dtype(), tuple(int(n) for n in part.get_shape()))
        return out


def _check_headers(folder: Path, index: dict, corpus: dict, d_sae: int | None) -> None:
    """Names, dtypes and shapes of an index and its corpus (see :func:`load_index`), before any tensor is read."""
    label = folder.name or str(folder)
    if set(index) != set(INDEX_DTYPES):
        missing, extra = sorted(set(INDEX_DTYPES) - set(index)), sorted(set(index) - set(INDEX_DTYPES))
        raise DictionaryError(f"{label}: {INDEX_FILE} " + (f"lacks {', '.join(missing)}" if missing else
                                                             f"has unexpected tensors {', '.join(extra)[:80]}"))
    for name, want in INDEX_DTYPES.items():
        if index[name][0] != want:
            raise DictionaryError(f"{label}: {INDEX_FILE}'s {name} has dtype {index[name][0]}, {want} expected")
    shape = index["window"][1]
    if len(shape) != 2 or min(shape) < 1:
        raise DictionaryError(f"{label}: {INDEX_FILE}'s window has shape {list(shape)}, [d_sae, n_top] expected")
    n_feat = shape[0]
    acts = index["acts"][1]
    wants = {"start": shape, "peak": shape, "value": shape, "freq": (n_feat,), "act_max": (n_feat,)}
    bad = [k for k, v in wants.items() if index[k][1] != v]
    if len(acts) != 3 or acts[:2] != shape or acts[2] < 1:
        bad.append("acts")
    hist = index["hist"][1]
    if len(hist) != 2 or hist[0] != n_feat or hist[1] < 1:
        bad.append("hist")
    if bad:
        raise DictionaryError(f"{label}: {INDEX_FILE} has inconsistent shapes ({', '.join(bad)} against window "
                              f"{list(shape)})")
    if d_sae is not None and n_feat != d_sae:
        raise DictionaryError(f"{label}: {INDEX_FILE} is for {n_feat:,} features, its dictionary has d_sae {d_sae:,}")
    if set(corpus) != {"tokens"} or corpus["tokens"][0] not in INT_DTYPES or len(corpus["tokens"][1]) != 2:
        raise DictionaryError(f"{label}: {CORPUS_FILE} must hold one integer tensor tokens [n_windows, window]")
    n_windows, window = corpus["tokens"][1]
    if n_windows < 1 or window < acts[2]:
        raise DictionaryError(f"{label}: {CORPUS_FILE}'s windows ({n_windows} of {window} tokens) cannot hold "
                              f"contexts of {acts[2]} tokens")
    size = sum(math.prod(s) * _ITEMSIZE[t] for t, s in [*index.values(), *corpus.values()])
    if size > max_model_bytes():
        raise DictionaryError(f"{label}: its index and corpus need {size / 2**20:,.0f} MB, above the "
                              f"{max_model_bytes() / 2**20:,.0f} MB cap (VIZ_MAX_MODEL_MB)")


_ITEMSIZE = {"I16": 2, "I32": 4, "I64": 8, "U8": 1, "I8": 1, "U16": 2, "F16": 2, "F32": 4}


def _check_values(label: str, index: dict[str, torch.Tensor], corpus: torch.Tensor, d_vocab: int | None) -> None:
    """Every context inside the corpus, its peak inside the context, ids inside the vocabulary, finite numbers."""
    window, start, peak = index["window"].long(), index["start"].long(), index["peak"].long()
    n_ctx = index["acts"].shape[-1]
    used = window >= 0
    if (window < -1).any() or (window >= corpus.shape[0]).any():
        raise DictionaryError(f"{label}: {INDEX_FILE} points at windows outside the corpus's {corpus.shape[0]:,}")
    if used.any():
        s, p = start[used], peak[used]
        if (s < 0).any() or (s + n_ctx > corpus.shape[1]).any():
            raise DictionaryError(f"{label}: {INDEX_FILE} has contexts that run outside their "
                                  f"{corpus.shape[1]}-token windows")
        if (p < s).any() or (p >= s + n_ctx).any():
            raise DictionaryError(f"{label}: {INDEX_FILE} has peaks outside their contexts")
    if corpus.numel() and (int(corpus.min()) < 0 or (d_vocab is not None and int(corpus.max()) >= d_vocab)):
        raise DictionaryError(f"{label}: {CORPUS_FILE} holds token ids outside the model's vocabulary "
                              f"(0 to {d_vocab - 1 if d_vocab else 'its size'})")
    for name in ("value", "acts", "freq", "act_max"):
        if not torch.isfinite(index[name]).all():
            raise DictionaryError(f"{label}: {INDEX_FILE}'s {name} holds NaN or infinite values")
    if (index["hist"] < 0).any() or (index["freq"] < 0).any() or (index["freq"] > 1).any():
        raise DictionaryError(f"{label}: {INDEX_FILE}'s hist or freq holds values out of range")


def load_index(folder: str | Path, d_vocab: int | None = None) -> FeatureIndex:
    """The index of the dictionary in ``folder`` (``top_contexts.safetensors``) with the corpus of its parent folder,
    checked as a hostile file before anything is shown from it: names, dtypes and shapes from the headers (the
    tensors of :func:`save_index`, agreeing with each other and with the ``d_sae`` of the folder's ``cfg.json`` when
    there is one; sizes within the memory cap), then the values (every context inside its corpus window, every peak
    inside its context, corpus ids in ``[0, d_vocab)``, finite activations). A page can then read any feature below
    ``d_sae`` and show every token it names.

    Raises:
        FileNotFoundError: ``folder`` has no index (a dictionary without one).
        DictionaryError: one line, for anything else: no corpus beside it, a file that is not safetensors, missing or
            extra tensors, dtypes, shapes that disagree with each other or with the dictionary, contexts outside the
            corpus, ids outside the vocabulary, NaN, a size above the cap.
    """
    folder = Path(folder)
    label = folder.name or str(folder)
    path, corpus_path = folder / INDEX_FILE, folder.parent / CORPUS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{label}: no {INDEX_FILE}")
    if not corpus_path.is_file():
        raise DictionaryError(f"{label}: {INDEX_FILE} has no {CORPUS_FILE} beside its folder")
    d_sae = read_cfg(folder)["d_sae"] if (folder / CFG_FILE).is_file() else None
    try:
        heads = _header(path, label), _header(corpus_path, label)
        _check_headers(folder, *heads, d_sae)
        index = load_file(str(path))
        corpus = load_file(str(corpus_path))["tokens"]
        _check_values(label, index, corpus, d_vocab)
    except DictionaryError:
        raise
    except BaseException as exc:  # safetensors raises its own types (and pyo3 panics) for corrupt files
        reraise_interrupts(exc)
        raise DictionaryError(f"{label}: {INDEX_FILE} or {CORPUS_FILE} cannot be read ({first_line(exc, 100)})") from None
    return FeatureIndex(index, corpus)
