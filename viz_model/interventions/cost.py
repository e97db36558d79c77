"""The work of a causal sweep in forward-equivalents, so that a page can say how long it will take before running it.

One unit is one forward pass of the whole model on one copy of the prompt. Work is counted as matrix-multiply
FLOPs (2 per multiply-add), the operations that dominate a transformer (Kaplan et al., 2020, "Scaling Laws for
Neural Language Models", section 2.1): the weight matrices a token goes through, plus attention's ``q k^T`` and
``pattern v`` over every (query, key) pair (the model computes the full square, masked afterwards). Norms,
softmax and the embedding lookup are left out. A page multiplies the result by its own measured seconds per
forward pass.
"""

from __future__ import annotations

from torch import nn

from viz_model.model import VizTransformer

KINDS = ("resid_pre", "attn_out", "mlp_out", "head", "ablation")
METHODS = ("exact", "attribution")


def _macs(module: nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Multiply-adds per token through ``module``'s weight matrices (``W_*`` parameters; biases and norm weights are
    additions)."""
    return sum(p.numel() for name, p in module.named_parameters()
               if name.rsplit(".", 1)[-1].startswith("W") and not any(name.startswith(s) for s in skip))


def _block_parts(block: nn.Module, n_pos: int, n_src: int) -> dict[str, float]:
    """FLOPs of one block on one copy of ``n_pos`` tokens by part: ``qkv`` (projections), ``pairs`` (self-attention's
    ``q k^T`` and ``pattern v``, the full square), ``out`` (``W_O``), ``cross`` (cross-attention over ``n_src`` encoder
    positions, of which ``cross_kv`` its key and value projections), ``mlp`` (router, the ``k`` experts a token goes
    to and the shared expert, for a mixture)."""
    cfg = block.attn.cfg
    attn = block.attn
    out = 2.0 * attn.W_O.numel() * n_pos
    parts = {"qkv": 2.0 * _macs(attn) * n_pos - out, "pairs": 2.0 * 2 * cfg.n_heads * cfg.d_head * n_pos * n_pos,
             "out": out, "cross": 0.0, "cross_kv": 0.0}
    if block.has_cross:  # q and W_O per target token, k and v per source token, scores over source keys
        cross = block.cross_attn
        kv = cross.W_K.numel() + cross.W_V.numel()
        parts["cross_kv"] = 2.0 * kv * n_src
        parts["cross"] = 2.0 * ((_macs(cross) - kv) * n_pos + kv * n_src + 2 * cfg.n_heads * cfg.d_head * n_pos * n_src)
    mlp = block.mlp
    if hasattr(mlp, "experts"):  # a token goes through the router, k experts and the shared expert
        parts["mlp"] = 2.0 * (_macs(mlp, ("experts.",)) + mlp.k * _macs(mlp.experts[0])) * n_pos
    else:
        parts["mlp"] = 2.0 * _macs(mlp) * n_pos
    return parts


def _block_flops(block: nn.Module, n_pos: int, n_src: int) -> float:
    parts = _block_parts(block, n_pos, n_src)
    return sum(v for k, v in parts.items() if k != "cross_kv")


def _block_backward(parts: dict[str, float]) -> float:
    """Activation gradients of one block: a weight matrix costs one product (``grad W^T``), as forward; the
    self-attention pair products two each (both factors need a gradient); cross-attention's pair products one each
    and its key and value projections none (the encoder's output needs no gradient)."""
    return parts["qkv"] + 2 * parts["pairs"] + parts["out"] + parts["cross"] - parts["cross_kv"] + parts["mlp"]


def forward_flops(model: VizTransformer, n_pos: int, n_src: int | None = None) -> dict:
    """Matrix-multiply FLOPs of one forward pass on one copy of an ``n_pos``-token prompt, by part.

    Args:
        n_src: source tokens of an encoder-decoder (default ``n_pos``).

    Returns:
        ``{"encoder": float, "blocks": [float per decoder block], "decode": float}`` (the decode: the masked-LM
        transform, if any, and the unembedding; 0 without a language-model head).
    """
    n_src = n_pos if n_src is None else n_src
    encoder = 0.0 if model.encoder is None else sum(_block_flops(b, n_src, n_src) for b in model.encoder.blocks)
    decode = 0.0
    if model.has_lm_head:
        decode = 2.0 * n_pos * (model.cfg.d_model * model.cfg.d_vocab
                                + (_macs(model.mlm_head) if model.mlm_head is not None else 0))
    return {"encoder": encoder, "blocks": [_block_flops(b, n_pos, n_src) for b in model.blocks], "decode": decode}


def backward_flops(model: VizTransformer, n_pos: int, kind: str = "resid_pre", n_src: int | None = None) -> float:
    """FLOPs of the backward pass of attribution patching: gradients of the activations only (no weight gradients),
    from the logits down to layer 0's patch site of ``kind`` (autograd computes no more): block 0's input
    (``resid_pre``), its heads' ``hook_z`` (``head``: not its q, k, v), its attention output (``attn_out``) or its MLP
    output (``mlp_out``: nothing of block 0). See :func:`_block_backward` for a block's share."""
    n_src = n_pos if n_src is None else n_src
    blocks = [_block_parts(b, n_pos, n_src) for b in model.blocks]
    first = blocks[0]
    skipped = {"resid_pre": 0.0, "head": first["qkv"] + 2 * first["pairs"],
               "attn_out": first["qkv"] + 2 * first["pairs"] + first["out"], "mlp_out": _block_backward(first)}[kind]
    return sum(_block_backward(parts) for parts in blocks) - skipped + forward_flops(model, n_pos, n_src)["decode"]


def n_cells(model: VizTransformer, n_pos: int, kind: str) -> list[int]:
    """Cells per layer of a sweep: ``n_pos`` (positions) or ``n_heads`` (``head``, ``ablation``)."""
    if kind not in KINDS:
        raise ValueError(f"unknown sweep {kind!r} (one of: {', '.join(KINDS)})")
    per_layer = model.cfg.n_heads if kind in ("head", "ablation") else n_pos
    return [per_layer] * model.cfg.n_layers


def sweep_cost(model: VizTransformer, n_pos: int, kind: str, method: str = "exact", reuse_prefix: bool = True,
               n_src: int | None = None, logit_rows: int | None = None) -> float:
    """The work of one sweep in forward-equivalents (one forward pass of the whole model on one copy of the
    prompt = 1), for the page's time estimate: multiply by measured seconds per forward pass.

    Args:
        n_pos: tokens of the prompt (decoder tokens of an encoder-decoder; ``n_src`` its source tokens).
        kind: ``resid_pre``, ``attn_out``, ``mlp_out`` (a cell per layer and position), ``head`` (patching a head's
            ``hook_z``) or ``ablation`` (:func:`..ablation.head_ablation_effects`), a cell per layer and head.
        method: ``exact`` (activation patching, one patched copy per cell) or ``attribution`` (attribution
            patching, ``get_attr_patch_*``: one corrupted forward and one backward for every cell).
        reuse_prefix: for ``exact``, as the sweeps' argument.
        logit_rows: for ``exact`` with prefix reuse, the positions the metric reads
            (:func:`.batching.reads_logits_at`: ``logit_diff_metric``, ``prob_metric`` and the ablation effects read
            one): only those rows are decoded; None: every position.

    Returns:
        ``exact`` with prefix reuse: 1 (the run that records each layer's input, encoder included) + Σ over cells at
        layer ``l`` of (FLOPs of blocks ``l ..`` + decode) / FLOPs of a forward pass; without: one whole forward per
        cell (+1 for ablation's reference run). ``attribution``: 1 + backward FLOPs (activation gradients only,
        :func:`backward_flops`) / forward FLOPs, about 2 whatever the number of cells.

    Raises:
        ValueError: an unknown kind or method; ``ablation`` with ``attribution``.
    """
    cells = n_cells(model, n_pos, kind)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} (one of: {', '.join(METHODS)})")
    flops = forward_flops(model, n_pos, n_src)
    total = flops["encoder"] + sum(flops["blocks"]) + flops["decode"]
    if method == "attribution":
        if kind == "ablation":
            raise ValueError("attribution patching estimates patching sweeps, not head ablation")
        return 1.0 + backward_flops(model, n_pos, kind, n_src) / total
    if not reuse_prefix:
        return float(sum(cells)) + (1.0 if kind == "ablation" else 0.0)
    decode = flops["decode"] * (1.0 if logit_rows is None else min(n_pos, logit_rows) / max(1, n_pos))
    suffix = [sum(flops["blocks"][layer:]) + decode for layer in range(model.cfg.n_layers)]
    return 1.0 + sum(n * work for n, work in zip(cells, suffix)) / total
