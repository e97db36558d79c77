"""Words and formulas that depend on the model's architecture, shared by the pages (no Streamlit)."""

from __future__ import annotations

from viz_model import Config

ACT_NAMES = {"gelu": "GELU", "gelu_tanh": "GELU", "relu": "ReLU", "swiglu": "SiLU"}


def ffn_formula(cfg: Config) -> str:
    """LaTeX of the feed-forward network this model uses (SwiGLU: Shazeer, 2020; else Vaswani et al., 3.3)."""
    if cfg.mlp == "swiglu":
        return r"\mathrm{FFN}(x) = \big(\mathrm{SiLU}(x\,W_{gate}) \odot x\,W_{in}\big)\,W_{out}"
    b_in, b_out = (r" + b_{in}", r" + b_{out}") if cfg.mlp_bias else ("", "")
    return rf"\mathrm{{FFN}}(x) = \mathrm{{{ACT_NAMES[cfg.mlp]}}}(x\,W_{{in}}{b_in})\,W_{{out}}{b_out}"


def ffn_sentence(cfg: Config) -> str:
    """One sentence on the feed-forward network's shape and activation."""
    if cfg.mlp == "swiglu":
        return (f"d_model {cfg.d_model} → {cfg.d_mlp} → {cfg.d_model} as a SwiGLU: a gate SiLU(x W_gate) multiplies "
                "a second linear branch x W_in element by element before W_out")
    act = "GELU (tanh approximation, as GPT-2)" if cfg.mlp == "gelu_tanh" else ACT_NAMES[cfg.mlp]
    return f"d_model {cfg.d_model} → {cfg.d_mlp} → {cfg.d_model}, with a {act} in between"


def norm_formula(cfg: Config) -> str:
    """LaTeX of LayerNorm (Ba et al., 2016) or RMSNorm (Zhang & Sennrich, 2019)."""
    if cfg.norm == "rmsnorm":
        return r"\mathrm{RMSNorm}(x) = \frac{x}{\sqrt{\tfrac{1}{d}\sum_i x_i^2+\varepsilon}}\odot w"
    return r"\mathrm{LN}(x) = \frac{x-\mu}{\sqrt{\sigma^2+\varepsilon}}\odot w + b"


def norm_sentence(cfg: Config) -> str:
    """What the model's normalisation does, in words."""
    if cfg.norm == "rmsnorm":
        return ("RMSNorm divides each vector by its root mean square (no centring, no shift) and applies a learned "
                "scale w")
    return "LayerNorm rescales each vector to mean 0 and variance 1, then applies a learned scale w and shift b"


def positional_sentence(cfg: Config) -> str:
    """How positions enter this model, in one or two sentences."""
    return {
        "sinusoidal": "A fixed sinusoidal positional encoding P is added to each token's embedding (x = E + P).",
        "learned": "A learned positional embedding P (one trained row per position) is added (x = E + P).",
        "rotary": "Nothing is added to the embeddings: rotary positions (RoPE) rotate every query and key by an angle "
                  "proportional to its position, inside each attention layer, so q·k depends on relative position.",
        "none": "This model adds no positional encoding: only the causal mask tells positions apart.",
    }[cfg.positional]



def input_name(cfg: Config) -> str:
    """What enters the first block, as a formula in words: ``x = E + P``, ``x = E`` (rotary, none),
    ``x = LN(E + P + T)`` (BERT)."""
    terms = "E" + (" + P" if cfg.positional in ("learned", "sinusoidal") else "") + (" + T" if cfg.n_token_types else "")
    return f"x = LN({terms})" if cfg.embed_norm else f"x = {terms}"


def logits_formula(cfg: Config) -> str:
    """LaTeX of the output head: final norm (LN or RMSNorm), BERT's masked-LM transform, W_U, b_U."""
    x = r"x_L"
    if cfg.final_norm:
        x = (r"\mathrm{RMSNorm}" if cfg.norm == "rmsnorm" else r"\mathrm{LN}") + rf"({x})"
    if cfg.lm_head == "mlm":
        x = rf"\mathrm{{LN}}(\mathrm{{GELU}}({x}\,W + b))"
    return rf"\text{{logits}} = {x}\,W_U" + (" + b_U" if cfg.unembed_bias else "")


def mask_sentence(cfg: Config) -> str:
    """Which keys the mask hides in this model, in one sentence."""
    if not cfg.causal:
        return "There is no mask: every token sees every other token (an encoder)."
    text = "The causal mask adds −∞ to the scores of later tokens, so their weight is exactly 0"
    if cfg.attn_window:
        text += (f"; the sliding window also hides keys {cfg.attn_window} or more positions back "
                 f"(each query sees at most {cfg.attn_window} keys)")
    return text + "."
