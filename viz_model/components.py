"""Building blocks of the instrumented transformer, each with its hook points.

Parameter names and shapes follow TransformerLens (``W_E``, ``W_pos``, ``W_Q`` as
``[n_heads, d_model, d_head]``, ``W_O`` as ``[n_heads, d_head, d_model]``, ``W_in``, ``W_out``, ``W_U``)
so that each matrix of "Attention Is All You Need" is one tensor that a view can show.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from viz_model.config import Config
from viz_model.feed_forward import make_mlp
from viz_model.hooks import HookPoint
from viz_model.limits import attention_bytes, attn_budget_bytes
from viz_model.rotary import apply_rotary, long_factors, rotary_angles, rotary_scale, scaled_freqs


class Embed(nn.Module):
    """Token embedding: ids ``[batch, pos]`` -> vectors ``[batch, pos, d_model]`` (rows of W_E)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.W_E = nn.Parameter(torch.empty(cfg.d_vocab, cfg.d_model))
        self.scale = cfg.embed_scale

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.W_E[tokens] if self.scale == 1.0 else self.W_E[tokens] * self.scale


def sinusoidal_table(n_ctx: int, d_model: int) -> torch.Tensor:
    """The fixed positional encodings of Vaswani et al. (2017), section 3.5.

    ``PE[pos, 2i] = sin(pos / 10000^(2i / d_model))`` and ``PE[pos, 2i+1] = cos(pos / 10000^(2i / d_model))``.

    Returns:
        ``[n_ctx, d_model]`` float32 tensor.
    """
    pos = torch.arange(n_ctx, dtype=torch.float64)[:, None]
    inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(n_ctx, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)
    return table.float()


