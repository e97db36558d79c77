"""``attribute``: the attribution graph of one prompt, with circuit-tracer's semantics.

Algorithm (circuit-tracer, ``circuit_tracer/attribution/attribute_transformerlens.py``; Ameisen et al. 2025,
"Circuit Tracing", section "Attribution graphs"):

1. One clean forward pass gives every transcoder's active features, the error vectors and the last position's
   logits (:func:`viz_model.circuits.replacement.prepare`).
2. The logit nodes: the most probable next tokens, at most ``max_n_logits``, the fewest whose probabilities reach
   ``desired_logit_prob``; each reads its **demeaned** unembedding column ``W_U[:, t] - mean_v W_U[:, v]`` at the
   unembedding's input (before any final soft cap and without ``b_U``).
3. One forward pass of the replacement model (:class:`FrozenRun`); then each backward pass fills ``batch_size`` rows
   of the adjacency (PyTorch's batched gradients: the backward pass vectorised over the rows): target ``t`` reads vector ``u_t`` (a feature's encoder column, bias
   excluded, at its transcoder's input; a logit's demeaned column at the unembedding's input), and the gradient at a
   source's write location dotted with the source's vector is the edge ``A[t, s] = u_t^T J v_s``: the direct effect
   in the linear replacement model.
4. Feature nodes: all active features, or at most ``max_feature_nodes`` chosen by influence as circuit-tracer does
   (rows of the most influential features first, the ranking refreshed every ``update_interval`` batches).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch

from viz_model.circuits.graph import Graph
from viz_model.circuits.influence import normalize_matrix
from viz_model.circuits.replacement import (GRAPH_BUDGET_ENV, CircuitError, FrozenRun, Prepared, as_ids, check_model,
                                            check_transcoders, frozen_copies, graph_budget_bytes, prepare)
from viz_model.features.dictionary import SparseDictionary

Progress = Callable[[float, str], None]
PREFIX_STEP = 8  # the rows of targets at positions p < 8k come from a frozen pass over the first 8k positions
def salient_logits(logits: torch.Tensor, W_U: torch.Tensor, max_n_logits: int = 10, desired_logit_prob: float = 0.95
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The logit nodes: ``(token ids [k], probabilities [k], demeaned unembedding columns [k, d_model])`` for the
    fewest most probable tokens whose probabilities reach ``desired_logit_prob``, at most ``max_n_logits``
    (circuit-tracer's ``compute_salient_logits``).

    Args:
        logits: ``[d_vocab]`` at the last position. W_U: ``[d_model, d_vocab]``.
    """
    probs = torch.softmax(logits.float(), dim=-1)
    top_p, top_idx = torch.topk(probs, min(max_n_logits, probs.shape[-1]))
    cutoff = int(torch.searchsorted(torch.cumsum(top_p, 0), torch.tensor(desired_logit_prob))) + 1
    top_p, top_idx = top_p[:cutoff], top_idx[:cutoff]
    W_U = W_U.detach().float().cpu()
    demeaned = (W_U[:, top_idx] - W_U.mean(dim=-1, keepdim=True)).T
    return top_idx, top_p, demeaned


class _Rows:
    """Turns the gradients of one backward pass into adjacency rows over the full source list
    ``[active features, errors (layer-major), tokens]``.

    A layer's active features are sorted by position (``prepare``), so their columns are one contiguous range; their
    decoder vectors are kept padded per position ``[n_pos, k_max, d_model]`` and dotted with the gradient at their
    position by one batched matrix product per layer."""

    def __init__(self, prep: Prepared, n_layers: int) -> None:
        self.prep, self.n_layers = prep, n_layers
        n_pos, d_model = len(prep.tokens), prep.token_vecs.shape[-1]
        self.n_active = len(prep.active_features)
        self.n_sources = self.n_active + (n_layers + 1) * n_pos
        self.layers = []
        for layer in range(n_layers):
            idx = (prep.active_features[:, 0] == layer).nonzero().flatten()
            if not len(idx):
                continue
            pos = prep.active_features[idx, 1]
            counts = torch.bincount(pos, minlength=n_pos)
            k_max = int(counts.max())
            slot = torch.arange(len(idx)) - torch.cumsum(counts, 0)[pos] + counts[pos]  # rank within its position
            padded = torch.zeros(n_pos, k_max, d_model)
            padded[pos, slot] = prep.decoder_vecs[idx]
            flat = pos * k_max + slot  # where each feature sits in a [n_pos * k_max] row, in column order
            self.layers.append((layer, int(idx[0]), padded, flat, torch.cumsum(counts, 0), k_max))

    def fill(self, grads: list[torch.Tensor | None], out: torch.Tensor, top_pos: int) -> None:
        """Write the rows into ``out`` ``[n, n_sources]`` (zeros beforehand); ``top_pos``: the highest target
        position (no source after it can reach any target)."""
        prep, n_pos = self.prep, len(self.prep.tokens)
        n, P = out.shape[0], top_pos + 1
        if grads[0] is not None:
            start = self.n_active + self.n_layers * n_pos
            out[:, start:start + P] = torch.einsum("bpd,pd->bp", grads[0][:n, :P], prep.token_vecs[:P])
        for layer in range(self.n_layers):
            g = grads[layer + 1]
            if g is not None:
                err = self.n_active + layer * n_pos
                out[:, err:err + P] = torch.einsum("bpd,pd->bp", g[:n, :P], prep.errors[layer, :P])
        for layer, first, padded, flat, ends, k_max in self.layers:
            g = grads[layer + 1]
            if g is None:
                continue
            count = int(ends[top_pos])
            if not count:
                continue
            dots = torch.bmm(g[:n, :P].transpose(0, 1), padded[:P].transpose(1, 2))  # [P, n, k_max]
            out[:, first:first + count] = dots.transpose(0, 1).reshape(n, P * k_max)[:, flat[:count]]


