"""Mixture-of-experts views (numpy in, ``go.Figure`` out; no Streamlit): where the router sent each token, how
many tokens each expert received, the router's probabilities for one token, and how an intervention on the
routing changed the output.

Inputs are the recorded hooks of :class:`viz_model.feed_forward.MoE` (batch axis removed): ``hook_expert_indices``
``[pos, k]``, ``hook_topk_weights`` ``[pos, k]`` and ``hook_expert_weights`` ``[pos, n_experts]`` of every
mixture-of-experts layer. A model may keep dense MLPs in some layers (Qwen2-MoE's ``decoder_sparse_step``,
``mlp_only_layers``): arrays then hold only the MoE layers, in order, and figures name each row by its layer
(:attr:`Routing.layers`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from viz_ui.analysis.text import plotly_text
from viz_ui.views.figures import WEIGHT_SCALE, _layout, position_ticks

# Okabe & Ito's colour-blind-safe palette (its black made grey, visible on the dark theme too), then Paul Tol's
# "muted": distinct colours for up to 16 experts
EXPERT_COLOURS = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#8c8c8c",
                  "#332288", "#88ccee", "#44aa99", "#117733", "#999933", "#ddcc77", "#cc6677", "#882255"]
MAX_TEXT_POSITIONS = 40  # cells carry their experts' numbers up to this many tokens (beyond: hover only)


@dataclass
class Routing:
    """Where every token went in every layer, as the model computed it."""

    indices: np.ndarray  # [n_moe, pos, k] int: the chosen experts, most probable first
    weights: np.ndarray  # [n_moe, pos, k]: the weights their outputs were summed with
    probs: np.ndarray | None = None  # [n_moe, pos, n_experts]: the router's softmax (hook_expert_weights)
    layers: list[int] | None = None  # the model's layer of each row (Config.moe_layers); None = 0 .. n_moe - 1

    @property
    def n_layers(self) -> int:
        """Rows: the mixture-of-experts layers."""
        return self.indices.shape[0]

    @property
    def layer_ids(self) -> list[int]:
        """The model's layer index of each row."""
        return list(range(self.n_layers)) if self.layers is None else list(self.layers)


def routing_from_arrays(arrays, layers) -> Routing:
    """The :class:`Routing` recorded in a trace's arrays (``blocks.{i}.mlp.hook_expert_indices`` ...) of ``layers``
    (the model's mixture-of-experts layers, ``Config.moe_layers``; an int ``n``: layers 0 .. n - 1)."""
    layers = list(range(layers)) if isinstance(layers, int) else list(layers)
    get = lambda kind: np.stack([np.asarray(arrays[f"blocks.{i}.mlp.hook_{kind}"]) for i in layers])  # noqa: E731
    return Routing(get("expert_indices").astype(np.int64), get("topk_weights").astype(np.float32),
                   get("expert_weights").astype(np.float32), layers)


def _layer_axis(fig: go.Figure, layers: list[int]) -> None:
    """Rows 0 .. n - 1 named by the model's layers (``L1``, ``L3`` ...), top down: evenly spaced rows even when the
    dense layers between them are left out."""
    fig.update_yaxes(autorange="reversed", title="layer", tickmode="array", tickvals=list(range(len(layers))),
                     ticktext=[f"L{i}" for i in layers])


def dense_weights(routing: Routing, n_experts: int) -> np.ndarray:
    """``[n_layers, pos, n_experts]``: the weight each expert's output got for each token (0 where not chosen)."""
    out = np.zeros((*routing.indices.shape[:2], n_experts), dtype=np.float32)
    np.put_along_axis(out, routing.indices, routing.weights, axis=-1)
    return out


