"""QK attribution for the pages (no Streamlit): a trace read as a cache, the largest (query source × key source)
terms of one score as a small grid (the rest summed as "other"), the words that name a source, the figure, and the
exported Python that prints the same numbers (:mod:`viz_model.interventions.qk` does the arithmetic)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import torch

from viz_model import VizTransformer, attribution
from viz_model.interventions.cost import forward_flops

from viz_ui.views.figures import DIVERGING, FONT, one_pass_figure
from viz_ui.views.code_interventions import _ids, _load
from viz_ui.analysis.interventions import Prompt
from viz_ui.analysis.text_trace import Trace

OTHER = "other"
TOP = 8  # query and key sources shown by name in the grid; the rest go to "other"


class TraceCache(Mapping):
    """A trace's arrays (batch axis removed, numpy) read as a ``run_with_cache`` cache: ``[1, ...]`` float32 tensors,
    so that :mod:`viz_model` functions read the same numbers the page draws (a bounded trace recomputes a layer on
    read, bit-identical)."""

    def __init__(self, trace: Trace) -> None:
        self.arrays = trace.arrays
        self.read: dict[str, torch.Tensor] = {}  # each hook converted (or, bounded, recomputed) once per cache

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self.read:
            with warnings.catch_warnings():  # read-only shared arrays: nothing here writes to them
                warnings.simplefilter("ignore", UserWarning)
                self.read[name] = torch.from_numpy(np.asarray(self.arrays[name], dtype=np.float32))[None]
        return self.read[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.arrays.names() if hasattr(self.arrays, "names") else self.arrays)

    def __len__(self) -> int:
        return len(list(iter(self)))

    def __contains__(self, name) -> bool:
        return name in self.arrays


def qk_views(model: VizTransformer, trace: Trace, layer: int, head: int, query: int, key: int) -> tuple[dict, dict]:
    """What the section shows, from the trace: :func:`viz_model.attribution.qk_attribution` of the cell
    (``{(query source, key source): score units}``) and :func:`viz_model.attribution.qk_pattern_attribution` of the
    query (the terms weighted by its pattern), reading each hook once."""
    cache = TraceCache(trace)
    return (attribution.qk_attribution(model, cache, layer, head, query, key),
            attribution.qk_pattern_attribution(model, cache, layer, head, query))


def qk_copies(model: VizTransformer, n_tokens: int, layer: int, bounded: bool) -> float:
    """:func:`qk_views`' work in forward-equivalents (copies of the text): its matrix products over every key
    (each source's part of k: ``z_h W_O[h]`` per earlier head, then ``· W_K``; the source-pair dot products) over a
    forward pass's (:func:`viz_model.interventions.cost.forward_flops`), plus, for a bounded trace (which recomputes
    a block's hooks when read), blocks ``0 .. layer`` of a forward pass."""
    cfg = model.cfg
    flops = forward_flops(model, n_tokens)
    forward = flops["encoder"] + sum(flops["blocks"]) + flops["decode"]
    n_sources = 4 + layer * (cfg.n_heads + 2)
    work = 2 * n_tokens * (layer * cfg.n_heads * cfg.d_head * cfg.d_model + n_sources * cfg.d_model * cfg.d_head
                           + n_sources ** 2 * cfg.d_head)
    recompute = sum(flops["blocks"][: layer + 1]) if bounded else 0.0
    return (work + recompute) / max(1.0, forward)


@dataclass
class TermGrid:
    """The largest terms of one split: ``values`` ``[len(rows), len(cols)]`` (score units) over query sources ``rows``
    and key sources ``cols``, the last row / column being ``"other"`` (the sum of every source not named) when there
    is one; ``rel_pos``: T5's relative position bias (not a pair of sources), else None. ``values.sum() + rel_pos``
    is the sum of every term."""

    rows: list[str]
    cols: list[str]
    values: np.ndarray
    rel_pos: float | None

    @property
    def total(self) -> float:
        return float(self.values.sum()) + (self.rel_pos or 0.0)


def term_grid(terms: dict[tuple[str, str], float], top: int = TOP) -> TermGrid:
    """The ``top`` query sources and ``top`` key sources with the largest absolute terms (Σ over the other side of
    |term|), in the order of the forward pass, and an ``"other"`` row and column summing the rest (so nothing is
    dropped: the grid's sum is the whole score)."""
    rel = terms.get(("rel_pos", "rel_pos"))
    pairs = {k: v for k, v in terms.items() if k != ("rel_pos", "rel_pos")}
    q_names = list(dict.fromkeys(a for a, _ in pairs))
    k_names = list(dict.fromkeys(b for _, b in pairs))
    full = np.array([[pairs[(a, b)] for b in k_names] for a in q_names])  # [Sq, Sk]

    def keep(weights: np.ndarray, names: list[str]) -> list[int]:
        if len(names) <= top:
            return list(range(len(names)))
        return sorted(np.argsort(-weights, kind="stable")[:top].tolist())
    rows, cols = keep(np.abs(full).sum(1), q_names), keep(np.abs(full).sum(0), k_names)
    r_rest = [i for i in range(len(q_names)) if i not in rows]
    c_rest = [j for j in range(len(k_names)) if j not in cols]
    blocks = [[full[np.ix_(rows, cols)]] + ([full[np.ix_(rows, c_rest)].sum(1, keepdims=True)] if c_rest else [])]
    if r_rest:
        blocks.append([full[np.ix_(r_rest, cols)].sum(0, keepdims=True)]
                      + ([full[np.ix_(r_rest, c_rest)].sum(keepdims=True).reshape(1, 1)] if c_rest else []))
    values = np.block(blocks)
    return TermGrid([q_names[i] for i in rows] + ([OTHER] if r_rest else []),
                    [k_names[j] for j in cols] + ([OTHER] if c_rest else []), values, rel)


def grid_frame(grid: TermGrid):
    """The grid as a table for the figure's CSV: a ``query source`` column, then one column per key source (score
    units), and a ``rel_pos`` row for T5's relative position bias (under the first key column)."""
    import pandas as pd  # noqa: PLC0415  (the attention page does not import pandas unless a table is asked for)
    frame = pd.DataFrame(grid.values, columns=grid.cols)
    frame.insert(0, "query source", grid.rows)
    if grid.rel_pos is not None:
        frame.loc[len(frame)] = ["rel_pos", grid.rel_pos] + [float("nan")] * (len(grid.cols) - 1)
    return frame


def source_words(name: str, side: str) -> str:
    """Plain words for a source name at ``side`` ("query" or "key"): ``L0H3`` → "L0H3's output",
    ``embed`` → "the token embedding", ``bias`` → "the biases (the norm's offset and b_Q)"."""
    if name == "embed":
        return "the token embedding"
    if name == "pos_embed":
        return "the position embedding"
    if name == "token_type_embed":
        return "the segment (token type) embedding"
    if name == "bias":
        return f"the biases (the norm's offset and b_{'Q' if side == 'query' else 'K'})"
    if name == OTHER:
        return "the smaller sources together"
    if name.endswith(".mlp"):
        return f"layer {name[1:-4]}'s MLP output"
    if name.endswith(".attn_bias"):
        return f"layer {name[1:].split('.')[0]}'s attention output bias b_O"
    if name.endswith(".cross_attn_bias"):
        return f"layer {name[1:].split('.')[0]}'s cross-attention output bias"
    if "X" in name:
        return f"cross-attention head {name}'s output"
    return f"{name}'s output"


def dominant_sentence(terms: dict[tuple[str, str], float], score: float) -> str:
    """One sentence naming the largest term: "The largest term, +1.234 of the score 2.345, is L0H3's output at the
    query × the token embedding at the key." (T5's relative position bias is named as such when it is largest.)"""
    (a, b), value = max(terms.items(), key=lambda kv: abs(kv[1]))
    if (a, b) == ("rel_pos", "rel_pos"):
        return (f"The largest term, {value:+.3f} of the score {score:.3f}, is the relative position bias of this "
                "distance.")
    return (f"The largest term, {value:+.3f} of the score {score:.3f}, is {source_words(a, 'query')} at the query × "
            f"{source_words(b, 'key')} at the key.")


def top_pairs(terms: dict[tuple[str, str], float], k: int = 3) -> list[tuple[str, str, float]]:
    """The ``k`` largest terms by absolute value: ``(query source, key source, value)``."""
    return [(a, b, v) for (a, b), v in sorted(terms.items(), key=lambda kv: -abs(kv[1]))[:k]]


@dataclass(frozen=True)
class QKPanel:
    """Everything the "Why this score?" section shows for one cell, derived once from :func:`qk_views`' two splits
    ``terms`` and ``summary`` (``{(query source, key source): score units}``): how many terms, their grids
    (:func:`term_grid`), the sum of the cell's terms, the sentence naming its largest term and the summary's three
    largest pairs. Small whatever the model (the splits, one term per pair of sources, are not kept)."""

    n_terms: int
    grid: TermGrid
    summary_grid: TermGrid
    total: float
    sentence: str
    pairs: list[tuple[str, str, float]]

    @classmethod
    def of(cls, terms: dict[tuple[str, str], float], summary: dict[tuple[str, str], float]) -> QKPanel:
        total = sum(terms.values())
        return cls(len(terms), term_grid(terms), term_grid(summary), total, dominant_sentence(terms, total),
                   top_pairs(summary, 3))


def qk_heatmap(grid: TermGrid, title: str, display: tuple[float, str] | None = None) -> go.Figure:
    """The grid as a diverging heatmap (white at 0), each cell labelled with its value; rows = sources at the query,
    columns = sources at the key. ``display``: see :func:`viz_ui.views.figures.one_pass_figure`."""
    v = grid.values
    limit = float(np.abs(v).max()) or 1.0
    r = len(grid.rows)
    heat = dict(type="heatmap", z=v, x=grid.cols, y=grid.rows, colorscale=DIVERGING, zmin=-limit, zmax=limit,
                colorbar=dict(title="score"), text=np.char.mod("%+.2f", v), texttemplate="%{text}",
                textfont=dict(size=FONT["size"] - 2),
                hovertemplate="query source %{y}<br>key source %{x}<br>term %{z:.4f}<extra></extra>")
    base = dict(yaxis=dict(autorange="reversed", title="source at the query", type="category"),
                xaxis=dict(title="source at the key", type="category", tickangle=-45),
                title=dict(text=title, x=0), font=FONT, height=max(360, min(800, 170 + 44 * r)),
                margin=dict(l=10, r=10, t=60, b=10))
    return one_pass_figure([heat], base, None, display)


def qk_code(path: str, text: str, prompt: Prompt, has_tokenizer: bool, cut: bool, layer: int, head: int, query: int,
            key: int, load_args: str = "") -> str:
    """A script that prints the numbers of the QK attribution view: ``terms`` (``{(query source, key source):
    value}``, :func:`viz_model.attribution.qk_attribution`), ``score`` (the model's ``hook_attn_scores`` at the cell,
    ``-inf`` where masked) and ``summary`` (:func:`viz_model.attribution.qk_pattern_attribution`)."""
    lines = ['"""QK attribution (Inside a Transformer, pages "Attention" and "One head, step by step"): why head '
             f'L{layer}H{head} gives its score from query {query} to key {key}."""',
             "import torch", "", "from viz_model import attribution, load_model", "", *_load(path, load_args), "",
             f"text = {text!r}", *_ids("tokens", "text", prompt, has_tokenizer, cut, "kw"),
             f"layer, head, query, key = {layer}, {head}, {query}, {key}",
             "_, cache = model.run_with_cache(tokens, **kw)",
             "# {(query source, key source): value}",
             "terms = attribution.qk_attribution(model, cache, layer, head, query, key)",
             'score = cache[f"blocks.{layer}.attn.hook_attn_scores"][0, head, query, key].item()  # -inf where masked',
             'print(f"sum of the terms {sum(terms.values()):.4f}; the model\'s score {score:.4f}")',
             "note = attribution.qk_note(model)  # a soft cap: the terms split the score before it",
             "if note:", "    print(note)",
             "for (a, b), value in sorted(terms.items(), key=lambda kv: -abs(kv[1]))[:10]:",
             '    print(f"{a:>18} (query) x {b:<18} (key) {value:+.4f}")',
             "# the same terms weighted by the query's pattern over the keys",
             "summary = attribution.qk_pattern_attribution(model, cache, layer, head, query)",
             'print("\\nWhat drives the pattern of this query (terms weighted by its attention over the keys):")',
             "for (a, b), value in sorted(summary.items(), key=lambda kv: -abs(kv[1]))[:10]:",
             '    print(f"{a:>18} (query) x {b:<18} (key) {value:+.4f}")']
    return "\n".join(lines) + "\n"