def _partial_influences(rows: torch.Tensor, row_nodes: torch.Tensor, logit_p: torch.Tensor, n_logits: int,
                        logit_offset: int, max_iter: int = 128) -> torch.Tensor:
    """circuit-tracer's ``compute_partial_influences``: influence of every source column on the logits through the
    rows computed so far (``rows`` ``[r, n_sources + n_logits]``, ``row_nodes[i]`` the node of row ``i``)."""
    normalized = normalize_matrix(rows)
    influences = torch.zeros(rows.shape[1])
    prod = torch.zeros(rows.shape[1])
    prod[logit_offset:logit_offset + n_logits] = logit_p
    for _ in range(max_iter):
        prod = prod[row_nodes] @ normalized
        if not prod.any():
            break
        influences += prod
    return influences


def attribute(model, tokens, transcoders: Mapping[int, SparseDictionary] | str, *, max_n_logits: int = 10,
              desired_logit_prob: float = 0.95, max_feature_nodes: int | None = None, batch_size: int = 64,
              progress: Progress | None = None, zero_first_position: bool = False, update_interval: int = 4,
              scan: str = "") -> Graph:
    """The attribution graph of ``tokens`` through ``transcoders`` (module docstring; circuit-tracer's semantics).

    Args:
        model: a :class:`viz_model.model.VizTransformer` (decoder-only, LM head, pre-LN or sandwich blocks).
        tokens: ``[pos]`` or ``[1, pos]`` int ids.
        transcoders: ``{layer: SparseDictionary}`` with one transcoder per layer (as
            :func:`viz_model.features.load_dictionary` returns them), or a folder of them
            (:func:`viz_model.circuits.load_transcoders`).
        max_n_logits, desired_logit_prob: the logit nodes (see :func:`salient_logits`).
        max_feature_nodes: at most this many feature nodes, the most influential (None: every active feature). The
            matrix is also capped to ``VIZ_GRAPH_MB`` (default 1,024 MB); the graph's ``message`` then says so.
        batch_size: rows per backward pass, at most what fits in ``VIZ_GRAPH_MB``
            (:func:`viz_model.circuits.replacement.frozen_copies`). The graph does not depend on it.
        progress: ``progress(fraction, message)`` as rows are computed.
        zero_first_position: the first token is a beginning-of-sequence token whose features and error are left out
            of the graph (circuit-tracer's ``zero_positions``).
        update_interval: batches between re-rankings of the features when ``max_feature_nodes`` caps them.
        scan: a name for the transcoder set, kept in the graph and its JSON.

    Returns:
        A :class:`Graph`; its ``context`` keeps the model, the transcoders and the clean run for
        :func:`viz_model.circuits.edge_heads` and interventions.

    Raises:
        CircuitError: a model or transcoder set attribution cannot use, bad tokens, bad arguments.
    """
    check_model(model)
    tcs = check_transcoders(model, transcoders)
    ids = as_ids(model, tokens)
    if batch_size < 1 or max_n_logits < 1 or not 0 < desired_logit_prob <= 1:
        raise CircuitError("batch_size and max_n_logits must be at least 1 and desired_logit_prob in (0, 1]")
    report = progress or (lambda fraction, message: None)
    n_layers, n_pos = model.cfg.n_layers, len(ids)
    report(0.0, "clean forward pass")
    prep = prepare(model, ids, tcs, (0,) if zero_first_position and n_pos > 0 else ())
    logit_ids, logit_p, logit_vecs = salient_logits(prep.logits, model.W_unembed, max_n_logits, desired_logit_prob)
    n_active, n_logits = len(prep.active_features), len(logit_ids)
    others = (n_layers + 1) * n_pos + n_logits

    # the cap: the final [n, n] matrix and the rows being computed ([rows, n_active + others]) within the budget
    budget = graph_budget_bytes() // 4
    fit = max(0, int(math.isqrt(budget)) - others)
    fit = min(fit, max(0, budget // (n_active + others) - n_logits))
    n_features = n_active if max_feature_nodes is None else max(0, min(int(max_feature_nodes), n_active))
    message = ""
    if n_features > fit:
        message = (f"Only the {fit:,} most influential of {n_active:,} active features are nodes: a graph of all of "
                   f"them would exceed the {graph_budget_bytes() >> 20:,} MB memory limit ({GRAPH_BUDGET_ENV}).")
        n_features = fit

    rows_of = _Rows(prep, n_layers)
    n_sources = rows_of.n_sources
    batch = max(1, min(batch_size, n_logits + n_features, frozen_copies(model, n_pos, graph_budget_bytes())))
    runs: dict[int, FrozenRun] = {}

    def run_for(last_pos: int) -> FrozenRun:
        """The frozen pass over the shortest prefix (a multiple of PREFIX_STEP positions) that holds ``last_pos``."""
        length = n_pos if not model.cfg.causal else min(n_pos, (last_pos // PREFIX_STEP + 1) * PREFIX_STEP)
        if length not in runs:
            runs[length] = FrozenRun(model, prep, n_pos=length)
        return runs[length]
    logit_offset = n_sources
    edge = torch.zeros(n_features + n_logits, n_sources + n_logits)
    row_nodes = torch.zeros(n_features + n_logits, dtype=torch.long)
    total_rows = n_logits + n_features
    done = 0

    def compute(read_layers: torch.Tensor, positions: torch.Tensor, vectors: torch.Tensor, into: slice) -> None:
        nonlocal done
        for start in range(0, len(read_layers), batch):
            stop = min(start + batch, len(read_layers))
            run = run_for(int(positions[start:stop].max()))
            grads = run.grads(read_layers[start:stop], positions[start:stop], vectors[start:stop])
            rows = edge[into.start + start:into.start + stop]
            rows_of.fill(grads, rows[:, :n_sources], int(positions[start:stop].max()))
            done += stop - start
            report(done / max(1, total_rows), f"{done:,} of {total_rows:,} rows")

    report(0.0, f"{n_logits} logit rows")
    compute(torch.full((n_logits,), n_layers), torch.full((n_logits,), n_pos - 1), logit_vecs, slice(0, n_logits))
    row_nodes[:n_logits] = torch.arange(n_logits) + logit_offset

    enc_layers, enc_pos = prep.active_features[:, 0], prep.active_features[:, 1]
    visited = torch.zeros(n_active, dtype=torch.bool)
    st = n_logits
    if n_features == n_active:
        # by prefix, then layer and position: a batch's targets share a prefix (its backward pass covers only those
        # positions) and mostly their layer (it goes down from the highest of them)
        order = torch.argsort(enc_pos // PREFIX_STEP * (n_layers + 1) * n_pos + enc_layers * n_pos + enc_pos, stable=True)
        compute(enc_layers[order], enc_pos[order], prep.encoder_vecs[order], slice(st, st + n_active))
        row_nodes[st:st + n_active] = order
        visited[:] = True
    else:
        while st < n_logits + n_features:
            influence = _partial_influences(edge[:st], row_nodes[:st], logit_p, n_logits, logit_offset)
            rank = torch.argsort(influence[:n_active], descending=True)
            pending = rank[~visited[rank]][:min(update_interval * batch, n_logits + n_features - st)]
            if not len(pending):
                break
            compute(enc_layers[pending], enc_pos[pending], prep.encoder_vecs[pending], slice(st, st + len(pending)))
            row_nodes[st:st + len(pending)] = pending
            visited[pending] = True
            st += len(pending)

    # assemble [selected features, errors, tokens, logits] x the same, rows in node order
    selected = visited.nonzero().flatten()
    n_sel = len(selected)
    n_nodes = n_sel + others
    adjacency = torch.zeros(n_nodes, n_nodes)
    cols = torch.cat([selected, torch.arange(n_active, n_sources)])
    feature_rows = edge[n_logits:n_logits + n_sel]
    order = torch.argsort(row_nodes[n_logits:n_logits + n_sel])
    adjacency[:n_sel, :n_sel + (n_layers + 1) * n_pos] = feature_rows[order][:, cols]
    adjacency[n_sel + (n_layers + 1) * n_pos:, :n_sel + (n_layers + 1) * n_pos] = edge[:n_logits][:, cols]
    report(1.0, f"{n_nodes:,} nodes")
    from viz_model.circuits.context import GraphContext  # the model-side state kept for edge_heads / interventions
    return Graph(adjacency=adjacency, active_features=prep.active_features, selected_features=selected,
                 activation_values=prep.activation_values, logit_tokens=logit_ids, logit_probabilities=logit_p,
                 input_tokens=ids, n_layers=n_layers, zeroed_positions=prep.zeroed, scan=scan, message=message,
                 context=GraphContext(model, tcs, prep, logit_vecs))