def expert_load(indices: np.ndarray, n_experts: int, weights: np.ndarray | None = None) -> np.ndarray:
    """``[n_layers, n_experts]`` int: how many tokens each expert received in each layer (a token counts once for
    each of its k experts; with ``weights``, experts chosen with weight 0, e.g. by a forced route, are not counted).
    An even split gives every expert ``pos * k / n_experts``."""
    chosen = np.ones(indices.shape, dtype=bool) if weights is None else weights > 0
    return np.stack([np.bincount(layer[ok], minlength=n_experts) for layer, ok in zip(indices, chosen)])


def expert_colours(n_experts: int) -> list[str]:
    """One colour per expert: distinct ones up to 16 experts, then a sampled continuous scale."""
    if n_experts <= len(EXPERT_COLOURS):
        return EXPERT_COLOURS[:n_experts]
    import plotly.colors as pc

    return pc.sample_colorscale("Turbo", [i / max(1, n_experts - 1) for i in range(n_experts)])


def _step_scale(colours: list[str]) -> list[tuple[float, str]]:
    """A colour scale of flat steps, one per expert, for z in ``[-0.5, n - 0.5]``."""
    n = len(colours)
    return [pair for i, c in enumerate(colours) for pair in ((i / n, c), ((i + 1) / n, c))]


def routing_map(routing: Routing, labels: list[str], n_experts: int, title: str) -> go.Figure:
    """The token × layer map: one cell per (layer, token), coloured by the expert with the largest weight, with the
    chosen experts written in the cell (first choice first; the first only when k > 2) and every chosen expert's
    weight on hover. Mixture-of-experts layers run down (row ``r`` is layer ``routing.layer_ids[r]``), token
    positions across."""
    idx, w = routing.indices, routing.weights
    n_layers, n_pos, k = idx.shape
    layer_of = np.array(routing.layer_ids, dtype=object)[:, None].repeat(n_pos, 1)
    text = np.array([[("+".join(map(str, idx[i, p])) if k <= 2 else str(idx[i, p, 0])) for p in range(n_pos)]
                     for i in range(n_layers)], dtype=object)
    hover = np.array([[", ".join(f"E{e} {x:.3f}" for e, x in zip(idx[i, p], w[i, p]) if x > 0) or "no expert"
                       for p in range(n_pos)] for i in range(n_layers)], dtype=object)
    tokens = np.array([plotly_text(s) for s in labels], dtype=object)[None, :].repeat(n_layers, 0)
    colours = expert_colours(n_experts)
    trace = go.Heatmap(z=idx[:, :, 0], x=np.arange(n_pos), y=np.arange(n_layers), zmin=-0.5, zmax=n_experts - 0.5,
                       colorscale=_step_scale(colours) if n_experts <= len(EXPERT_COLOURS) else "Turbo",
                       text=text, xgap=1, ygap=1, hoverinfo="skip",
                       colorbar=dict(title="first<br>expert", tickvals=list(range(n_experts)) if n_experts <= 16 else None,
                                     ticktext=[f"E{e}" for e in range(n_experts)] if n_experts <= 16 else None))
    if n_pos <= MAX_TEXT_POSITIONS:
        trace.update(texttemplate="%{text}", textfont=dict(size=12))
    # an invisible, clickable point on every cell, carrying the hover text (Streamlit selects points, not cells)
    xs, ys = np.meshgrid(np.arange(n_pos), np.arange(n_layers))
    cells = go.Scatter(x=xs.ravel(), y=ys.ravel(), mode="markers", showlegend=False,
                       marker=dict(size=16, color="rgba(0,0,0,0)", line=dict(width=0)),
                       customdata=np.stack([tokens.ravel(), hover.ravel(), layer_of.ravel()], axis=-1),
                       hovertemplate="layer %{customdata[2]} · pos %{x} %{customdata[0]}<br>%{customdata[1]}"
                                     "<extra></extra>")
    fig = go.Figure([trace, cells])
    _layer_axis(fig, routing.layer_ids)
    fig.update_xaxes(tickangle=-60, **position_ticks(labels))
    # tall enough for the colour bar's expert names too (one per expert, also at lecture font sizes)
    return _layout(fig, title, height=max(300, 150 + 40 * n_layers, 120 + 36 * min(n_experts, 16)))


