"""Words and formulas that depend on the model's architecture, shared by the pages (no Streamlit)."""

from __future__ import annotations

from viz_model import Config
from viz_model.components import attn_divisor

ACT_NAMES = {"gelu": "GELU", "gelu_tanh": "GELU", "relu": "ReLU", "swiglu": "SiLU", "geglu": "GELU"}
GATED = {"swiglu": "SwiGLU", "geglu": "GeGLU"}  # gated feed-forward kinds (Shazeer, 2020) and their names


def ffn_formula(cfg: Config) -> str:
    """LaTeX of the feed-forward network this model uses (SwiGLU, GeGLU: Shazeer, 2020; else Vaswani et al., 3.3)."""
    if cfg.mlp in GATED:
        return rf"\mathrm{{FFN}}(x) = \big(\mathrm{{{ACT_NAMES[cfg.mlp]}}}(x\,W_{{gate}}) \odot x\,W_{{in}}\big)\,W_{{out}}"
    b_in, b_out = (r" + b_{in}", r" + b_{out}") if cfg.mlp_bias else ("", "")
    return rf"\mathrm{{FFN}}(x) = \mathrm{{{ACT_NAMES[cfg.mlp]}}}(x\,W_{{in}}{b_in})\,W_{{out}}{b_out}"


def ffn_sentence(cfg: Config) -> str:
    """One sentence on the feed-forward network's shape and activation."""
    if cfg.mlp in GATED:
        act = "SiLU" if cfg.mlp == "swiglu" else "GELU_tanh"
        return (f"d_model {cfg.d_model} → {cfg.d_mlp} → {cfg.d_model} as a {GATED[cfg.mlp]}: a gate {act}(x W_gate) "
                "multiplies a second linear branch x W_in element by element before W_out")
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
    if cfg.rel_pos_buckets:
        return ("Nothing is added to the embeddings: a learned relative position bias (T5), one number per head and "
                "bucket of distance between query and key, is added to every self-attention score.")
    if cfg.position_pad_id is not None and cfg.positional == "learned":  # RoBERTa
        return ("A learned positional embedding P (one trained row per position) is added (x = E + P). Positions "
                f"count only the tokens that are not padding (id {cfg.position_pad_id}): a padding token gets a row of "
                "its own, and the token after it takes the position the padding would have had.")
    return {
        "sinusoidal": "A fixed sinusoidal positional encoding P is added to each token's embedding (x = E + P).",
        "learned": "A learned positional embedding P (one trained row per position) is added (x = E + P).",
        "rotary": "Nothing is added to the embeddings: rotary positions (RoPE) rotate every query and key by an angle "
                  "proportional to its position, inside each attention layer, so q·k depends on relative position.",
        "none": ("This model adds no positional encoding: only the causal mask tells positions apart." if cfg.causal
                 else "This model adds no positional encoding and has no causal mask: nothing tells positions apart, "
                      "so attention sees the text as a bag of tokens."),
    }[cfg.positional]


def tokenizer_sentence(kind: str) -> str:
    """How this kind of tokenizer (:func:`viz_ui.analysis.text_trace.tokenizer_kind`: ``byte-level BPE``, ``BPE``,
    ``WordPiece``, ``Unigram``, ...) cuts text and how its pieces are drawn, in one or two sentences."""
    if kind.startswith("none"):
        return "This checkpoint has no tokenizer: the text is typed as token ids, each shown as #id."
    if kind == "byte-level BPE":
        return ("Byte-level BPE: frequent words are one token, rare ones several; any text can be written, byte by "
                "byte. A space is drawn as `·` and belongs to the token that follows it; a piece such as `<F0 9F>` "
                "is part of a character (an emoji or another script) split into several byte tokens.")
    if kind == "WordPiece":
        return ("WordPiece (BERT): the text is split at spaces and punctuation, then each word into the longest "
                "pieces of the vocabulary; a piece that continues a word starts with `##`, and a word it cannot "
                "spell becomes [UNK]. Spaces themselves are not tokens. [CLS] and [SEP] mark the start and end.")
    if kind == "Unigram":
        return ("Unigram (SentencePiece): the text is cut into the most probable pieces of the vocabulary; a word "
                "that follows a space starts with `▁`.")
    if kind == "BPE":
        return ("BPE: frequent character sequences are merged into one token, so common words are one token and "
                "rare ones several.")
    return f"{kind}: the text is cut into pieces of a fixed vocabulary."


def output_sentence(cfg: Config, has_lm_head: bool) -> str:
    """What comes out of the model at the end, in one sentence that fits its family."""
    if not has_lm_head:
        return ("This checkpoint has no output head: the last layer's vectors are its output (e.g. sentence "
                "embeddings), with no scores over the vocabulary.")
    if not cfg.causal:
        head = "BERT's masked-LM transform (dense, GELU, LayerNorm) and " if cfg.lm_head == "mlm" else ""
        return (f"The final vector at every position goes through {head}the "
                f"unembedding matrix: one score (logit) per vocabulary token, {cfg.d_vocab:,} in all, for the token "
                "that belongs *at* that position.")
    return ("The final vector of the last token is multiplied by the unembedding matrix: one score (logit) per "
            f"vocabulary token, {cfg.d_vocab:,} in all, for the token that comes next.")



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


