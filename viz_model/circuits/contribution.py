"""The contribution graph: how much each part of every residual update makes up the update, for any checkpoint.

Method: Ferrando & Voita 2024, "Information Flow Routes: Automatically Interpreting Language Models at Scale"
(arXiv:2403.00824), as Meta's LLM Transparency Tool computes it (``llm_transparency_tool/routes/contributions.py``:
``get_contributions``, ``get_attention_contributions``, ``get_mlp_contributions``; its graph:
``routes/graph.py``). It needs no transcoders and no backward pass: one forward pass.

At each layer and position the residual stream is updated twice. The attention update ``y = resid_mid`` is the sum of
the previous residual ``resid_pre`` and one part per head and key position, ``c[h, k] = A_h[q, k] v_h[k] W_O[h]``
(``b_O`` belongs to no part); the MLP update ``y = resid_post`` is ``resid_mid + mlp_out``. A part's **proximity
importance** is ``max(||y||_p - ||y - c||_p, 0)``: how much closer the part is to the whole than nothing is; the
importances of one update are divided by their sum (``p = 1`` by default, as the tool; ``p = 2`` allowed). Norms
between a part and the stream (sandwich or post-LN blocks) are applied to each part with their scale frozen at the
run's value (a linear map), so the parts still add up to the update.

A part's importance is an **edge** of the graph: from ``(layer, key_pos)`` to ``(layer, pos)`` through head ``h``,
from the residual to itself, or from the MLP. The graph of the tool keeps edges at or above ``threshold`` that lie on
a path to the output position.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from viz_model.circuits.replacement import CircuitError, as_ids
from viz_model.components import LayerNorm
from viz_model.placement import weight

BLOCK_BYTES = 128 << 20  # the [query block, key_pos, n_heads, d_model] parts of one step at a time


@dataclass
class ContributionGraph:
    """Normalised proximity importances (module docstring), float32.

    Attributes:
        attn: ``[n_layers, pos, key_pos, n_heads]``: each head and key position's share of the attention update at
            ``pos`` (0 above the diagonal of a causal model).
        attn_resid: ``[n_layers, pos]``: the previous residual's share of the attention update.
        mlp, mlp_resid: ``[n_layers, pos]``: the MLP's and the residual's shares of the MLP update.
        tokens: ``[pos]`` ids; threshold: the smallest importance an edge of the graph keeps; p: the norm used.
    """
    attn: torch.Tensor
    attn_resid: torch.Tensor
    mlp: torch.Tensor
    mlp_resid: torch.Tensor
    tokens: torch.Tensor
    threshold: float = 0.04
    p: int = 1
    edges_cache: dict = field(default_factory=dict, repr=False, compare=False)

    def edges(self, target_pos: int = -1, threshold: float | None = None) -> list[tuple[str, str, float, str]]:
        """The edges of the graph that lead to the output at ``target_pos``: ``(source, target, importance, kind)``.

        Nodes: ``"I{l}_{pos}"`` the stream entering block ``l`` (``I0``: the embeddings; ``I{n_layers}``: the output),
        ``"A{l}_{pos}"`` the stream after block ``l``'s attention, ``"F{l}_{pos}"`` block ``l``'s MLP. Kinds:
        ``"attn"`` ``I{l}_{k} -> A{l}_{q}`` (the heads' importances of key ``k`` summed), ``"resid"`` the stream to
        itself (``I{l}_q -> A{l}_q`` and ``A{l}_q -> I{l+1}_q``), ``"mlp"`` ``A{l}_q -> F{l}_q -> I{l+1}_q`` (both the
        MLP's importance). Edges below ``threshold`` are dropped, then everything that does not reach
        ``I{n_layers}_{target_pos}`` backwards (the LLM Transparency Tool's ``build_paths_to_predictions``).
        """
        thr = self.threshold if threshold is None else float(threshold)
        n_layers, n_pos = self.mlp.shape
        target = target_pos % n_pos
        key = (target, thr)
        if key in self.edges_cache:
            return self.edges_cache[key]
        heads = self.attn.sum(-1)  # [layer, q, k]
        incoming: dict[str, list[tuple[str, float, str]]] = {}
        for layer in range(n_layers):
            for q in range(n_pos):
                a, f, out = f"A{layer}_{q}", f"F{layer}_{q}", f"I{layer + 1}_{q}"
                incoming[a] = [(f"I{layer}_{k}", float(heads[layer, q, k]), "attn") for k in range(n_pos)
                               if float(heads[layer, q, k]) >= thr]
                if float(self.attn_resid[layer, q]) >= thr:
                    incoming[a].append((f"I{layer}_{q}", float(self.attn_resid[layer, q]), "resid"))
                m = float(self.mlp[layer, q])
                incoming[f] = [(a, m, "mlp")] if m >= thr else []
                incoming[out] = ([(f, m, "mlp")] if m >= thr else []) + (
                    [(a, float(self.mlp_resid[layer, q]), "resid")] if float(self.mlp_resid[layer, q]) >= thr else [])
        kept, stack, seen = [], [f"I{n_layers}_{target}"], set()
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            for source, share, kind in incoming.get(node, ()):
                kept.append((source, node, share, kind))
                stack.append(source)
        self.edges_cache[key] = kept
        return kept


def _post_norm(parts: torch.Tensor, norm, scale: torch.Tensor) -> torch.Tensor:
    """A norm applied to a part with its scale frozen (its bias belongs to no part): LayerNorm centres first."""
    if isinstance(norm, LayerNorm):
        parts = parts - parts.mean(-1, keepdim=True)
    return parts / scale * weight(norm, "w").float()


def _importance(y: torch.Tensor, parts: torch.Tensor, p: int) -> torch.Tensor:
    """``max(||y||_p - ||y - c||_p, 0)`` for every part ``c`` ``[..., d]`` of wholes ``y`` (broadcast)."""
    if p == 2:  # ||y - c||^2 = ||y||^2 - 2 y.c + ||c||^2: no difference tensor
        y2 = y.pow(2).sum(-1)
        dist = (y2 - 2 * (y * parts).sum(-1) + parts.pow(2).sum(-1)).clamp(min=0).sqrt()
        return (y2.sqrt() - dist).clamp(min=0)
    return (y.abs().sum(-1) - (y - parts).abs().sum(-1)).clamp(min=0)


@torch.no_grad()
def contribution_graph(model, tokens, threshold: float = 0.04, p: int = 1) -> ContributionGraph:
    """The contribution graph of ``tokens`` (module docstring): one forward pass, no backward.

    Args:
        model: a :class:`viz_model.model.VizTransformer` without an encoder stack (decoder-only or encoder-only).
        tokens: ``[pos]`` or ``[1, pos]`` ids.
        threshold: the smallest importance an edge of :meth:`ContributionGraph.edges` keeps.
        p: 1 (as the LLM Transparency Tool) or 2.

    Memory: at most one layer's inputs at a time, and the parts of a block of query positions
    (``BLOCK_BYTES``); never a ``[pos, pos, n_heads, d_model]`` tensor.

    Raises:
        CircuitError: an encoder-decoder model, ``p`` other than 1 or 2, bad tokens.
    """
    cfg = model.cfg
    if cfg.is_encoder_decoder:
        raise CircuitError("the contribution graph follows one stack; this model is an encoder-decoder")
    if p not in (1, 2):
        raise CircuitError(f"p must be 1 or 2, got {p}")
    ids = as_ids(model, tokens)
    n, n_layers, n_heads, d_model = len(ids), cfg.n_layers, cfg.n_heads, cfg.d_model
    attn = torch.zeros(n_layers, n, n, n_heads)
    attn_resid, mlp, mlp_resid = (torch.zeros(n_layers, n) for _ in range(3))
    seen: dict[str, torch.Tensor] = {}

    def keep(x, hook):
        seen[hook.name.split(".", 2)[-1]] = x[0].detach()

    def finish(x, hook):
        layer = int(hook.name.split(".")[1])
        block = model.blocks[layer]
        got = {k: v for k, v in seen.items()}
        seen.clear()
        pre, mid, post = got["hook_resid_pre"].float(), got["hook_resid_mid"].float(), x[0].detach().float()
        mlp_out = got["hook_mlp_out"].float()
        pattern = got["attn.hook_pattern"].float()  # [head, q, k]
        v = got["attn.hook_v"].float()  # [k, kv_head, d_head]
        if cfg.n_rep > 1:
            v = v.repeat_interleave(cfg.n_rep, dim=1)
        vo = torch.einsum("khd,hdm->khm", v, weight(block.attn, "W_O").float())  # [k, head, d_model]
        placement = cfg.norm_placement
        out_norm = getattr(block, "ln1_post", None) if placement in ("sandwich", "output") else (
            block.ln1 if placement == "post" else None)
        out_scale = got.get("ln1_post.hook_scale" if placement in ("sandwich", "output") else "ln1.hook_scale")
        resid_part = pre if placement != "post" else _post_norm(pre, block.ln1, out_scale.float())
        # the attention update: heads x keys and the previous residual, a block of query rows at a time in one
        # buffer reused for every block (fresh large allocations cost page faults at every block)
        per_row = max(1, n * n_heads * d_model * 4)
        rows = max(1, min(n, BLOCK_BYTES // per_row))
        buf = torch.empty(rows * n * n_heads * d_model)
        y_norm = mid.abs().sum(-1) if p == 1 else mid.pow(2).sum(-1).sqrt()
        imp_heads = torch.zeros(n, n, n_heads)
        for q0 in range(0, n, rows):
            q1 = min(n, q0 + rows)
            keys = q1 if cfg.causal else n
            parts = buf[:(q1 - q0) * keys * n_heads * d_model].view(q1 - q0, keys, n_heads, d_model)
            torch.mul(pattern[:, q0:q1, :keys].permute(1, 2, 0)[..., None], vo[None, :keys], out=parts)
            if out_norm is not None:
                if isinstance(out_norm, LayerNorm):
                    parts.sub_(parts.mean(-1, keepdim=True))
                parts.div_(out_scale.float()[q0:q1, None, None]).mul_(weight(out_norm, "w").float())
            if p == 1:  # ||y - c||_1, in place: c - y, its absolute value, summed
                dist = parts.sub_(mid[q0:q1, None, None]).abs_().sum(-1)
            else:
                y = mid[q0:q1, None, None]
                dist = (y_norm[q0:q1, None, None].pow(2) - 2 * (parts * y).sum(-1)
                        + parts.pow(2).sum(-1)).clamp_(min=0).sqrt_()
            imp_heads[q0:q1, :keys] = (y_norm[q0:q1, None, None] - dist).clamp_(min=0)
        del buf
        imp_resid = _importance(mid, resid_part, p)
        total = imp_heads.sum((1, 2)) + imp_resid
        total = torch.where(total > 0, total, torch.ones_like(total))
        attn[layer] = imp_heads / total[:, None, None]
        attn_resid[layer] = imp_resid / total
        # the MLP update: the MLP's output and the residual it is added to
        if placement == "post":
            scale = got["ln2.hook_scale"].float()
            m_part, r_part = _post_norm(mlp_out, block.ln2, scale), _post_norm(mid, block.ln2, scale)
        else:
            m_part, r_part = mlp_out, mid
        im, ir = _importance(post, m_part, p), _importance(post, r_part, p)
        total = torch.where(im + ir > 0, im + ir, torch.ones_like(im))
        mlp[layer], mlp_resid[layer] = im / total, ir / total

    hooks = []
    for layer in range(n_layers):
        prefix = f"blocks.{layer}."
        for name in ("hook_resid_pre", "hook_resid_mid", "hook_mlp_out", "attn.hook_pattern", "attn.hook_v",
                     "ln1.hook_scale", "ln2.hook_scale", "ln1_post.hook_scale"):
            if prefix + name in model.hook_dict:
                hooks.append((prefix + name, keep))
        hooks.append((prefix + "hook_resid_post", finish))
    model.run_with_hooks(ids[None].to(model.device), fwd_hooks=hooks, logit_positions=[n - 1])
    return ContributionGraph(attn=attn, attn_resid=attn_resid, mlp=mlp, mlp_resid=mlp_resid, tokens=ids,
                             threshold=float(threshold), p=p)