def layer_weights_heatmap(weights: np.ndarray, probs: np.ndarray | None, labels: list[str], title: str) -> go.Figure:
    """One layer as experts × tokens: the weight each expert's output got for each token (0 = not chosen), on a
    0..1 scale; the router's probability on hover. ``weights``, ``probs``: ``[pos, n_experts]``."""
    n_pos, n_experts = weights.shape
    p = probs if probs is not None else np.full_like(weights, np.nan)
    tokens = np.array([plotly_text(s) for s in labels], dtype=object)[None, :].repeat(n_experts, 0)
    fig = go.Figure(go.Heatmap(
        z=weights.T, x=np.arange(n_pos), y=np.arange(n_experts), colorscale=WEIGHT_SCALE, zmin=0, zmax=1,
        customdata=np.stack([tokens, p.T.astype(object)], axis=-1), xgap=1, ygap=1, colorbar=dict(title="weight"),
        hovertemplate="E%{y} · pos %{x} %{customdata[0]}<br>weight %{z:.3f}<br>router probability "
                      "%{customdata[1]:.3f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title="expert", tickmode="array", tickvals=list(range(n_experts)),
                     ticktext=[f"E{e}" for e in range(n_experts)])
    fig.update_xaxes(tickangle=-60, **position_ticks(labels))
    return _layout(fig, title, height=max(280, 130 + 26 * n_experts))


def load_heatmap(load: np.ndarray, title: str, layers: list[int] | None = None) -> go.Figure:
    """``[n_moe, n_experts]`` token counts, the count written in each cell; ``layers``: the model's layer of each row
    (None: 0 .. n - 1)."""
    n_layers, n_experts = load.shape
    layers = list(range(n_layers)) if layers is None else list(layers)
    fig = go.Figure(go.Heatmap(z=load, x=np.arange(n_experts), y=np.arange(n_layers), colorscale=WEIGHT_SCALE,
                               zmin=0, texttemplate="%{z}" if n_experts <= 32 else None, textfont=dict(size=14),
                               xgap=1, ygap=1, colorbar=dict(title="tokens"),
                               customdata=np.array(layers)[:, None].repeat(n_experts, 1),
                               hovertemplate="layer %{customdata} · E%{x}<br>%{z} tokens<extra></extra>"))
    _layer_axis(fig, layers)
    fig.update_xaxes(title="expert", tickmode="array", tickvals=list(range(n_experts)),
                     ticktext=[f"E{e}" for e in range(n_experts)] if n_experts <= 32 else None)
    return _layout(fig, title, height=max(260, 130 + 40 * n_layers))


def router_probs_heatmap(probs: np.ndarray, chosen: np.ndarray, title: str,
                         layers: list[int] | None = None) -> go.Figure:
    """One token's router probabilities in every mixture-of-experts layer ``[n_moe, n_experts]`` (0..1), the experts
    it was sent to (``chosen``, bool, same shape) marked with ✓ after their probability; ``layers``: the model's
    layer of each row (None: 0 .. n - 1)."""
    n_layers, n_experts = probs.shape
    layers = list(range(n_layers)) if layers is None else list(layers)
    text = np.where(chosen, np.char.add(np.char.mod("%.2f", probs), " ✓"), np.char.mod("%.2f", probs))
    fig = go.Figure(go.Heatmap(z=probs, x=np.arange(n_experts), y=np.arange(n_layers), colorscale=WEIGHT_SCALE,
                               zmin=0, zmax=1, text=text, texttemplate="%{text}" if n_experts <= 16 else None,
                               textfont=dict(size=13), xgap=1, ygap=1, colorbar=dict(title="p"),
                               customdata=np.stack([np.where(chosen, "chosen", "not chosen"),
                                                    np.array(layers)[:, None].repeat(n_experts, 1).astype(str)], -1),
                               hovertemplate="layer %{customdata[1]} · E%{x}<br>p = %{z:.4f} (%{customdata[0]})"
                                             "<extra></extra>"))
    _layer_axis(fig, layers)
    fig.update_xaxes(title="expert", tickmode="array", tickvals=list(range(n_experts)),
                     ticktext=[f"E{e}" for e in range(n_experts)] if n_experts <= 32 else None)
    return _layout(fig, title, height=max(260, 130 + 40 * n_layers))


def softmax(logits: np.ndarray) -> np.ndarray:
    """``softmax`` over the last axis, in float64 (T = 1)."""
    z = logits.astype(np.float64)
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def kl_bits(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """``KL(p_before || p_after)`` in bits at every position, from logits ``[pos, d_vocab]``: how much the output
    distribution moved (0 = unchanged)."""
    p, q = softmax(before), softmax(after)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * (np.log2(p) - np.log2(np.maximum(q, 1e-300))), 0.0)
    return terms.sum(-1)


def compare_bar(labels: list[str], before: np.ndarray, after: np.ndarray, title: str) -> go.Figure:
    """The same tokens' probabilities intact and after an intervention, as paired horizontal bars (first on top)."""
    k = len(labels)
    ticks = [plotly_text(s) for s in labels]
    fig = go.Figure([go.Bar(x=before, y=list(range(k)), orientation="h", name="intact", marker_color="#1f77b4",
                            customdata=ticks, hovertemplate="%{customdata}<br>intact p = %{x:.4f}<extra></extra>"),
                     go.Bar(x=after, y=list(range(k)), orientation="h", name="after the intervention",
                            marker_color="#d55e00", customdata=ticks,
                            hovertemplate="%{customdata}<br>after p = %{x:.4f}<extra></extra>")])
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(k)), ticktext=ticks)
    fig.update_xaxes(title="probability", range=[0, min(1.0, float(max(before.max(initial=0), after.max(initial=0)))
                                                          * 1.1 + 0.02)])
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.15, x=0))
    return _layout(fig, title, height=max(320, 110 + 44 * k))