def score_formula(cfg: Config) -> str:
    """One self-attention score of this model as plain text, in the order the forward pass computes it
    (:func:`viz_model.components.masked_scores`): ``q·k/√d_k`` ("Attention Is All You Need", eq. 1), or with the
    model's own divisor (:func:`viz_model.components.attn_divisor`: Gemma 2's √query_pre_attn_scalar, T5's 1),
    soft-capped ``c·tanh(· / c)`` (Gemma 2), plus T5's relative position bias ``b``."""
    divisor = attn_divisor(cfg)
    text = "q·k/√d_k" if cfg.attn_scale is None else "q·k" if divisor == 1 else f"q·k/{divisor:.4g}"
    if cfg.attn_softcap is not None:
        text = f"{cfg.attn_softcap:g}·tanh({text} / {cfg.attn_softcap:g})"
    return text + (" + b" if cfg.rel_pos_buckets else "")


def score_sentence(cfg: Config) -> str:
    """What a self-attention score is in this model, in a sentence or two (see :func:`score_formula`)."""
    divisor, root = attn_divisor(cfg), cfg.d_head ** 0.5
    if cfg.attn_scale is None:
        text = f"Scores are the dot products of queries and keys divided by √d_k = √{cfg.d_head} = {root:.4g}."
    elif divisor == 1:
        text = ("Scores are the dot products of queries and keys, not divided by √d_k: this model (T5) divides by 1, "
                "its initialisation keeps the dot products in range instead.")
    else:
        text = (f"Scores are the dot products of queries and keys divided by {divisor:.4g}, this model's own divisor "
                f"(set by its config, e.g. Gemma 2's √query_pre_attn_scalar), not by √d_k = {root:.4g}.")
    if cfg.attn_softcap is not None:
        text += (f" They are then soft-capped, {cfg.attn_softcap:g}·tanh(score / {cfg.attn_softcap:g}): small scores "
                 f"barely change, large ones stay within ±{cfg.attn_softcap:g}.")
    if cfg.rel_pos_buckets:
        text += (" A learned relative position bias b, one number per head and bucket of key − query distance, is "
                 "added to every score.")
    return text


def mask_sentence(cfg: Config) -> str:
    """Which keys the mask hides in this model, in one sentence."""
    if not cfg.causal:
        return "There is no mask: every token sees every other token (an encoder)."
    text = "The causal mask adds −∞ to the scores of later tokens, so their weight is exactly 0"
    if cfg.attn_window:
        text += (f"; the sliding window also hides keys {cfg.attn_window} or more positions back "
                 f"(each query sees at most {cfg.attn_window} keys)")
    return text + "."


def mlp_width(cfg: Config) -> int:
    """Columns of a layer's ``mlp.hook_post``: ``d_mlp``, or ``n_experts · d_mlp`` in a mixture of experts (every
    expert's units side by side, :class:`viz_model.feed_forward.MoE`). ``cfg``: the layer's own (``cfg.for_layer(layer)``: a
    dense layer among experts has its own width)."""
    return cfg.d_mlp * max(1, cfg.n_experts)


def unit_label(cfg: Config, i: int) -> str:
    """The name of column ``i`` of ``mlp.hook_post``: ``neuron i``, or ``E{e} unit {u}`` in a mixture of experts
    (``cfg``: the layer's own, as :func:`mlp_width`)."""
    return f"neuron {i}" if not cfg.n_experts else f"E{i // cfg.d_mlp} unit {i % cfg.d_mlp}"


def dense_layers_note(cfg: Config) -> str:
    """Which layers of a mixture of experts keep a dense MLP (Qwen2-MoE's ``decoder_sparse_step`` and
    ``mlp_only_layers``), as a clause such as ``layers 0 and 2 are dense (one MLP of 5632 units, no router)``; empty
    when every layer is a mixture (or the model is dense)."""
    dense = [i for i in range(cfg.n_layers) if cfg.n_experts and not cfg.is_moe_layer(i)]
    if not dense:
        return ""
    names = ", ".join(str(i) for i in dense[:-1]) + (" and " if len(dense) > 1 else "") + str(dense[-1])
    width = cfg.d_dense_mlp or cfg.d_mlp
    return (f"layer{'s' if len(dense) > 1 else ''} {names} {'are' if len(dense) > 1 else 'is'} dense (one MLP of "
            f"{width} units, no router)")


def moe_note(cfg: Config, layer: int | None = None) -> str:
    """A sentence (Markdown) on a mixture of experts' feed-forward layers and how their hidden activations are laid
    out (of layer ``layer`` when given: a dense layer among experts says so); empty for a dense model."""
    if not cfg.n_experts:
        return ""
    dense = dense_layers_note(cfg)
    head = (f" This model is a **mixture of experts**: each layer has {cfg.n_experts} such networks (experts) and a "
            f"router sends each token to {cfg.experts_per_token} of them" + (f", except that {dense}" if dense else "")
            + ".")
    if layer is not None and not cfg.is_moe_layer(layer):
        return head + f" Layer {layer} is one of the dense layers: its hidden activations below are one MLP's."
    return head + (" The hidden activations below put the experts' units side by side (expert e's units are columns "
                   f"{cfg.d_mlp}·e to {cfg.d_mlp}·(e + 1) − 1), 0 where the token was not sent to that expert; page 3f "
                   "shows the routing.")
