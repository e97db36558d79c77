"""The model inspector's tables: architecture, parameters per component, weight statistics per layer
(pure functions of a model; no Streamlit)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from viz_model import VizTransformer
from viz_model.loading.dtypes import dtype_name
from viz_model.placement import describe, module_weights

from viz_ui.analysis.explain import dense_layers_note

FAMILY_NAMES = {"viz": "native (this project)", "gpt2": "GPT-2", "nanogpt": "nanoGPT", "bert": "BERT",
                "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "olmo2": "OLMo 2",
                "gpt_neox": "GPT-NeoX / Pythia", "opt": "OPT", "distilbert": "DistilBERT", "roberta": "RoBERTa",
                "gemma": "Gemma", "gemma2": "Gemma 2", "gemma3_text": "Gemma 3", "phi3": "Phi-3", "bart": "BART"}
MLP_NAMES = {"gelu": "GELU", "gelu_tanh": "GELU (tanh approximation)", "relu": "ReLU", "swiglu": "SwiGLU",
             "geglu": "GeGLU (gate through GELU, tanh approximation)"}
PLACEMENTS = {"pre": "pre-LN", "post": "post-LN", "sandwich": "sandwich (normed input and output of each sub-layer)",
              "output": "on each sub-layer's output"}


def _positions(cfg) -> str:
    """The positions row: kind, and for rotary the base, the rotated width and any scaling."""
    if cfg.positional != "rotary":
        return cfg.positional
    parts = [f"base {cfg.rotary_base:g}"]
    if cfg.rotary_base_local is not None:
        parts.append(f"windowed layers: base {cfg.rotary_base_local:g}")
    if cfg.d_rotary < cfg.d_head:
        parts.append(f"partial: {cfg.d_rotary} of {cfg.d_head} dimensions turn")
    if cfg.rotary_scaling == "longrope":
        parts.append(f"LongRoPE: a factor per pair, the long ones above {cfg.rotary_original_ctx:,} tokens, "
                     f"cos and sin ×{cfg.rotary_attn_factor:.4g}")
    elif cfg.rotary_scaling != "none":
        parts.append(f"{cfg.rotary_scaling} scaling ×{cfg.rotary_factor:g}")
    return f"rotary ({'; '.join(parts)})"


def _attention(cfg) -> str:
    """The attention row: kind, window (and which layers), q/k norm, divisor, soft cap."""
    text = attention_kind(cfg.n_heads, cfg.n_kv_heads)
    if cfg.attn_window:
        layers = "" if cfg.window_layers is None else f" in layers {', '.join(map(str, cfg.window_layers))}"
        text += f", sliding window of {cfg.attn_window}{layers}"
    if cfg.qk_norm != "none":
        text += ", q/k norm " + ("per head" if cfg.qk_norm == "head" else "over all heads")
    if cfg.clip_qkv is not None:
        text += f", q, k and v clamped to ±{cfg.clip_qkv:g}"
    if cfg.attn_scale is not None:
        text += f", scores divided by {cfg.attn_scale:.4g} (not √d_head)"
    if cfg.attn_softcap is not None:
        text += f", scores soft-capped at ±{cfg.attn_softcap:g}"
    return text

MATRIX_ORDER = ("W_Q", "W_K", "W_V", "W_O", "W_gate", "W_in", "W_out")  # the order of the computation

if TYPE_CHECKING:  # pandas is imported where a table is made: it costs ~0.25 s of the app's cold start
    import pandas as pd


def attention_kind(n_heads: int, n_kv_heads: int) -> str:
    """Multi-head, grouped-query or multi-query attention, from the head counts."""
    if n_kv_heads == n_heads:
        return "multi-head"
    return "multi-query" if n_kv_heads == 1 else f"grouped-query ({n_heads // n_kv_heads} query heads per key/value head)"


def architecture_table(model: VizTransformer) -> pd.DataFrame:
    """One row per architectural property (family, layers, heads, kv heads, d_model, d_head, d_mlp,
    positions, norm and placement, vocabulary, context, ...): columns ``property``, ``value``."""
    import pandas as pd

    cfg = model.cfg
    kind = ("encoder (bidirectional)" if not cfg.causal else "decoder (causal)")
    rows = [
        ("family", FAMILY_NAMES.get(cfg.family, cfg.family)),
        ("kind", kind),
        ("layers (n_layers)", cfg.n_layers),
        ("attention heads (n_heads)", cfg.n_heads),
        ("key/value heads (n_kv_heads)", cfg.n_kv_heads),
        ("attention", _attention(cfg)),
        ("d_model", cfg.d_model),
        ("d_head (d_k)", cfg.d_head),
        ("d_mlp", cfg.d_mlp),
        ("feed-forward", MLP_NAMES.get(cfg.mlp, cfg.mlp) + (
            f", mixture of {cfg.n_experts} experts, top-{cfg.experts_per_token} per token "
            f"({'weights renormalised' if cfg.norm_topk_prob else 'router probabilities as weights'})"
            + (f", shared expert of {cfg.d_shared_mlp}" if cfg.d_shared_mlp else "")
            + (f"; {dense_layers_note(cfg)}" if cfg.dense_layers else "") if cfg.n_experts else "")),
        ("positions", _positions(cfg)),
        ("normalisation", f"{'RMSNorm' if cfg.norm == 'rmsnorm' else 'LayerNorm'}, {PLACEMENTS[cfg.norm_placement]}"
                          + (", final norm" if cfg.final_norm else "") + (", embedding norm" if cfg.embed_norm else "")),
        ("residual", "parallel: post = pre + attn_out + mlp_out" if cfg.parallel_residual else "sequential"),
        ("vocabulary (d_vocab)", cfg.d_vocab),
        ("context (n_ctx)", cfg.n_ctx),
        ("output head", {"unembed": "unembedding → next-token logits", "mlm": "masked-LM head → logits at [MASK]",
                         "none": "none (outputs hidden states)"}[cfg.lm_head]
         + (f", logits soft-capped at ±{cfg.logit_softcap:g}" if cfg.logit_softcap is not None else "")),
        ("embeddings", "tied (W_U = W_Eᵀ)" if cfg.tied_embeddings and cfg.lm_head != "none" else
                       "untied" if cfg.lm_head != "none" else "—"),
        ("parameters", f"{model.n_params():,}"),
        ("dtype", f"{dtype_name(model.dtype)} weights and residual stream"
                  + ("" if model.dtype == torch.float32 else "; norms, attention scores and patterns in float32")),
        ("device", str(model.device)),
    ]
    if describe(model):  # a model larger than memory, placed by a device map
        rows.append(("placement", describe(model)))
    return pd.DataFrame(rows, columns=["property", "value"]).astype({"value": str})


def _component(name: str) -> str:
    if name.startswith("blocks."):
        sub = name.split(".")[2]
        return {"attn": "attention", "mlp": "feed-forward"}.get(sub, "norms" if sub.startswith("ln") else sub)
    return {"embed": "token embedding", "pos_embed": "positional embedding", "W_token_type": "token-type embedding",
            "ln_embed": "norms", "ln_final": "norms", "mlm_head": "masked-LM head", "W_U": "unembedding",
            "b_U": "unembedding"}.get(name.split(".")[0], name.split(".")[0])


def parameter_table(model: VizTransformer) -> pd.DataFrame:
    """Parameters per component (token embedding, positions, attention, feed-forward, norms, heads):
    columns ``component``, ``parameters``, ``share`` (fraction of the total). Tied matrices count once."""
    import pandas as pd

    counts: dict[str, int] = {}
    for name, p in model.named_parameters():
        counts[_component(name)] = counts.get(_component(name), 0) + p.numel()
    frame = pd.DataFrame(sorted(counts.items(), key=lambda kv: -kv[1]), columns=["component", "parameters"])
    frame["share"] = frame["parameters"] / frame["parameters"].sum()
    return frame


@torch.no_grad()
def weight_stats(model: VizTransformer, progress=None) -> pd.DataFrame:
    """Statistics of every weight matrix in the blocks: columns ``layer``, ``matrix`` (W_Q, W_K, W_V, W_O,
    W_gate, W_in, W_out), ``shape``, ``mean``, ``std``, ``max_abs``, ``rms``. ``progress(layers done, n_layers)``,
    when given, is called after each block."""
    import pandas as pd

    rows = []
    for i, block in enumerate(model.blocks):
        for prefix, module in (("attn", block.attn), ("mlp", block.mlp)):
            for name, p in module_weights(module):  # real values also where a device map offloads them
                if not name.startswith("W_"):
                    continue
                w = p.detach().float()
                rows.append((i, name, "×".join(map(str, w.shape)), w.mean().item(), w.std().item(),
                             w.abs().max().item(), w.pow(2).mean().sqrt().item()))
        if progress is not None:
            progress(i + 1, len(model.blocks))
    frame = pd.DataFrame(rows, columns=["layer", "matrix", "shape", "mean", "std", "max_abs", "rms"])
    # an ordered categorical: tables pivoted from this one (the inspector's heatmap) keep the order of the
    # computation, Q, K, V, O, then the feed-forward's matrices, instead of sorting the names alphabetically
    present = set(frame["matrix"])
    order = [m for m in MATRIX_ORDER if m in present] + sorted(present - set(MATRIX_ORDER))
    frame["matrix"] = pd.Categorical(frame["matrix"], categories=order, ordered=True)
    return frame