def effect_by_position(kl: np.ndarray, labels: list[str], title: str, changed: np.ndarray | None = None) -> go.Figure:
    """``KL(intact || after)`` in bits at every position as bars; positions whose routing changed (``changed``,
    bool ``[pos]``) drawn in orange."""
    n = len(kl)
    colours = ["#d55e00" if changed is not None and changed[i] else "#1f77b4" for i in range(n)]
    fig = go.Figure(go.Bar(x=np.arange(n), y=kl, marker_color=colours,
                           customdata=[plotly_text(s) for s in labels],
                           hovertemplate="pos %{x} %{customdata}<br>KL %{y:.4f} bits<extra></extra>"))
    fig.update_xaxes(tickangle=-60, **position_ticks(labels))
    fig.update_yaxes(title="KL (bits)", rangemode="tozero")
    return _layout(fig, title, height=360)


def rerouted(before: Routing, after: Routing, n_experts: int) -> np.ndarray:
    """``[n_moe, pos]`` bool: where the set of experts used with a weight above 0 differs between two runs."""
    return ((dense_weights(before, n_experts) > 0) != (dense_weights(after, n_experts) > 0)).any(-1)


def moved_tokens(before: np.ndarray, after: np.ndarray, n: int = 10) -> list[int]:
    """Token ids worth comparing between two distributions ``[d_vocab]``: the 8 most likely before and the 3 most
    likely after, at most ``n``, ordered by their larger probability."""
    ids = set(np.argsort(before)[::-1][:8].tolist()) | set(np.argsort(after)[::-1][:3].tolist())
    return sorted(ids, key=lambda i: -max(before[i], after[i]))[:n]
