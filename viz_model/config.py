"""Configuration of the instrumented transformer.

Field names follow TransformerLens (``n_layers``, ``n_heads``, ``d_model``, ``d_head``, ``d_mlp``,
``d_vocab``, ``n_ctx``) so that people who know that library feel at home.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

POSITIONAL_KINDS = ("sinusoidal", "learned", "rotary", "none")
NORM_KINDS = ("layernorm", "rmsnorm")
NORM_PLACEMENTS = ("pre", "post")
MLP_KINDS = ("gelu", "gelu_tanh", "relu", "swiglu")
LM_HEADS = ("unembed", "mlm", "none")


class ConfigError(ValueError):
    """A configuration that is inconsistent or asks for something the model cannot build."""


@dataclass
class Config:
    """Shape and architecture switches of a :class:`viz_model.VizTransformer`.

    Raises:
        ConfigError: from :meth:`validate` when a field is out of range or inconsistent.
    """

    n_layers: int  # number of transformer blocks in the stack
    d_model: int  # width of the residual stream (embedding size)
    n_heads: int  # attention heads per layer (query heads)
    d_head: int  # width of one head's q, k, v; d_k in "Attention Is All You Need"
    d_mlp: int  # hidden width of the feed-forward network (usually 4 * d_model)
    d_vocab: int  # tokenizer vocabulary size: rows of the embedding, columns of the logits
    n_ctx: int  # longest sequence the model accepts (size of a learned position table)
    n_kv_heads: int | None = None  # key/value heads; None = n_heads (room for grouped-query attention)
    positional: str = "sinusoidal"  # how positions enter: added sinusoid, learned table, rotary, none
    norm: str = "layernorm"  # LayerNorm (mean and variance) or RMSNorm (later issue)
    norm_placement: str = "pre"  # pre-LN (GPT-2) or post-LN (original transformer, BERT)
    mlp: str = "gelu"  # feed-forward kind: GELU (erf), GELU tanh approximation (GPT-2), ReLU, SwiGLU (Llama)
    causal: bool = True  # decoder masking: a position sees only itself and earlier positions
    tied_embeddings: bool = True  # unembedding W_U is the transpose of the embedding W_E
    final_norm: bool = True  # a LayerNorm after the last block (pre-LN models need it)
    layer_norm_eps: float = 1e-5  # epsilon added to the variance inside LayerNorm
    attn_bias: bool = True  # biases on W_Q, W_K, W_V, W_O
    mlp_bias: bool = True  # biases on the two feed-forward layers
    dropout: float = 0.0  # dropout during training only; 0 at inference
    rotary_base: float = 10000.0  # base of the rotary angles theta_i = base^(-2i / d_head) (RoFormer)
    attn_window: int | None = None  # sliding-window attention (Mistral): a query sees at most this many keys
    n_token_types: int = 0  # segment (token type) embeddings added to the input (BERT); 0 = none
    embed_scale: float = 1.0  # token embeddings are multiplied by this (sqrt(d_model) in Vaswani et al. 3.4; BART option)
    embed_norm: bool = False  # a LayerNorm over embeddings + positions before the first block (BERT)
    lm_head: str = "unembed"  # output: plain unembedding, BERT's masked-LM head, or none (encoder only)
    unembed_bias: bool = False  # a bias b_U on the logits (BERT's masked-LM head)
    n_encoder_layers: int = 0  # encoder-decoder models: blocks of the encoder stack (0 = no encoder)
    decoder_start_id: int = 0  # encoder-decoder models: the token the decoder starts from
    decoder_end_id: int = 0  # encoder-decoder models: the token that ends the decoder's output
    family: str = "viz"  # where the weights came from: viz (native), gpt2, nanogpt, bert, llama, mistral, qwen2
    extra: dict = field(default_factory=dict)  # free-form notes kept with a checkpoint

    def __post_init__(self) -> None:
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads

    @property
    def is_encoder_decoder(self) -> bool:
        """An encoder stack plus a decoder stack joined by cross-attention (Vaswani et al., 2017)."""
        return self.n_encoder_layers > 0

    @property
    def n_rep(self) -> int:
        """Query heads per key/value head: 1 = multi-head, n_heads = multi-query, between = grouped-query."""
        return self.n_heads // self.n_kv_heads

    def kv_head(self, head: int) -> int:
        """The key/value head that query head ``head`` reads (as transformers' ``repeat_kv``: head // n_rep)."""
        return head // self.n_rep

    def validate(self) -> "Config":
        """Check ranges and consistency; return ``self``.

        Raises:
            ConfigError: naming the first offending field.
        """
        for name in ("n_layers", "d_model", "n_heads", "d_head", "d_mlp", "d_vocab", "n_ctx", "n_kv_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"config field {name} must be a positive integer, got {value!r}")
        for name in ("n_encoder_layers", "decoder_start_id", "decoder_end_id"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"config field {name} must be a non-negative integer, got {value!r}")
        if self.n_encoder_layers and not self.causal:
            raise ConfigError("an encoder-decoder model needs a causal decoder (causal = true)")
        if self.n_encoder_layers and max(self.decoder_start_id, self.decoder_end_id) >= self.d_vocab:
            raise ConfigError("decoder_start_id and decoder_end_id must be token ids of the vocabulary")
        if not isinstance(self.n_token_types, int) or self.n_token_types < 0:
            raise ConfigError(f"config field n_token_types must be a non-negative integer, got {self.n_token_types!r}")
        if self.attn_window is not None and (not isinstance(self.attn_window, int) or self.attn_window <= 0):
            raise ConfigError(f"config field attn_window must be a positive integer or null, got {self.attn_window!r}")
        checks = (("positional", POSITIONAL_KINDS), ("norm", NORM_KINDS),
                  ("norm_placement", NORM_PLACEMENTS), ("mlp", MLP_KINDS), ("lm_head", LM_HEADS))
        for name, allowed in checks:
            if getattr(self, name) not in allowed:
                raise ConfigError(f"config field {name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.n_kv_heads > self.n_heads or self.n_heads % self.n_kv_heads:
            raise ConfigError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ConfigError("sinusoidal positions need an even d_model")
        if self.positional == "rotary" and self.d_head % 2:
            raise ConfigError("rotary positions need an even d_head")
        if not (isinstance(self.rotary_base, (int, float)) and self.rotary_base > 1):
            raise ConfigError(f"rotary_base must be a number above 1, got {self.rotary_base!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        return self

    def to_json(self) -> str:
        """The config as a JSON string (stored in a checkpoint's metadata)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Config":
        """Parse a config written by :meth:`to_json`.

        Raises:
            ConfigError: on invalid JSON, unknown or missing fields, or invalid values.
        """
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, TypeError) as exc:
            raise ConfigError(f"the config is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError("the config must be a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown config fields: {', '.join(unknown)}")
        try:
            cfg = cls(**data)
        except TypeError as exc:
            raise ConfigError(f"incomplete config: {exc}") from None
        return cfg.validate()