class PosEmbed(nn.Module):
    """Absolute positions ``[batch, pos] -> [batch, pos, d_model]``: a learned table or the fixed sinusoid.

    With ``positional == "none"`` it returns zeros, so ``hook_pos_embed`` always exists. With ``position_pad_id``
    (RoBERTa) positions count only the tokens that are not that id, and such a token gets the row ``W_pos_pad``
    ``[d_model]``: transformers' ``create_position_ids_from_input_ids``, ``cumsum(ids != pad) * (ids != pad) + pad``
    in rows of its table, whose first ``pad + 1`` rows (``pad`` is ``W_pos_pad``) precede ours.
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.kind = cfg.positional
        if self.kind == "learned":  # rotary positions act inside attention: nothing is added here
            self.W_pos = nn.Parameter(torch.empty(cfg.n_ctx, cfg.d_model))
        elif self.kind == "sinusoidal":
            # Not saved in checkpoints: it is a pure function of (n_ctx, d_model).
            self.register_buffer("W_pos", sinusoidal_table(cfg.n_ctx, cfg.d_model), persistent=False)
        else:  # nothing is added; no table is stored (a Llama context of 131,072 would cost gigabytes)
            self.W_pos = None
        self.d_model = cfg.d_model
        self.pad_id = cfg.position_pad_id
        if self.pad_id is not None:
            self.W_pos_pad = nn.Parameter(torch.empty(cfg.d_model))

    def forward(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        n_pos = tokens.shape[-1]
        if self.W_pos is None:
            return torch.zeros(tokens.shape[0], n_pos, self.d_model, device=tokens.device)
        if self.pad_id is not None:  # RoBERTa: padding does not advance the position and has its own row
            real = tokens != self.pad_id
            idx = (torch.cumsum(real, dim=-1) - 1 + offset).clamp(min=0)
            return torch.where(real[..., None], self.W_pos[idx], self.W_pos_pad)
        return self.W_pos[offset:offset + n_pos].unsqueeze(0).expand(tokens.shape[0], -1, -1)


class LayerNorm(nn.Module):
    """LayerNorm (Ba et al., 2016): ``(x - mean) / sqrt(var + eps) * w + b`` over ``d_model``.

    Hooks: ``hook_scale`` ``[batch, pos, 1]`` = sqrt(var + eps); ``hook_normalized``
    ``[batch, pos, d_model]`` = the output, after ``w`` and ``b`` (as in TransformerLens).
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.eps = cfg.layer_norm_eps
        self.w = nn.Parameter(torch.ones(cfg.d_model))
        self.b = nn.Parameter(torch.zeros(cfg.d_model))
        self.hook_scale = HookPoint()
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()  # computed in float32 whatever the model's dtype (as torch's layer_norm does), output in x's
        xf = xf - xf.mean(-1, keepdim=True)
        scale = self.hook_scale((xf.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized((xf / scale * self.w + self.b).to(x.dtype))


class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich, 2019): ``x / sqrt(mean(x^2) + eps) * w`` over ``d_model``; no centring, no bias.

    Hooks as :class:`LayerNorm`: ``hook_scale`` ``[batch, pos, 1]`` = sqrt(mean(x^2) + eps) and
    ``hook_normalized`` ``[batch, pos, d_model]`` (after ``w``).
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.eps = cfg.layer_norm_eps
        self.w = nn.Parameter(torch.ones(cfg.d_model))
        self.hook_scale = HookPoint()
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()  # in float32 whatever the model's dtype (transformers' LlamaRMSNorm), output in x's dtype
        scale = self.hook_scale((xf.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized((xf / scale * self.w).to(x.dtype))


class QKNorm(nn.Module):
    """RMSNorm of queries or keys ``[batch, pos, head_index, d_head]`` before rotation (q/k norm; Dehghani et al.,
    2023): over each head's ``d_head`` values (``per_head``: Qwen3, Gemma 3) or over all heads of a position at
    once (OLMo2, OLMoE), with weight ``w`` ``[d_head]`` or ``[head_index * d_head]``.

    Hooks: ``hook_scale`` ``[batch, pos, head_index or 1, 1]`` = sqrt(mean(x^2) + eps) and ``hook_normalized``
    ``[batch, pos, head_index, d_head]`` (after ``w``).
    """

    def __init__(self, cfg: Config, n_heads: int, per_head: bool) -> None:
        super().__init__()
        self.eps, self.per_head = cfg.layer_norm_eps, per_head
        self.w = nn.Parameter(torch.ones(cfg.d_head if per_head else n_heads * cfg.d_head))
        self.hook_scale, self.hook_normalized = HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        axes = (-1,) if self.per_head else (-2, -1)
        xf = x.float()  # in float32 whatever the model's dtype, output in x's dtype
        scale = self.hook_scale((xf.pow(2).mean(axes, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized((xf / scale * self.w.view(-1, x.shape[-1]).squeeze(0)).to(x.dtype))


def make_norm(cfg: Config) -> nn.Module:
    """The normalisation layer the config asks for (:class:`LayerNorm` or :class:`RMSNorm`)."""
    return RMSNorm(cfg) if cfg.norm == "rmsnorm" else LayerNorm(cfg)


def relative_position_bucket(relative: torch.Tensor, bidirectional: bool, n_buckets: int,
                             max_distance: int) -> torch.Tensor:
    """T5's bucket of each relative position ``key - query`` (Raffel et al., 2020; transformers'
    ``T5Attention._relative_position_bucket``): half the buckets (a quarter per direction when ``bidirectional``)
    count exact distances 0, 1, 2, ...; the rest cover distances up to ``max_distance`` on a log scale, and
    everything farther shares the last one. Returns int64 buckets in ``[0, n_buckets)``, shaped like ``relative``."""
    buckets = torch.zeros_like(relative)
    if bidirectional:
        n_buckets //= 2
        buckets += (relative > 0).long() * n_buckets
        relative = relative.abs()
    else:
        relative = -torch.clamp(relative, max=0)
    exact = n_buckets // 2
    large = exact + (torch.log(relative.float() / exact) / math.log(max_distance / exact)
                     * (n_buckets - exact)).long()
    large = torch.clamp(large, max=n_buckets - 1)
    return buckets + torch.where(relative < exact, relative, large)


class RelativePositionBias(nn.Module):
    """T5's relative position bias (Raffel et al., 2020, section 2.1): a learned scalar per head and distance bucket,
    ``W_rel`` ``[n_buckets, n_heads]``, added to every self-attention layer's scores of its stack (the encoder's
    looks both ways, the decoder's only back). It replaces positional embeddings: nothing is added to the tokens.

    ``forward(n_q, n_k)`` records ``hook_bias`` ``[1, head_index, query_pos, key_pos]`` (the same for every batch
    entry; the stack calls it once per forward pass); the layers read the same values through :meth:`bias`.
    """

    def __init__(self, cfg: Config, bidirectional: bool) -> None:
        super().__init__()
        self.W_rel = nn.Parameter(torch.empty(cfg.rel_pos_buckets, cfg.n_heads))
        self.bidirectional, self.max_distance = bidirectional, cfg.rel_pos_max_distance
        self.hook_bias = HookPoint()

    def buckets(self, n_q: int, n_k: int, first: int | None = None) -> torch.Tensor:
        """``[n_q, n_k]`` bucket of every (query, key) pair; the queries are the last ``n_q`` of ``n_k`` positions
        (or the ``n_q`` from ``first`` on), as in :func:`attention_mask`."""
        first = n_k - n_q if first is None else first
        q_pos = torch.arange(first, first + n_q, device=self.W_rel.device)[:, None]
        k_pos = torch.arange(n_k, device=self.W_rel.device)[None, :]
        return relative_position_bucket(k_pos - q_pos, self.bidirectional, self.W_rel.shape[0], self.max_distance)

    def bias(self, n_q: int, n_k: int, first: int | None = None) -> torch.Tensor:
        """``[n_heads, n_q, n_k]``: ``W_rel`` at each pair's bucket."""
        return self.W_rel[self.buckets(n_q, n_k, first)].permute(2, 0, 1)

    def forward(self, n_q: int, n_k: int, first: int | None = None) -> torch.Tensor:
        return self.hook_bias(self.bias(n_q, n_k, first).unsqueeze(0))


class Attention(nn.Module):
    """Multi-head self-attention, computed explicitly (Vaswani et al., 2017, section 3.2).

    ``scores = q k^T / sqrt(d_head)``, masked with -inf above the diagonal when causal,
    ``pattern = softmax(scores)``, ``z = pattern v``, ``out = concat_h(z_h) W_O + b_O``.

    Grouped-query attention (Ainslie et al., 2023): ``W_K``, ``W_V`` have ``n_kv_heads`` heads and query
    head ``h`` reads key/value head ``h // (n_heads / n_kv_heads)``; ``n_kv_heads = 1`` is multi-query.
    Rotary models rotate q and k by position before the dot product (:mod:`viz_model.rotary`).

    ``clip_qkv`` (OLMoE): q and k clamped to ``±clip_qkv`` after their q/k norm, v after its projection, as
    transformers' ``OlmoeAttention`` does.

    Hooks: ``hook_q`` ``[batch, pos, n_heads, d_head]``, ``hook_k/v`` ``[batch, pos, n_kv_heads, d_head]``
    (before rotation; q and k before the norm and clamp, v after the clamp), ``hook_rot_q/rot_k`` (after rotation,
    rotary models only), ``hook_z`` ``[batch, pos, n_heads, d_head]``; ``hook_attn_scores`` and ``hook_pattern``
    ``[batch, head_index, query_pos, key_pos]`` (one pattern per query head).

    With ``cross=True`` (a decoder's cross-attention) q comes from the decoder and k, v from the encoder's
    output ``context`` ``[batch, src_pos, d_model]``: no mask, key_pos runs over the source tokens.
    """

    def __init__(self, cfg: Config, cross: bool = False, rel_pos: "RelativePositionBias | None" = None) -> None:
        super().__init__()
        self.cfg = cfg
        # T5: the stack's relative position bias, owned (and saved) by the stack, not by this layer
        object.__setattr__(self, "rel_pos", None if cross else rel_pos)
        self.cross = cross  # cross-attention: keys and values from the encoder's output, no mask, no rotation
        h, g, d, k = cfg.n_heads, cfg.n_kv_heads, cfg.d_model, cfg.d_head
        self.W_Q = nn.Parameter(torch.empty(h, d, k))
        self.W_K = nn.Parameter(torch.empty(g, d, k))
        self.W_V = nn.Parameter(torch.empty(g, d, k))
        self.W_O = nn.Parameter(torch.empty(h, k, d))
        bias = cfg.attn_bias
        self.b_Q = nn.Parameter(torch.zeros(h, k)) if bias else None
        self.b_K = nn.Parameter(torch.zeros(g, k)) if bias else None
        self.b_V = nn.Parameter(torch.zeros(g, k)) if bias else None
        self.b_O = nn.Parameter(torch.zeros(d)) if bias else None
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        if cfg.qk_norm != "none":  # Qwen3, OLMo2, Gemma 3: q and k normed (RMSNorm) before rotation
            self.q_norm = QKNorm(cfg, h, cfg.qk_norm == "head")
            self.k_norm = QKNorm(cfg, g, cfg.qk_norm == "head")
        if cfg.positional == "rotary" and not cross:
            self.hook_rot_q, self.hook_rot_k = HookPoint(), HookPoint()
        self.hook_attn_scores, self.hook_pattern, self.hook_z = HookPoint(), HookPoint(), HookPoint()

    @staticmethod
    def _project(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        out = torch.einsum("bpd,hdk->bphk", x, W)
        return out if b is None else out + b

    def masked_scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """:func:`masked_scores` with this layer's config (cross-attention: nothing masked). Used by ``forward``
        and, recomputing the very same operations, by ``run_with_cache`` to give ``hook_attn_scores`` without
        storing it."""
        return masked_scores(q, k, self.cfg, self.cross, self.rel_pos)

    def rotary_angles(self, n: int, first: int, device: torch.device) -> torch.Tensor:
        """The rotary angles ``pos * theta_i`` ``[n, d_rotary / 2]`` of positions ``first .. first + n - 1``, computed
        on ``device`` from this layer's frequencies (:func:`viz_model.rotary.scaled_freqs`), which are kept per device
        and per LongRoPE factor set. A table built on the CPU and copied to a GPU in every layer made each forward
        pass wait for the GPU 32 times (1.24 B model: twice transformers' time at 64 tokens, docs/memory.md: On a GPU)."""
        cfg = self.cfg
        n_pos = first + n
        key = (str(device), cfg.rotary_scaling == "longrope" and long_factors(cfg, n_pos))
        kept = self.__dict__.setdefault("_rotary_freqs", {})
        freqs = kept.get(key)
        if freqs is None:
            freqs = kept[key] = scaled_freqs(cfg, n_pos).to(device)
        return rotary_angles(n, cfg.d_rotary, cfg.rotary_base, first, freqs)

    def _fused_qkv(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``[W_Q | W_K | W_V]`` as one ``[d_model, (n_heads + 2 n_kv_heads) d_head]`` matrix (a transposed view of
        ``[out, d_model]`` storage) and bias, so that
        inference runs one matrix product like GPT-2's ``c_attn``; rebuilt whenever a weight changes. Kept between
        calls unless ``keep_fused`` is False (set by :func:`viz_model.placement.dispatch` on a module whose weights are
        offloaded: a resident fused copy would undo the offloading) or the weights are on the ``meta`` device."""
        params = [self.W_Q, self.W_K, self.W_V] + ([self.b_Q, self.b_K, self.b_V] if self.b_Q is not None else [])
        key = tuple((p.data_ptr(), p._version) for p in params)
        keep = getattr(self, "keep_fused", True) and not any(p.is_meta for p in params)
        if not keep or getattr(self, "_fused_key", None) != key:
            d = self.cfg.d_model
            # stored [out, in] and used through its transpose: the layout of nn.Linear, which bfloat16 matrix products on
            # a CPU need to be fast (x @ W with W stored [in, out] took 5x longer there); float32 is as fast either way
            W = torch.cat([w.permute(0, 2, 1).reshape(-1, d) for w in (self.W_Q, self.W_K, self.W_V)], dim=0).T
            b = torch.cat([p.reshape(-1) for p in params[3:]]) if self.b_Q is not None else None
            fused = (W.detach(), None if b is None else b.detach())
            if not keep:
                return fused
            self._fused, self._fused_key = fused, key
        return self._fused

    def _qkv(self, x: torch.Tensor, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q ``[batch, pos, n_heads, d_head]``, k and v ``[batch, src_pos, n_kv_heads, d_head]``."""
        cfg = self.cfg
        if self.cross or torch.is_grad_enabled():  # training (autograd) and cross-attention: per-matrix products
            return (self._project(x, self.W_Q, self.b_Q), self._project(source, self.W_K, self.b_K),
                    self._project(source, self.W_V, self.b_V))
        W, b = self._fused_qkv()
        out = x @ W if b is None else torch.addmm(b, x.reshape(-1, x.shape[-1]), W).view(*x.shape[:-1], -1)
        h, g, k = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
        q, kk, v = out.split([h * k, g * k, g * k], dim=-1)
        return (q.reshape(*x.shape[:-1], h, k), kk.reshape(*x.shape[:-1], g, k), v.reshape(*x.shape[:-1], g, k))

    def forward(self, x: torch.Tensor, kv: "LayerKV | None" = None, context: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` ``[batch, pos, d_model]`` -> ``[batch, pos, d_model]``.

        With ``kv`` (generation with a KV cache), ``x`` holds only the new positions: their q, k and v
        are computed, the earlier keys and values come from ``kv``, and ``kv`` is extended. The hooks
        then see ``hook_k``/``hook_v`` for the new positions only, and scores/patterns of shape
        ``[batch, head_index, new_query_pos, all_key_pos]``.
        """
        cfg = self.cfg
        source = context if self.cross else x  # cross-attention reads keys and values from the encoder
        q, k, v = self._qkv(x, source)
        clip = cfg.clip_qkv
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v if clip is None else v.clamp(-clip, clip))
        if cfg.qk_norm != "none":
            q, k = self.q_norm(q), self.k_norm(k)
        if clip is not None:  # OLMoE: q and k clamped after their norm
            q, k = q.clamp(-clip, clip), k.clamp(-clip, clip)
        if self.cross:
            kv = None  # the encoder's keys and values are complete; nothing to cache per step
        elif cfg.positional == "rotary":
            first = kv.n_pos if kv is not None else 0  # LongRoPE's factors depend on the whole sequence's length
            angles = self.rotary_angles(x.shape[1], first, x.device)
            q = self.hook_rot_q(apply_rotary(q, angles, rotary_scale(cfg)))
            k = self.hook_rot_k(apply_rotary(k, angles, rotary_scale(cfg)))
        if kv is not None:
            k, v = kv.extend(k, v)
        if cfg.n_rep > 1:  # every query head reads its group's value head (transformers' repeat_kv)
            v = v.repeat_interleave(cfg.n_rep, dim=2)
        # Scores and pattern are two [batch, n_heads, query_pos, key_pos] tensors alive at once; above the
        # memory budget (VIZ_ATTN_BUDGET_MB) they are computed a block of heads and query rows at a time, with
        # the same operations, unless a hook listens to them (a listener needs the whole tensor).
        listened = self.hook_attn_scores.active or self.hook_pattern.active
        if not listened and attention_bytes(q.shape[0] * cfg.n_heads, q.shape[1], k.shape[1]) \
                > attn_budget_bytes():
            z = self.hook_z(chunked_attention(q, k, v, self.cfg, self.cross, rel_pos=self.rel_pos))
        else:
            scores = self.hook_attn_scores(self.masked_scores(q, k))
            pattern = self.hook_pattern(torch.softmax(scores, dim=-1))
            # the pattern is float32 (see masked_scores); the weighted sum of v runs in the model's dtype, as in
            # transformers' eager attention (softmax in float32, cast to the values' dtype)
            z = self.hook_z((pattern.to(v.dtype) @ v.transpose(1, 2)).transpose(1, 2))  # [batch, pos, head, d_head]
        out = z.reshape(*z.shape[:2], -1) @ self.W_O.reshape(-1, cfg.d_model)  # concat(z) W_O
        return out if self.b_O is None else out + self.b_O


def chunked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: Config, cross: bool = False,
                      budget: int | None = None, rel_pos: "RelativePositionBias | None" = None) -> torch.Tensor:
    """``softmax(masked_scores(q, k)) v`` computed a block of (batch·head, query rows) at a time so that the
    block's scores and pattern stay within ``budget`` bytes (default :func:`attn_budget_bytes`) whatever the
    number of heads or tokens: the same operations as ``Attention.forward`` on each block (every query row's
    softmax sees all its keys), so the result equals the unblocked one (the matrix products may differ in the
    last bit of float32 rounding).

    Args:
        q: ``[batch, query_pos, n_heads, d_head]`` (after rotation); the queries are the last ``query_pos`` keys.
        k: ``[batch, key_pos, n_kv_heads, d_head]`` (after rotation).
        v: ``[batch, key_pos, n_heads, d_head]`` (already repeated per query head under grouped-query attention).

    Returns:
        z ``[batch, query_pos, n_heads, d_head]``.
    """
    budget = attn_budget_bytes() if budget is None else budget
    b, n_q, h, d = q.shape
    n_k = k.shape[1]
    if cfg.n_rep > 1:
        k = k.repeat_interleave(cfg.n_rep, dim=2)
    qh, kh, vh = (t.transpose(1, 2).reshape(b * h, t.shape[1], d) for t in (q, k, v))  # [batch·head, pos, d]
    qh, kh = qh.float(), kh.float()  # scores in float32 whatever the model's dtype, as masked_scores
    per_row = attention_bytes(1, 1, n_k, 4)  # one query row of one head (float32 scores)
    rows = max(1, min(n_q, budget // max(1, per_row * b * h)))
    heads = b * h if rows > 1 or per_row * b * h <= budget else max(1, budget // per_row)
    z = torch.empty(b * h, n_q, d, dtype=torch.result_type(q, v), device=q.device)
    first = n_k - n_q
    for r0 in range(0, n_q, rows):
        r1 = min(n_q, r0 + rows)
        hidden = None if cross else attention_mask(r1 - r0, n_k, cfg.causal, cfg.attn_window, q.device, first + r0)
        for h0 in range(0, b * h, heads):
            h1 = min(b * h, h0 + heads)
            scores = scale_scores(qh[h0:h1, r0:r1] @ kh[h0:h1].transpose(1, 2), cfg)
            if rel_pos is not None:  # T5: [head, rows, key] bias, the same for every batch entry
                scores += rel_pos.bias(r1 - r0, n_k, first + r0).repeat(b, 1, 1)[h0:h1]
            if hidden is not None:
                scores.masked_fill_(hidden, float("-inf"))
            pattern = torch.softmax(scores, dim=-1)
            del scores
            z[h0:h1, r0:r1] = pattern.to(vh.dtype) @ vh[h0:h1]
            del pattern
    return z.view(b, h, n_q, d).transpose(1, 2)


def attn_divisor(cfg: Config) -> float:
    """What q.k is divided by: ``attn_scale`` when set (Gemma 2: sqrt(query_pre_attn_scalar); T5: 1), else
    sqrt(d_head) ("Attention Is All You Need", eq. 1)."""
    return math.sqrt(cfg.d_head) if cfg.attn_scale is None else float(cfg.attn_scale)


def soft_cap(x: torch.Tensor, cap: float) -> torch.Tensor:
    """``cap * tanh(x / cap)`` in place: about ``x`` for small values, never beyond ``±cap`` (Gemma 2's attention
    and final-logit soft-capping; transformers' ``Gemma2`` eager attention). Out of place under autograd (tanh's
    gradient needs its output unchanged)."""
    if x.requires_grad:
        return torch.tanh(x / cap) * cap
    return x.div_(cap).tanh_().mul_(cap)


def scale_scores(dots: torch.Tensor, cfg: Config) -> torch.Tensor:
    """Raw dot products ``q.k`` -> the scores before the mask, in place: divided by :func:`attn_divisor`, then
    soft-capped when ``attn_softcap`` is set."""
    dots = dots.div_(attn_divisor(cfg))
    return dots if cfg.attn_softcap is None else soft_cap(dots, cfg.attn_softcap)


def masked_scores(q: torch.Tensor, k: torch.Tensor, cfg: Config, cross: bool = False,
                  rel_pos: "RelativePositionBias | None" = None) -> torch.Tensor:
    """``q k^T / sqrt(d_head)`` (see :func:`scale_scores`: another divisor or a soft cap where the config asks)
    with -inf where the mask hides a key: ``[batch, head_index, query_pos, key_pos]``
    from q ``[batch, query_pos, n_heads, d_head]`` and k ``[batch, key_pos, n_kv_heads, d_head]`` (after
    rotation; the last query sits at the last key's position). ``cross``: cross-attention, where every source
    position is visible. ``rel_pos`` (T5): the stack's relative position bias, added before the mask.
    The result is float32 whatever the model's dtype (q and k are upcast first).
    Source: "Attention Is All You Need", eq. 1 (scaled dot-product attention)."""
    if cfg.n_rep > 1:  # every query head reads its group's key head (transformers' repeat_kv)
        k = k.repeat_interleave(cfg.n_rep, dim=2)
    # scaled and masked in place: at 1,024 tokens each copy would be 50 MB per layer
    # float32 whatever the model's dtype (bfloat16 weights too): the scores and patterns every view shows are
    # computed from the model's own q and k without a second rounding
    scores = scale_scores(q.transpose(1, 2).float() @ k.permute(0, 2, 3, 1).float(), cfg)
    if rel_pos is not None:
        scores += rel_pos.bias(q.shape[1], k.shape[1])
    hidden = None if cross else attention_mask(q.shape[1], k.shape[1], cfg.causal, cfg.attn_window, q.device)
    if hidden is not None:
        scores.masked_fill_(hidden, float("-inf"))
    return scores


def attention_mask(n_q: int, n_k: int, causal: bool, window: int | None, device=None,
                   first: int | None = None) -> torch.Tensor | None:
    """Which (query, key) pairs are hidden: ``[n_q, n_k]`` bool (True = score set to -inf), or None.

    The queries are the last ``n_q`` of ``n_k`` positions (query i sits at absolute position
    ``n_k - n_q + i``), or, with ``first``, the ``n_q`` positions from ``first`` on (a block of query rows).
    Causal: keys after the query are hidden. ``window`` (sliding-window attention): keys ``window`` or more
    positions before the query are hidden too.
    """
    if not causal:
        return None
    first = n_k - n_q if first is None else first
    q_pos = torch.arange(first, first + n_q, device=device)[:, None]
    k_pos = torch.arange(n_k, device=device)[None, :]
    hidden = k_pos > q_pos
    if window is not None:
        hidden |= k_pos <= q_pos - window
    return hidden


class LayerKV:
    """The keys and values one attention layer has computed so far, ``[batch, pos, head_index, d_head]``."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    @property
    def n_pos(self) -> int:
        """Number of positions stored."""
        return 0 if self.k is None else self.k.shape[1]

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new positions' keys and values; return all keys and values."""
        self.k = k if self.k is None else torch.cat([self.k, k], dim=1)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=1)
        return self.k, self.v


class Block(nn.Module):
    """One transformer block: attention and MLP sub-layers, each with a residual connection.

    Pre-LN (GPT-2): ``mid = pre + attn(ln1(pre))``, ``post = mid + mlp(ln2(mid))``.
    Post-LN (Vaswani et al., 2017): ``mid = ln1(pre + attn(pre))``, ``post = ln2(mid + mlp(mid))``.
    Sandwich (Gemma 2): ``mid = pre + ln1_post(attn(ln1(pre)))``, ``post = mid + ln2_post(mlp(ln2(mid)))``.
    Output norms only (OLMo2): ``mid = pre + ln1_post(attn(pre))``, ``post = mid + ln2_post(mlp(mid))``.
    Parallel residual (GPT-NeoX, pre-LN only): ``post = pre + attn(ln1(pre)) + mlp(ln2(pre))``; ``resid_mid`` is then
    ``pre + attn_out``, a partial sum that the MLP does not read.
    A decoder block of an encoder-decoder model (``cross=True``) has a third sub-layer between them,
    cross-attention over the encoder's output with its own norm ``ln_cross``: pre-LN
    ``mid_cross = mid + cross_attn(ln_cross(mid), enc)``, post-LN ``mid_cross = ln_cross(mid + cross_attn(mid, enc))``.
    ``cfg`` is the layer's own (:meth:`Config.for_layer`: its window and rotary base).
    Hooks: ``hook_resid_pre/mid/post``, ``hook_attn_out``, ``hook_mlp_out`` (after the output norm, if any, as
    added to the stream) and, with cross-attention, ``hook_cross_attn_out``, ``hook_resid_mid_cross``, all
    ``[batch, pos, d_model]``.
    """

    def __init__(self, cfg: Config, cross: bool = False, rel_pos: RelativePositionBias | None = None) -> None:
        super().__init__()
        self.placement = cfg.norm_placement
        self.pre_ln = cfg.norm_placement == "pre"
        self.parallel = cfg.parallel_residual
        self.ln1 = make_norm(cfg) if cfg.norm_placement != "output" else None
        self.attn = Attention(cfg, rel_pos=rel_pos)
        if cfg.output_norm:
            self.ln1_post = make_norm(cfg)
        if cross:
            self.ln_cross = make_norm(cfg) if cfg.norm_placement != "output" else None
            self.cross_attn = Attention(cfg, cross=True)
            if cfg.output_norm:
                self.ln_cross_post = make_norm(cfg)
            self.hook_cross_attn_out, self.hook_resid_mid_cross = HookPoint(), HookPoint()
        self.ln2 = make_norm(cfg) if cfg.norm_placement != "output" else None
        self.mlp = make_mlp(cfg)
        if cfg.output_norm:
            self.ln2_post = make_norm(cfg)
        self.has_cross = cross
        self.drop = nn.Dropout(cfg.dropout)
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()
        self.hook_attn_out, self.hook_mlp_out = HookPoint(), HookPoint()

    def _sublayer(self, norm_in, layer, norm_out, x: torch.Tensor, **kwargs) -> torch.Tensor:
        """One pre-LN / sandwich / output-norm sub-layer's output (before the residual add)."""
        out = layer(x if norm_in is None else norm_in(x), **kwargs)
        return self.drop(out if norm_out is None else norm_out(out))

    def forward(self, resid: torch.Tensor, kv: LayerKV | None = None, context: torch.Tensor | None = None) -> torch.Tensor:
        resid = self.hook_resid_pre(resid)
        if self.placement != "post":
            post = (lambda name: getattr(self, name + "_post")) if self.placement != "pre" else (lambda name: None)
            attn_out = self.hook_attn_out(self._sublayer(self.ln1, self.attn, post("ln1"), resid, kv=kv))
            mid = self.hook_resid_mid(resid + attn_out)
            if self.has_cross:
                cross_out = self._sublayer(self.ln_cross, self.cross_attn, post("ln_cross"), mid, context=context)
                mid = self.hook_resid_mid_cross(mid + self.hook_cross_attn_out(cross_out))
            mlp_in = resid if self.parallel else mid  # GPT-NeoX: the MLP reads the block's input, as attention does
            mlp_out = self.hook_mlp_out(self._sublayer(self.ln2, self.mlp, post("ln2"), mlp_in))
            return self.hook_resid_post(mid + mlp_out)
        attn_out = self.hook_attn_out(self.drop(self.attn(resid, kv)))
        mid = self.hook_resid_mid(self.ln1(resid + attn_out))
        if self.has_cross:
            cross_out = self.hook_cross_attn_out(self.drop(self.cross_attn(mid, context=context)))
            mid = self.hook_resid_mid_cross(self.ln_cross(mid + cross_out))
        mlp_out = self.hook_mlp_out(self.drop(self.mlp(mid)))
        return self.hook_resid_post(self.ln2(mid + mlp_out))
