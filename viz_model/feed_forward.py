"""The feed-forward sub-layer: the two-layer network (:class:`MLP`, with its activations) and the mixture of
experts (:class:`MoE`), chosen by :func:`make_mlp`.

Mixture of experts: a router sends each token to ``k`` of ``n_experts`` feed-forward networks.

Shazeer et al. (2017), "Outrageously Large Neural Networks: The Sparsely-Gated Mixture-of-Experts Layer";
Fedus et al. (2021), "Switch Transformers"; Jiang et al. (2024), "Mixtral of Experts". The computation is that of
``transformers``' ``MixtralSparseMoeBlock``, ``Qwen2MoeSparseMoeBlock`` (with its shared expert) and
``OlmoeSparseMoeBlock``; hook names follow TransformerLens' ``MoE`` (``hook_expert_weights``,
``hook_expert_indices``, each expert an MLP with its own ``hook_pre``/``hook_post``). A model may keep dense MLPs in
some layers (``Config.dense_layers``: Qwen2-MoE's ``decoder_sparse_step`` and ``mlp_only_layers``); only the other
layers (``Config.moe_layers``) have a router and these hooks.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from viz_model.config import Config
from viz_model.hooks import HookPoint


ACTIVATIONS = {
    "gelu": F.gelu,  # exact erf form (Hendrycks & Gimpel, 2016); BERT, nanoGPT
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's "gelu_new"
    "relu": F.relu,  # Vaswani et al. (2017)
    "swiglu": F.silu,  # the gate's activation in SwiGLU (Shazeer, 2020); Llama
    "geglu": lambda x: F.gelu(x, approximate="tanh"),  # the gate's activation in GeGLU (Shazeer, 2020); Gemma, T5 v1.1
}


class MLP(nn.Module):
    """The two-layer feed-forward network: ``act(x W_in + b_in) W_out + b_out`` (Vaswani et al., 3.3).

    SwiGLU (Shazeer, 2020; Llama): ``(silu(x W_gate) * (x W_in)) W_out``, with ``W_gate`` ``[d_model, d_mlp]``;
    GeGLU (Gemma, T5 v1.1) the same with the GELU tanh approximation in place of silu.
    Hooks: ``hook_pre`` (before the activation; the gate for SwiGLU), ``hook_pre_linear`` (SwiGLU's
    linear branch) and ``hook_post`` (the hidden activations), ``[batch, pos, d_mlp]``.
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.gated = cfg.mlp in ("swiglu", "geglu")
        if self.gated:
            self.W_gate = nn.Parameter(torch.empty(cfg.d_model, cfg.d_mlp))
            self.b_gate = nn.Parameter(torch.zeros(cfg.d_mlp)) if cfg.mlp_bias else None
            self.hook_pre_linear = HookPoint()
        self.W_in = nn.Parameter(torch.empty(cfg.d_model, cfg.d_mlp))
        self.W_out = nn.Parameter(torch.empty(cfg.d_mlp, cfg.d_model))
        self.b_in = nn.Parameter(torch.zeros(cfg.d_mlp)) if cfg.mlp_bias else None
        self.b_out = nn.Parameter(torch.zeros(cfg.d_model)) if cfg.mlp_bias else None
        self.act = ACTIVATIONS[cfg.mlp]
        self.hook_pre, self.hook_post = HookPoint(), HookPoint()

    @staticmethod
    def _linear(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        out = x @ W
        return out if b is None else out + b

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """The hidden activations ``[..., d_mlp]`` (as ``hook_post`` passes them on) of inputs ``[..., d_model]``."""
        if self.gated:
            pre = self.hook_pre(self._linear(x, self.W_gate, self.b_gate))
            hidden = self.act(pre) * self.hook_pre_linear(self._linear(x, self.W_in, self.b_in))
        else:
            hidden = self.act(self.hook_pre(self._linear(x, self.W_in, self.b_in)))
        return self.hook_post(hidden)

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden W_out + b_out``: ``[..., d_mlp]`` -> ``[..., d_model]`` (split from :meth:`hidden` so that a
        mixture of experts, :class:`MoE`, can show every expert's hidden activations before projecting)."""
        return self._linear(hidden, self.W_out, self.b_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(self.hidden(x))


def make_mlp(cfg: Config) -> nn.Module:
    """The feed-forward sub-layer the config asks for: an :class:`MLP`, or with ``cfg.n_experts > 0`` a mixture of
    experts (:class:`MoE`, whose experts are MLPs)."""
    if cfg.n_experts:
        return MoE(cfg)
    return MLP(cfg)


class MoE(nn.Module):
    """A block's feed-forward sub-layer as a mixture of experts (``cfg.n_experts > 0``). For each token ``x``
    ``[d_model]``::

        router_logits = x W_router                            [n_experts]   hook_router_logits
        p             = softmax(router_logits)                [n_experts]   hook_expert_weights
        top, idx      = the k largest p and their experts     [k]           hook_expert_indices (int64)
        g             = top / sum(top)  (norm_topk_prob)  else top   [k]   hook_topk_weights
        out           = sum_j g_j FFN_idx_j(x)  (+ sigmoid(x W_shared_gate) FFN_shared(x), Qwen2-MoE)

    Every expert is an :class:`MLP` of width ``d_mlp`` (``experts.{e}``; SwiGLU in Mixtral,
    Qwen2-MoE and OLMoE) and runs only on the tokens sent to it, so its hooks ``experts.{e}.hook_pre`` /
    ``hook_pre_linear`` / ``hook_post`` are ``[n_routed, d_mlp]``: the routed tokens in (batch, pos) order, as in
    TransformerLens (an expert that receives no token does not run). ``hook_post`` ``[batch, pos, n_experts *
    d_mlp]`` (this project's addition, computed only when something listens) puts every expert's hidden
    activations side by side, expert ``e``'s units at ``e * d_mlp`` to ``(e + 1) * d_mlp - 1``, 0 where the router
    did not send the token; the output is computed from it, so a hook that changes it changes the output (its
    zeros are not read). The router's training-time jitter (Mixtral's ``router_jitter_noise``) is not modelled:
    at inference there is none. Shapes of the other hooks: ``[batch, pos, n_experts]``, ``[batch, pos, k]``;
    ``hook_shared_gate`` ``[batch, pos, 1]`` and ``shared_expert.*`` ``[batch, pos, d_shared_mlp]``.
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.k = cfg.experts_per_token
        self.W_router = nn.Parameter(torch.empty(cfg.d_model, cfg.n_experts))  # TransformerLens calls it W_gate
        self.experts = nn.ModuleList(MLP(cfg) for _ in range(cfg.n_experts))
        if cfg.d_shared_mlp:  # Qwen2-MoE: one more expert that every token goes through, behind a sigmoid gate
            self.shared_expert = MLP(dataclasses.replace(cfg, d_mlp=cfg.d_shared_mlp))
            self.W_shared_gate = nn.Parameter(torch.empty(cfg.d_model, 1))
            self.hook_shared_gate = HookPoint()
        else:
            self.shared_expert = None
        self.hook_router_logits, self.hook_expert_weights = HookPoint(), HookPoint()
        self.hook_expert_indices, self.hook_topk_weights = HookPoint(), HookPoint()
        self.hook_post = HookPoint()

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The router's choice for ``x`` ``[batch, pos, d_model]``: expert indices ``[batch, pos, k]`` (int64,
        most probable first) and the weights their outputs are summed with ``[batch, pos, k]`` (after the hooks)."""
        logits = self.hook_router_logits(x @ self.W_router)
        probs = self.hook_expert_weights(torch.softmax(logits.float(), dim=-1))  # float32, as transformers
        top, idx = torch.topk(probs, self.k, dim=-1)
        if self.cfg.norm_topk_prob:
            top = top / top.sum(dim=-1, keepdim=True)
        return self.hook_expert_indices(idx), self.hook_topk_weights(top.to(x.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[batch, pos, d_model]`` -> ``[batch, pos, d_model]``."""
        b, p, d = x.shape
        n, m = self.cfg.n_experts, self.cfg.d_mlp
        idx, weights = self.route(x)
        flat, flat_idx, flat_w = x.reshape(-1, d), idx.reshape(-1, idx.shape[-1]), weights.reshape(-1, idx.shape[-1])
        routed = []  # (expert, token rows, slot of the expert among the token's k, hidden activations)
        for e, expert in enumerate(self.experts):
            tok, slot = torch.where(flat_idx == e)
            if tok.numel():
                routed.append((e, tok, slot, expert.hidden(flat[tok])))
        if self.hook_post.active:
            post = flat.new_zeros(b * p, n, m)
            for e, tok, _, h in routed:
                post[tok, e] = h
            post = self.hook_post(post.view(b, p, n * m)).reshape(b * p, n, m)
            routed = [(e, tok, slot, post[tok, e]) for e, tok, slot, _ in routed]
        out = torch.zeros_like(flat)
        for e, tok, slot, h in routed:  # experts in index order, as transformers sums them
            out = out.index_add(0, tok, self.experts[e].project(h) * flat_w[tok, slot, None])
        out = out.view(b, p, d)
        if self.shared_expert is not None:
            gate = self.hook_shared_gate(torch.sigmoid(x @ self.W_shared_gate))
            out = out + gate * self.shared_expert(x)
        return out


def load_balancing_loss(router_logits: list[torch.Tensor], k: int) -> torch.Tensor:
    """The Switch Transformer's auxiliary loss (Fedus et al., 2021, eq. 4-6) for top-``k`` routing, as
    ``transformers``' ``load_balancing_loss_func`` but divided by ``k``: ``n_experts * sum_e f_e P_e`` over all
    layers' tokens, where ``f_e`` is the fraction of the (token, slot) assignments that went to expert ``e`` and
    ``P_e`` the mean router probability of ``e``. 1 when every expert gets the same share, ``n_experts`` when one
    expert gets every token with probability 1. Only ``P_e`` carries a gradient.

    Args:
        router_logits: per MoE layer ``[batch, pos, n_experts]`` (``hook_router_logits``).
        k: experts per token.

    Returns:
        A scalar tensor.
    """
    logits = torch.cat([t.reshape(-1, t.shape[-1]) for t in router_logits])
    probs = torch.softmax(logits.float(), dim=-1)
    n_experts = probs.shape[-1]
    chosen = torch.topk(probs, k, dim=-1).indices
    counts = torch.zeros(n_experts, device=probs.device).index_add_(
        0, chosen.reshape(-1), torch.ones(chosen.numel(), device=probs.device))
    return n_experts * (counts / chosen.numel() * probs.mean(0)).sum()


def disable_experts(experts: list[int]):
    """A hook function for ``blocks.{i}.mlp.hook_router_logits`` that takes ``experts`` out of the layer: their
    router logits become -inf, so their probability is 0 and the other experts' probabilities are renormalised
    (a softmax over the remaining experts: each remaining probability divided by their sum); the top-k is then
    taken among the remaining experts and renormalised, or not, as the model's ``norm_topk_prob`` says. Tokens that
    had chosen a disabled expert go to their next most probable one.

    Raises:
        ValueError: (when the hook runs) if ``experts`` would leave no expert.
    """
    chosen = sorted(set(experts))

    def hook(logits: torch.Tensor, hook=None) -> torch.Tensor:
        if len(chosen) >= logits.shape[-1]:
            raise ValueError("at least one expert must stay enabled")
        out = logits.clone()
        out[..., chosen] = float("-inf")
        return out

    return hook


def force_expert(expert: int, positions: list[int]):
    """A hook function for ``blocks.{i}.mlp.hook_router_logits`` that sends the tokens at ``positions`` to
    ``expert`` alone: every other logit of those tokens becomes -inf, so ``expert`` gets probability 1 and weight 1
    (with or without ``norm_topk_prob``); the k - 1 other slots go to experts of weight 0, whose outputs add
    nothing."""

    def hook(logits: torch.Tensor, hook=None) -> torch.Tensor:
        out = logits.clone()
        rows = out[:, positions]
        kept = rows[..., expert].clone()
        rows.fill_(float("-inf"))
        rows[..., expert] = kept
        out[:, positions] = rows
        return out

    return hook


@torch.no_grad()
def run_with_routing(model: nn.Module, tokens: torch.Tensor, fwd_hooks=()) -> tuple[torch.Tensor, torch.Tensor,
                                                                                    torch.Tensor]:
    """Run a mixture-of-experts model with ``fwd_hooks`` (``(hook name, fn)`` pairs, as ``run_with_hooks``) and
    record where every token went.

    Returns:
        ``(logits [batch, pos, d_vocab], indices [n_moe, batch, pos, k] int64, weights [n_moe, batch, pos, k])``: the
        chosen experts of each mixture-of-experts layer (``model.cfg.moe_layers``, in order: every layer unless some
        are dense, Qwen2-MoE's ``dense_layers``) and the weights their outputs were summed with, as the model used them.

    Raises:
        KeyError: for a hook name the model does not have; ValueError from the model's forward.
    """
    layers = model.cfg.moe_layers
    names = [f"blocks.{i}.mlp.hook_{kind}" for kind in ("expert_indices", "topk_weights") for i in layers]
    with model.hooks(list(fwd_hooks)):
        logits, cache = model.run_with_cache(tokens, names_filter=names)
    indices = torch.stack([cache[f"blocks.{i}.mlp.hook_expert_indices"] for i in layers])
    weights = torch.stack([cache[f"blocks.{i}.mlp.hook_topk_weights"] for i in layers])
    return logits, indices, weights
