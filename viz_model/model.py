"""The instrumented decoder-only transformer."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from viz_model.components import Block, Embed, LayerKV, LayerNorm, PosEmbed, RelativePositionBias, make_norm, soft_cap
from viz_model.feed_forward import ACTIVATIONS, MLP
from viz_model.config import Config
from viz_model.hooks import HookedModule, HookPoint
from viz_model.placement import execution_device, weight


class KVCache:
    """Keys and values of every layer for the positions processed so far (generation with a KV cache).

    Pass the same object to successive ``model(new_tokens, kv_cache=cache)`` calls: each call computes
    q, k and v only for the new tokens and reuses the stored keys and values of the earlier ones.
    """

    def __init__(self, n_layers: int) -> None:
        self.layers = [LayerKV() for _ in range(n_layers)]

    @property
    def n_pos(self) -> int:
        """Number of positions stored."""
        k = self.layers[0].k
        return 0 if k is None else k.shape[1]


def score_kind(name: str) -> str | None:
    """``"hook_attn_scores"`` or ``"hook_pattern"`` when ``name`` is an attention layer's scores or pattern hook
    (both exact functions of that layer's q and k, see :meth:`VizTransformer.score_inputs`), else None."""
    return next((kind for kind in ("hook_attn_scores", "hook_pattern") if name.endswith(kind)), None)


class MLMHead(nn.Module):
    """BERT's masked-language-model transform before the unembedding: ``LayerNorm(act(x W + b))``
    (transformers' ``BertPredictionHeadTransform``). ``x`` and the output are ``[batch, pos, d_model]``.
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.empty(cfg.d_model, cfg.d_model))
        self.b = nn.Parameter(torch.zeros(cfg.d_model))
        self.act = ACTIVATIONS[cfg.mlp]
        self.ln = LayerNorm(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(self.act(x @ self.W + self.b))


class Encoder(nn.Module):
    """The encoder stack of an encoder-decoder model: the source tokens through unmasked self-attention
    blocks (Vaswani et al., 2017, section 3.1). It reads the token embedding W_E it shares with the decoder.

    Hooks (under ``encoder.``): ``hook_embed``, ``hook_pos_embed``, ``ln_embed.*`` (BART), ``blocks.{i}.*``
    as a decoder-only block, and ``ln_final.*`` when pre-LN; all ``[batch, src_pos, d_model]``.
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        enc = dataclasses.replace(cfg, causal=False, attn_window=None, n_encoder_layers=0)
        self.pos_embed = PosEmbed(enc)
        self.hook_embed, self.hook_pos_embed = HookPoint(), HookPoint()
        self.ln_embed = LayerNorm(cfg) if cfg.embed_norm else None
        self.rel_pos = RelativePositionBias(enc, bidirectional=True) if cfg.rel_pos_buckets else None  # T5
        self.blocks = nn.ModuleList(Block(enc.for_layer(i), rel_pos=self.rel_pos) for i in range(cfg.n_encoder_layers))
        self.ln_final = make_norm(cfg) if cfg.final_norm else None
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, embed: Callable[[torch.Tensor], torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
        """``embed``: the shared token embedding's call (a function, not the module: accelerate's hooks move module
        arguments between devices); ``tokens`` ``[batch, src_pos]`` -> ``[batch, src_pos, d_model]``."""
        resid = self.hook_embed(embed(tokens))
        resid = resid + self.hook_pos_embed(self.pos_embed(tokens)).to(device=resid.device, dtype=resid.dtype)
        if self.rel_pos is not None:
            self.rel_pos(tokens.shape[1], tokens.shape[1])  # recorded once (hook_bias); every layer adds it
        if self.ln_embed is not None:
            resid = self.ln_embed(resid)
        resid = self.drop(resid)
        for block in self.blocks:
            resid = block(resid)
        return resid if self.ln_final is None else self.ln_final(resid)


class VizTransformer(HookedModule):
    """A transformer whose every intermediate value passes through a named :class:`HookPoint`.

    ``forward(tokens)`` maps ids ``[batch, pos]`` to logits ``[batch, pos, d_vocab]`` (or, for an
    encoder without a language-model head, ``lm_head == "none"``, the final hidden states
    ``[batch, pos, d_model]``).
    Model-level hooks: ``hook_embed``, ``hook_pos_embed`` ``[batch, pos, d_model]``;
    ``hook_token_type_embed`` (BERT) and ``ln_embed.*`` (BERT's embedding LayerNorm); ``hook_logits`` and
    ``hook_probs`` (softmax of the logits, computed only when recorded) ``[batch, pos, d_vocab]``.
    Block hooks are listed in docs/ARCHITECTURE.md ("Hook points") under ``blocks.{i}``.
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg.validate()
        self.embed = Embed(cfg)
        self.pos_embed = PosEmbed(cfg)
        self.hook_embed, self.hook_pos_embed = HookPoint(), HookPoint()
        if cfg.n_token_types:
            self.W_token_type = nn.Parameter(torch.empty(cfg.n_token_types, cfg.d_model))
            self.hook_token_type_embed = HookPoint()
        self.ln_embed = LayerNorm(cfg) if cfg.embed_norm else None
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder = Encoder(cfg) if cfg.is_encoder_decoder else None
        # T5: one relative position bias for all self-attention layers (bidirectional in an encoder-only model)
        self.rel_pos = RelativePositionBias(cfg, bidirectional=not cfg.causal) if cfg.rel_pos_buckets else None
        self.blocks = nn.ModuleList(Block(cfg.for_layer(i), cross=cfg.is_encoder_decoder, rel_pos=self.rel_pos)
                                    for i in range(cfg.n_layers))
        self.ln_final = make_norm(cfg) if cfg.final_norm else None
        self.mlm_head = MLMHead(cfg) if cfg.lm_head == "mlm" else None
        has_head = cfg.lm_head != "none"
        self.W_U = None if cfg.tied_embeddings or not has_head else nn.Parameter(torch.empty(cfg.d_model, cfg.d_vocab))
        self.b_U = nn.Parameter(torch.zeros(cfg.d_vocab)) if cfg.unembed_bias and has_head else None
        if has_head:
            self.hook_logits, self.hook_probs = HookPoint(), HookPoint()
        self.init_weights()
        self.setup_hooks()

    @torch.no_grad()
    def init_weights(self, seed: int | None = None) -> None:
        """GPT-2's initialisation: N(0, 0.02) for matrices, N(0, 0.02 / sqrt(2 n_layers)) for the
        projections that write into the residual stream (W_O, W_out); biases zero, norms one.
        """
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        resid_std = 0.02 / math.sqrt(2 * self.cfg.n_layers)
        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf.startswith("b"):
                p.zero_()
            elif leaf == "w":
                p.fill_(1.0)
            else:
                std = resid_std if leaf in ("W_O", "W_out") else 0.02
                p.copy_(torch.randn(p.shape, generator=gen) * std)

    @property
    def W_unembed(self) -> torch.Tensor:
        """The unembedding matrix ``[d_model, d_vocab]`` (``W_E^T`` when embeddings are tied): the parameter, or its
        real values when a device map offloads it (:func:`viz_model.placement.weight`)."""
        return weight(self.embed, "W_E").T if self.W_U is None else weight(self, "W_U")

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the model's matrices and of its residual stream (float32, bfloat16 or float16; norm
        weights stay float32, and attention scores and patterns are computed in float32 whatever this is)."""
        return self.embed.W_E.dtype

    @property
    def device(self) -> torch.device:
        """Where the inputs go: the device of the token embedding (``cpu`` or a ``cuda`` device); on a model placed
        by a device map (:mod:`viz_model.placement`), the embedding's execution device."""
        return execution_device(self.embed, self.embed.W_E)

    @property
    def has_lm_head(self) -> bool:
        """Whether the model ends in logits over the vocabulary (False for a bare encoder such as a
        sentence-embedding BERT)."""
        return self.cfg.lm_head != "none"

    def decode(self, resid: torch.Tensor) -> torch.Tensor:
        """Logits ``[..., d_vocab]`` from residual-stream vectors ``[..., d_model]``: final norm (if any), the
        masked-LM transform (BERT), then ``x W_U + b_U``, soft-capped when ``logit_softcap`` is set (Gemma 2:
        ``c tanh(logits / c)``). Used by ``forward`` and by the logit lens.

        Raises:
            ValueError: when the model has no language-model head.
        """
        if not self.has_lm_head:
            raise ValueError("this model has no language-model head (it outputs hidden states, not logits)")
        return self.unembed(self.final_hidden(resid))

    def final_hidden(self, resid: torch.Tensor) -> torch.Tensor:
        """What the unembedding reads, ``[..., d_model]``, from residual-stream vectors ``[..., d_model]``: the final
        norm (if any) and the masked-LM transform (BERT), each per position (the first half of :meth:`decode`)."""
        # a view's float32 CPU vectors into a bfloat16 (or CUDA) model: computed as the model computes
        resid = resid.to(device=self.device, dtype=self.dtype)
        if self.ln_final is not None:
            resid = self.ln_final(resid)
        if self.mlm_head is not None:
            resid = self.mlm_head(resid)
        return resid

    def unembed(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits ``[..., d_vocab]`` from :meth:`final_hidden`'s output: ``x W_U + b_U``, soft-capped when
        ``logit_softcap`` is set (the second half of :meth:`decode`)."""
        W_U = self.W_unembed
        logits = hidden.to(W_U.device) @ W_U  # the same device unless a device map placed the head elsewhere
        logits = logits if self.b_U is None else logits + weight(self, "b_U")
        return logits if self.cfg.logit_softcap is None else soft_cap(logits, self.cfg.logit_softcap)

    def _check_ids(self, tokens: torch.Tensor, offset: int = 0) -> None:
        if tokens.ndim != 2:
            raise ValueError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
        if offset + tokens.shape[1] > self.cfg.n_ctx:
            raise ValueError(f"{offset + tokens.shape[1]} tokens exceed the model's context of {self.cfg.n_ctx}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.cfg.d_vocab):
            raise ValueError(f"token ids must lie in [0, {self.cfg.d_vocab})")

    def encode(self, src_tokens: torch.Tensor) -> torch.Tensor:
        """The encoder's output ``[batch, src_pos, d_model]`` for source ids ``[batch, src_pos]``
        (encoder-decoder models), which every decoder block's cross-attention reads.

        Raises:
            ValueError: for a model without encoder, or ids that are not ``[batch, pos]`` in the vocabulary
                and context.
        """
        if self.encoder is None:
            raise ValueError("this model has no encoder")
        src_tokens = src_tokens.to(self.device)
        self._check_ids(src_tokens)
        return self.encoder(self.embed.__call__, src_tokens)

    def forward(self, tokens: torch.Tensor, kv_cache: KVCache | None = None,
                token_type_ids: torch.Tensor | None = None, src_tokens: torch.Tensor | None = None,
                encoder_out: torch.Tensor | None = None, logit_positions: Sequence[int] | None = None) -> torch.Tensor:
        """Logits ``[batch, pos, d_vocab]`` for ids ``[batch, pos]`` (hidden states ``[batch, pos, d_model]``
        when the model has no language-model head).

        ``logit_positions``: None (every position), or the only positions to decode, the other rows NaN (as
        :meth:`forward_from`'s): on a 128k vocabulary the unembedding of 64 positions is a fifth of a 1 B model's
        forward pass, and the attention views read none of it.

        With ``kv_cache``, ``tokens`` are the positions that follow those already in the cache; the
        cache is extended, and the logits are those of the new positions only. ``token_type_ids``
        ``[batch, pos]`` (BERT's segment ids) default to 0. Encoder-decoder models: ``tokens`` are the
        decoder's (target) ids and ``src_tokens`` ``[batch, src_pos]`` the source ids, or ``encoder_out``
        the already computed :meth:`encode` output (reused across generation steps).

        Raises:
            ValueError: when ``tokens`` is not 2-D, would run past ``n_ctx``, or holds an id outside
                ``[0, d_vocab)``.
        """
        offset = kv_cache.n_pos if kv_cache is not None else 0
        tokens = tokens.to(self.device)  # ids made on the CPU run where the weights are (a no-op on the CPU)
        src_tokens = src_tokens.to(self.device) if src_tokens is not None else None
        self._check_ids(tokens, offset)
        if self.encoder is not None and encoder_out is None:
            if src_tokens is None:
                raise ValueError("an encoder-decoder model needs src_tokens (or encoder_out)")
            encoder_out = self.encode(src_tokens)
        pos = self.hook_pos_embed(self.pos_embed(tokens, offset))
        resid = self.hook_embed(self.embed(tokens))
        resid = resid + pos.to(device=resid.device, dtype=self.dtype)
        if self.cfg.n_token_types:
            types = torch.zeros_like(tokens) if token_type_ids is None else token_type_ids.to(tokens.device)
            resid = resid + self.hook_token_type_embed(self.W_token_type[types]).to(resid.device)
        if self.ln_embed is not None:
            resid = self.ln_embed(resid)
        if self.rel_pos is not None:
            self.rel_pos(tokens.shape[1], offset + tokens.shape[1])  # recorded once (hook_bias); every layer adds it
        return self._blocks_and_head(self.drop(resid), 0, kv_cache, encoder_out, logit_positions)

    def _blocks_and_head(self, resid: torch.Tensor, start_layer: int, kv_cache: KVCache | None,
                         encoder_out: torch.Tensor | None, logit_positions: Sequence[int] | None = None) -> torch.Tensor:
        """Blocks ``start_layer ..`` on ``resid`` ``[batch, pos, d_model]``, then the head: logits through
        ``hook_logits`` (and ``hook_probs`` when recorded), only ``logit_positions``' rows decoded when given (the
        others NaN); the final hidden states without a language-model head. Shared by :meth:`forward` and
        :meth:`forward_from`."""
        for i in range(start_layer, self.cfg.n_layers):
            resid = self.blocks[i](resid, kv_cache.layers[i] if kv_cache is not None else None, encoder_out)
        if not self.has_lm_head:
            return self.ln_final(resid) if self.ln_final is not None else resid
        if logit_positions is None:
            logits = self.decode(resid)
        else:
            rows = list(logit_positions)
            hidden = self.final_hidden(resid)  # every position: the final norm's hooks record all of them
            decoded = self.unembed(hidden[:, rows])
            logits = decoded.new_full((*resid.shape[:2], decoded.shape[-1]), float("nan"))
            logits[:, rows] = decoded
        logits = self.hook_logits(logits)
        if self.hook_probs.active:
            self.hook_probs(torch.softmax(logits.float(), dim=-1))
        return logits

    def forward_from(self, resid: torch.Tensor, start_layer: int, token_type_ids: torch.Tensor | None = None,
                     src_tokens: torch.Tensor | None = None, encoder_out: torch.Tensor | None = None,
                     logit_positions: Sequence[int] | None = None) -> torch.Tensor:
        """What :meth:`forward` returns, from the residual stream entering block ``start_layer`` on: only blocks
        ``start_layer ..`` run, then the final norm and unembedding (:meth:`decode`); their hooks fire as in
        ``forward`` (``blocks.{start_layer}.hook_resid_pre`` first, ``hook_logits`` and ``hook_probs`` last), those
        of earlier blocks and of the embeddings do not. With ``resid`` = ``blocks.{start_layer}.hook_resid_pre`` of a
        recorded run, the result equals that run's output (the prefix reuse of the causal sweeps in
        :mod:`viz_model.interventions`).

        Args:
            resid: ``[batch, pos, d_model]`` in the model's dtype, positions from 0 (no KV cache).
            start_layer: ``0 <= start_layer <= n_layers`` (``n_layers``: decode only).
            token_type_ids: accepted for the same keywords as ``forward`` and unused: segment embeddings are added
                before block 0, so they are already in ``resid``. (T5's relative position bias is read by every
                block itself; its ``hook_bias`` is recorded by ``forward`` only.)
            src_tokens, encoder_out: encoder-decoder models, as in ``forward``: the encoder runs once (on
                ``src_tokens``) unless its output is given.
            logit_positions: None (every position), or the positions whose logits are needed: only those rows are
                decoded (the final norm and the masked-LM transform act per position, so each row is the one a full
                decode computes, to float32 rounding), the others are NaN. A causal sweep whose metric reads one
                position saves the unembedding of the rest (on a 128k vocabulary, as much work as four blocks).

        Returns:
            logits ``[batch, pos, d_vocab]`` (final hidden states ``[batch, pos, d_model]`` without an LM head).

        Raises:
            ValueError: ``start_layer`` out of range, ``resid`` not ``[batch, pos, d_model]`` within ``n_ctx``, an
                encoder-decoder without ``src_tokens`` or ``encoder_out``.
        """
        if not 0 <= start_layer <= self.cfg.n_layers:
            raise ValueError(f"start_layer {start_layer} is outside [0, {self.cfg.n_layers}]")
        if resid.ndim != 3 or resid.shape[-1] != self.cfg.d_model or resid.shape[1] > self.cfg.n_ctx:
            raise ValueError(f"resid must be [batch, pos <= {self.cfg.n_ctx}, {self.cfg.d_model}], "
                             f"got shape {tuple(resid.shape)}")
        if self.encoder is not None and encoder_out is None:
            if src_tokens is None:
                raise ValueError("an encoder-decoder model needs src_tokens (or encoder_out)")
            encoder_out = self.encode(src_tokens)
        resid = resid.to(device=self.device, dtype=self.dtype)
        return self._blocks_and_head(resid, start_layer, None, encoder_out, logit_positions)

    def score_inputs(self, name: str) -> tuple[nn.Module, str, str]:
        """For an attention layer's ``...hook_attn_scores`` or ``...hook_pattern``: ``(attention module, q hook name,
        k hook name)``, the recorded values its scores are computed from (the rotated ones under rotary positions).

        Raises:
            ValueError: when ``name`` is not an attention score or pattern hook of this model.
        """
        kind = score_kind(name)
        prefix = name[: -len(kind)] if kind else ""
        try:
            attn = self.get_submodule(prefix.rstrip("."))
        except AttributeError:
            attn = None
        if kind is None or not hasattr(attn, "masked_scores"):
            raise ValueError(f"{name} is not an attention score or pattern hook")
        rot = "rot_" if hasattr(attn, "hook_rot_q") else ""
        return attn, f"{prefix}hook_{rot}q", f"{prefix}hook_{rot}k"

    def lazy_hooks(self, names: list[str], store: dict, kwargs: dict, store_dtype: torch.dtype | None = None
                   ) -> tuple[dict, list[str]]:
        """``hook_probs`` (softmax over the vocabulary) and every ``hook_attn_scores`` and ``hook_pattern`` are exact
        functions of other values (the logits; the layer's q and k), recomputed with the same operations when
        first read from the cache, so a full capture neither pays for them nor keeps their n² values in memory
        unless they are read. So is a dense MLP's ``hook_post`` (``act(hook_pre)``, times ``hook_pre_linear`` when
        gated), when the values are stored as they are (no ``store_dtype``: a float16 capture would otherwise keep
        its inputs in full precision): ``[pos, d_mlp]`` a layer that the capture need not hold, since its inputs are
        recorded anyway. Scores and patterns are stored as usual during generation with a KV cache (earlier
        keys are not in the cache then), and wherever a caller's hook is attached to a value or to what it is computed
        from in between (``hook_probs``; a layer's ``hook_attn_scores`` or ``hook_pattern``): the cache then records
        what that hook returned, as TransformerLens does."""
        lazy, extra = {}, []
        hooked = {name for name, hook in self.hook_dict.items() if hook.active}
        if "hook_probs" in names and "hook_logits" in self.hook_dict and "hook_probs" not in hooked:
            lazy["hook_probs"] = lambda aux, out: torch.softmax(out.float(), dim=-1)
        for name in names if store_dtype is None else ():
            if not name.endswith("mlp.hook_post") or name in hooked:  # a block's MLP (not a mixture's experts,
                continue  # which run only on the tokens routed to them)
            mlp = self.get_submodule(name.rsplit(".", 1)[0])
            if not isinstance(mlp, MLP):  # a mixture of experts' own side-by-side hook_post
                continue
            pre, lin = mlp.hook_pre.name, (mlp.hook_pre_linear.name if mlp.gated else None)
            if pre not in names or (lin and lin not in names):
                continue  # its inputs are not recorded: keeping them instead would hold more, not less
            extra += [pre] + ([lin] if lin else [])
            # the very operations of MLP.hidden on the values that passed hook_pre (and hook_pre_linear)
            lazy[name] = torch.no_grad()(lambda aux, out, act=mlp.act, pre=pre, lin=lin:
                                         act(aux[pre]) * aux[lin] if lin else act(aux[pre]))
        if kwargs.get("kv_cache") is not None:
            return lazy, extra
        for name in names:
            kind = score_kind(name)
            if kind is None:
                continue
            attn, q_name, k_name = self.score_inputs(name)
            prefix = name[: -len(kind)]
            if {prefix + "hook_attn_scores", prefix + "hook_pattern"} & hooked:
                continue  # a hook changes the scores or the pattern: record what the forward pass really used
            extra += [q_name, k_name]
            # read after the forward pass, maybe with autograd on: no_grad keeps parameters (T5's relative position
            # bias) from attaching a graph to a cached value
            if kind == "hook_attn_scores":
                lazy[name] = torch.no_grad()(lambda aux, out, attn=attn, q=q_name, k=k_name: attn.masked_scores(aux[q], aux[k]))
            else:  # softmax of the same scores, as in forward
                lazy[name] = torch.no_grad()(lambda aux, out, attn=attn, q=q_name, k=k_name: torch.softmax(
                    attn.masked_scores(aux[q], aux[k]), dim=-1))
        return lazy, list(dict.fromkeys(extra))

    def new_kv_cache(self) -> KVCache:
        """An empty :class:`KVCache` for this model."""
        return KVCache(self.cfg.n_layers)

    def n_params(self) -> int:
        """Number of trainable parameters (tied embeddings counted once)."""
        return sum(p.numel() for p in self.parameters())
