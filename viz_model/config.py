"""Configuration of the instrumented transformer.

Field names follow TransformerLens (``n_layers``, ``n_heads``, ``d_model``, ``d_head``, ``d_mlp``,
``d_vocab``, ``n_ctx``) so that people who know that library feel at home.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field

from viz_model.limits import (BOOL_FIELDS, FAMILY_PATTERN, FLOAT_LIST_RANGES, FLOAT_RANGES, INT_RANGES, MAX_CONFIG_CHARS,
                     MAX_EXTRA_CHARS, MAX_EXTRA_DEPTH, OPTIONAL_FIELDS)

POSITIONAL_KINDS = ("sinusoidal", "learned", "rotary", "none")
NORM_KINDS = ("layernorm", "rmsnorm")
NORM_PLACEMENTS = ("pre", "post", "sandwich", "output")
MLP_KINDS = ("gelu", "gelu_tanh", "relu", "swiglu", "geglu")
ROTARY_SCALINGS = ("none", "linear", "llama3", "longrope")
QK_NORMS = ("none", "head", "all")
LM_HEADS = ("unembed", "mlm", "none")


class ConfigError(ValueError):
    """A configuration that is inconsistent or asks for something the model cannot build."""


def _is_int(value) -> bool:
    """A JSON integer: ``int`` but not ``bool`` (``True`` is an ``int`` in Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    """A JSON number: ``int`` (not ``bool``) or ``float``."""
    return isinstance(value, float) or _is_int(value)


def _finite(value) -> bool:
    """A JSON number that is a finite float (a 400-digit integer is not: ``float()`` of it overflows)."""
    try:
        return _is_number(value) and math.isfinite(value)
    except OverflowError:
        return False


def _show(value) -> str:
    """A short, one-line rendering of a config value for a message (a 5,000-digit integer or a long string is cut)."""
    if _is_int(value) and abs(value) >= 10**15:
        return f"an integer of about {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4,000'} digits"
    text = " ".join(repr(value).split())
    return text if len(text) <= 40 else text[:37] + "..."


def _depth(value, limit: int) -> int:
    """Nesting depth of JSON-like ``value``, stopping once it exceeds ``limit``."""
    if limit < 0 or not isinstance(value, (dict, list)):
        return 0
    items = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(v, limit - 1) for v in items), default=0)


def _check_extra(extra) -> None:
    if not isinstance(extra, dict):
        raise ConfigError(f"config field extra must be a JSON object, got {_show(extra)}")
    if _depth(extra, MAX_EXTRA_DEPTH) > MAX_EXTRA_DEPTH:
        raise ConfigError(f"config field extra is nested deeper than {MAX_EXTRA_DEPTH} levels")
    try:
        size = len(json.dumps(extra, separators=(",", ":"), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config field extra must hold plain JSON values ({_show(str(exc))})") from None
    if size > MAX_EXTRA_CHARS:
        raise ConfigError(f"config field extra is {size:,} characters of JSON, above the {MAX_EXTRA_CHARS:,} allowed")


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
    # pre-LN (GPT-2), post-LN (original transformer, BERT), sandwich (Gemma 2: a norm on each sub-layer's input
    # and another on its output before the add) or output (OLMo2: only the sub-layer's output is normed)
    norm_placement: str = "pre"
    # feed-forward kind: GELU (erf), GELU tanh approximation (GPT-2), ReLU, SwiGLU (Llama), GeGLU (Gemma, T5 v1.1:
    # a gate through the GELU tanh approximation)
    mlp: str = "gelu"
    causal: bool = True  # decoder masking: a position sees only itself and earlier positions
    tied_embeddings: bool = True  # unembedding W_U is the transpose of the embedding W_E
    final_norm: bool = True  # a LayerNorm after the last block (pre-LN models need it)
    layer_norm_eps: float = 1e-5  # epsilon added to the variance inside LayerNorm
    attn_bias: bool = True  # biases on W_Q, W_K, W_V, W_O
    mlp_bias: bool = True  # biases on the two feed-forward layers
    dropout: float = 0.0  # dropout during training only; 0 at inference
    rotary_base: float = 10000.0  # base of the rotary angles theta_i = base^(-2i / d_head) (RoFormer)
    attn_window: int | None = None  # sliding-window attention (Mistral): a query sees at most this many keys
    # --- switches of further families (issue 16); each default reproduces the models above ---
    window_layers: list | None = None  # layers whose attention uses attn_window (Gemma 2 alternates); None = all
    rotary_dim: int | None = None  # partial rotary (GPT-NeoX rotary_pct): only a head's first rotary_dim dims turn
    rotary_scaling: str = "none"  # longer contexts by slower rotations: none, linear (all / factor), llama3 (Llama 3.1)
    rotary_factor: float = 1.0  # linear and llama3: the frequencies (low ones, for llama3) are divided by this
    rotary_low_freq_factor: float = 1.0  # llama3: wavelengths above rotary_original_ctx / this are divided by factor
    rotary_high_freq_factor: float = 4.0  # llama3: wavelengths below rotary_original_ctx / this are kept
    rotary_original_ctx: int = 8192  # llama3: the context of pre-training, where the wavelength bands are measured
    rotary_base_local: float | None = None  # Gemma 3: windowed layers' own rotary base (unscaled); None = rotary_base
    # LongRoPE (rotary_scaling "longrope"; Phi-3/3.5 128k, Ding et al., 2024): one factor would slow every pair alike;
    # LongRoPE searched a divisor of theta_i per pair instead, one list for texts of at most rotary_original_ctx tokens
    # (chosen per forward pass, by the whole sequence's length, as transformers does) and one for longer texts, and
    # multiplies cos and sin by rotary_attn_factor
    rotary_short_factor: list | None = None  # longrope: [d_rotary / 2] divisors for texts <= rotary_original_ctx tokens
    rotary_long_factor: list | None = None  # longrope: [d_rotary / 2] divisors for longer texts
    rotary_attn_factor: float = 1.0  # longrope: cos and sin times this, sqrt(1 + ln(n_ctx / original) / ln(original))
    qk_norm: str = "none"  # RMSNorm of q and k before rotation: per head (Qwen3) or over all heads at once (OLMo2)
    attn_scale: float | None = None  # scores are q.k / attn_scale; None = sqrt(d_head); Gemma 2 sqrt(256), T5 1
    attn_softcap: float | None = None  # Gemma 2: scores -> c tanh(scores / c), kept within (-c, c), before the mask
    logit_softcap: float | None = None  # Gemma 2: the same soft cap on the final logits
    # OLMoE (and OLMo 1) option against loss spikes in training: q and k (after their norm) and v clamped to +-clip_qkv
    clip_qkv: float | None = None  # None = no clamp
    parallel_residual: bool = False  # GPT-NeoX: attention and MLP both read resid_pre, post = pre + attn + mlp
    rel_pos_buckets: int = 0  # T5: a learned bias per head and bucket of key - query distance on the scores; 0 = none
    rel_pos_max_distance: int = 128  # T5: distances from here on share the last bucket (log-spaced buckets below)
    n_token_types: int = 0  # segment (token type) embeddings added to the input (BERT); 0 = none
    # RoBERTa counts positions over the tokens that are not padding (transformers' create_position_ids_from_input_ids):
    # a token with this id takes a row of its own (W_pos_pad) and the tokens after it do not move on a position
    position_pad_id: int | None = None  # None = every token is the next position
    embed_scale: float = 1.0  # token embeddings are multiplied by this (sqrt(d_model) in Vaswani et al. 3.4; BART option)
    embed_norm: bool = False  # a LayerNorm over embeddings + positions before the first block (BERT)
    lm_head: str = "unembed"  # output: plain unembedding, BERT's masked-LM head, or none (encoder only)
    unembed_bias: bool = False  # a bias b_U on the logits (BERT's masked-LM head)
    n_encoder_layers: int = 0  # encoder-decoder models: blocks of the encoder stack (0 = no encoder)
    decoder_start_id: int = 0  # encoder-decoder models: the token the decoder starts from
    decoder_end_id: int = 0  # encoder-decoder models: the token that ends the decoder's output
    # --- mixture of experts (Mixtral, Qwen2-MoE, OLMoE; viz_model/feed_forward.py): many feed-forward networks per block, of
    # which a router picks a few per token, so parameters grow without the cost per token growing ---
    n_experts: int = 0  # experts per block, each an MLP of width d_mlp, replacing the MLP; 0 = a dense MLP
    experts_per_token: int = 2  # top-k: experts each token is sent to (Mixtral 2, Qwen1.5-MoE 4, OLMoE 8)
    norm_topk_prob: bool = True  # the k chosen router probabilities rescaled to sum to 1 (Mixtral; an option elsewhere)
    # Qwen2-MoE's shared expert: an MLP of this width that every token also goes through, scaled by a sigmoid gate
    d_shared_mlp: int = 0  # 0 = none
    # Qwen2-MoE's decoder_sparse_step and mlp_only_layers: some layers keep a dense MLP (of its own width) instead of
    # the mixture, e.g. every other layer; only the others have a router and its hooks
    dense_layers: list | None = None  # layers whose feed-forward is a dense MLP of width d_dense_mlp; None = none
    d_dense_mlp: int | None = None  # width of those dense MLPs (Qwen2-MoE's intermediate_size); None = d_mlp
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

    @property
    def input_norm(self) -> bool:
        """Each sub-layer reads a normed copy of the stream (pre-LN and sandwich), rather than the stream itself."""
        return self.norm_placement in ("pre", "sandwich")

    @property
    def output_norm(self) -> bool:
        """Each sub-layer's output is normed before it is added to the stream (sandwich: Gemma 2; output: OLMo2)."""
        return self.norm_placement in ("sandwich", "output")

    @property
    def d_rotary(self) -> int:
        """Dimensions of each head that rotary positions turn (``rotary_dim``, else all ``d_head``)."""
        return self.d_head if self.rotary_dim is None else self.rotary_dim

    def windowed(self, layer: int) -> bool:
        """Whether layer ``layer``'s self-attention uses the sliding window ``attn_window``."""
        return self.attn_window is not None and (self.window_layers is None or layer in self.window_layers)

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer ``layer``'s feed-forward is a mixture of experts (``n_experts`` > 0 and not a dense layer)."""
        return bool(self.n_experts) and (self.dense_layers is None or layer not in self.dense_layers)

    @property
    def moe_layers(self) -> list[int]:
        """The layers whose feed-forward is a mixture of experts, in order (empty for a dense model)."""
        return [i for i in range(self.n_layers) if self.is_moe_layer(i)]

    def for_layer(self, layer: int) -> "Config":
        """A copy with what differs per layer resolved: ``attn_window`` (None where the layer has no window) and
        ``rotary_base`` (``rotary_base_local``, unscaled, in windowed layers: Gemma 3), with ``window_layers`` None; in
        a dense layer of a mixture of experts (``dense_layers``) ``n_experts`` 0, ``d_shared_mlp`` 0 and ``d_mlp`` the
        dense width, with ``dense_layers`` and ``d_dense_mlp`` None. Each module keeps its own, so that code reading
        ``attn.cfg`` sees that layer's mask and rotation, and code given ``cfg.for_layer(i)`` that layer's MLP."""
        windowed = self.windowed(layer)
        local = windowed and self.rotary_base_local is not None  # Gemma 3: local layers rotate unscaled, own base
        dense = bool(self.n_experts) and not self.is_moe_layer(layer)  # Qwen2-MoE's dense layers
        ffn = dict(n_experts=0, d_shared_mlp=0, d_mlp=self.d_dense_mlp or self.d_mlp) if dense else {}
        return dataclasses.replace(self, attn_window=self.attn_window if windowed else None, window_layers=None,
                                   rotary_base=self.rotary_base_local if local else self.rotary_base,
                                   rotary_base_local=None, rotary_scaling="none" if local else self.rotary_scaling,
                                   dense_layers=None, d_dense_mlp=None, **ffn)

    def kv_head(self, head: int) -> int:
        """The key/value head that query head ``head`` reads (as transformers' ``repeat_kv``: head // n_rep)."""
        return head // self.n_rep

    def validate(self) -> "Config":
        """Check every field's exact type and range (:mod:`viz_model.limits`) and their consistency; return ``self``.

        Integers must be JSON integers (``true`` is not 1), booleans JSON booleans (``"no"`` is not false),
        floats finite numbers, strings one of their allowed values. The ranges (``n_layers`` <= 512,
        ``d_model`` <= 65,536, ``n_ctx`` <= 1,048,576, ``layer_norm_eps`` in (0, 1), ...) are listed in
        ``limits.INT_RANGES`` / ``limits.FLOAT_RANGES`` and in docs/uploads.md. The memory estimate is a separate
        check (:func:`viz_model.limits.check_budget`).

        Raises:
            ConfigError: one line naming the first offending field.
        """
        for name, (low, high) in INT_RANGES.items():
            value = getattr(self, name)
            if name in OPTIONAL_FIELDS and value is None:
                continue
            if not _is_int(value) or not low <= value <= high:
                kind = "an integer" if name not in OPTIONAL_FIELDS else "null or an integer"
                raise ConfigError(f"config field {name} must be {kind} in [{low:,}, {high:,}], got {_show(value)}")
        for name, (low, high, low_in, high_in) in FLOAT_RANGES.items():
            value = getattr(self, name)
            if name in OPTIONAL_FIELDS and value is None:
                continue
            ok = _finite(value)
            ok = ok and (low <= value if low_in else low < value) and (value <= high if high_in else value < high)
            if not ok:
                bounds = f"{'[' if low_in else '('}{low:g}, {high:g}{']' if high_in else ')'}"
                raise ConfigError(f"config field {name} must be a finite number in {bounds}, got {_show(value)}")
        for name in BOOL_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"config field {name} must be true or false, got {_show(getattr(self, name))}")
        checks = (("positional", POSITIONAL_KINDS), ("norm", NORM_KINDS),
                  ("norm_placement", NORM_PLACEMENTS), ("mlp", MLP_KINDS), ("lm_head", LM_HEADS),
                  ("rotary_scaling", ROTARY_SCALINGS), ("qk_norm", QK_NORMS))
        for name, allowed in checks:
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise ConfigError(f"config field {name} must be one of {', '.join(allowed)}, got {_show(value)}")
        if not isinstance(self.family, str) or not re.fullmatch(FAMILY_PATTERN, self.family, re.ASCII):
            raise ConfigError(f"config field family must be a short plain name ({FAMILY_PATTERN}), got {_show(self.family)}")
        _check_extra(self.extra)
        if self.n_encoder_layers and not self.causal:
            raise ConfigError("an encoder-decoder model needs a causal decoder (causal = true)")
        if self.n_encoder_layers and max(self.decoder_start_id, self.decoder_end_id) >= self.d_vocab:
            raise ConfigError("decoder_start_id and decoder_end_id must be token ids of the vocabulary")
        if self.n_kv_heads > self.n_heads or self.n_heads % self.n_kv_heads:
            raise ConfigError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ConfigError("sinusoidal positions need an even d_model")
        if self.positional == "rotary" and self.d_head % 2:
            raise ConfigError("rotary positions need an even d_head")
        if self.n_experts and self.experts_per_token > self.n_experts:
            raise ConfigError(f"experts_per_token ({self.experts_per_token}) must be at most n_experts ({self.n_experts})")
        if self.d_shared_mlp and not self.n_experts:
            raise ConfigError("d_shared_mlp (a shared expert) needs a mixture of experts (n_experts > 0)")
        if self.n_experts and self.n_encoder_layers:
            raise ConfigError("a mixture of experts is supported in decoder-only and encoder-only models, not in an "
                              "encoder-decoder")
        if self.position_pad_id is not None and (self.positional != "learned" or self.n_encoder_layers
                                                 or self.position_pad_id >= self.d_vocab):
            raise ConfigError("position_pad_id needs learned positions, a decoder-only or encoder-only model and a "
                              "token id of the vocabulary")
        if self.rotary_dim is not None and (self.rotary_dim % 2 or self.rotary_dim > self.d_head):
            raise ConfigError(f"rotary_dim ({self.rotary_dim}) must be even and at most d_head ({self.d_head})")
        if self.rotary_scaling == "llama3" and self.rotary_high_freq_factor <= self.rotary_low_freq_factor:
            raise ConfigError("rotary_high_freq_factor must be above rotary_low_freq_factor (llama3 scaling)")
        self._check_factor_lists()
        self._check_window_layers()
        self._check_dense_layers()
        if self.rel_pos_buckets and (self.rel_pos_buckets < 4 or self.rel_pos_max_distance <= self.rel_pos_buckets // 2):
            raise ConfigError("rel_pos_buckets must be 0 or at least 4, and rel_pos_max_distance above half of it")
        if self.parallel_residual and (self.norm_placement != "pre" or self.n_encoder_layers):
            raise ConfigError("parallel_residual needs a pre-LN decoder-only model (norm_placement = pre)")
        return self

    def _check_factor_lists(self) -> None:
        """LongRoPE's lists (:data:`limits.FLOAT_LIST_RANGES`): under ``longrope`` each a list of ``d_rotary / 2``
        finite numbers in range, one per rotated pair; otherwise null."""
        for name, (low, high, low_in, high_in) in FLOAT_LIST_RANGES.items():
            value = getattr(self, name)
            if self.rotary_scaling != "longrope":
                if value is not None:
                    raise ConfigError(f"config field {name} must be null without longrope scaling, got {_show(value)}")
                continue
            n = self.d_rotary // 2
            ok = isinstance(value, list) and len(value) == n and all(
                _finite(v) and (low <= v if low_in else low < v)
                and (v <= high if high_in else v < high) for v in value)
            if not ok:
                bounds = f"{'[' if low_in else '('}{low:g}, {high:g}{']' if high_in else ')'}"
                raise ConfigError(f"config field {name} must be a list of {n} finite numbers in {bounds} (one per "
                                  f"rotated pair, longrope scaling), got {_show(value)}")

    def _check_window_layers(self) -> None:
        layers = self.window_layers
        if layers is None:
            return
        if not isinstance(layers, list) or len(layers) > self.n_layers \
                or not all(_is_int(i) and 0 <= i < self.n_layers for i in layers) or len(set(layers)) != len(layers):
            raise ConfigError(f"config field window_layers must be null or a list of distinct layer indices in "
                              f"[0, {self.n_layers}), got {_show(layers)}")
        if self.attn_window is None:
            raise ConfigError("window_layers needs attn_window (the window those layers use)")

    def _check_dense_layers(self) -> None:
        layers = self.dense_layers
        if layers is not None and (not isinstance(layers, list) or len(layers) > self.n_layers
                                   or not all(_is_int(i) and 0 <= i < self.n_layers for i in layers)
                                   or len(set(layers)) != len(layers)):
            raise ConfigError(f"config field dense_layers must be null or a list of distinct layer indices in "
                              f"[0, {self.n_layers}), got {_show(layers)}")
        if (layers is not None or self.d_dense_mlp is not None) and not self.n_experts:
            raise ConfigError("dense_layers and d_dense_mlp (dense layers among experts) need a mixture of experts "
                              "(n_experts > 0)")
        if layers is not None and len(layers) == self.n_layers:
            raise ConfigError("dense_layers lists every layer: a model without a mixture of experts has n_experts 0")

    def to_json(self) -> str:
        """The config as a JSON string (stored in a checkpoint's metadata)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Config":
        """Parse a config written by :meth:`to_json` and :meth:`validate` it.

        Raises:
            ConfigError: one line, on invalid JSON (also: nested too deep, a number with too many digits),
                a value that is not an object, unknown or missing fields, or invalid values.
        """
        if not isinstance(text, str):
            raise ConfigError("the config is not valid JSON: it is not text")
        if len(text) > MAX_CONFIG_CHARS:
            raise ConfigError(f"the config is {len(text):,} characters long, above the {MAX_CONFIG_CHARS:,} allowed")
        try:
            data = json.loads(text)
        except RecursionError:
            raise ConfigError("the config is not valid JSON: it is nested too deeply") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"the config is not valid JSON: {exc.msg} at character {exc.pos}") from None
        except ValueError as exc:  # e.g. an integer of more than 4,300 digits (sys.get_int_max_str_digits)
            why = "a number has too many digits" if "digits" in str(exc) else _show(str(exc))
            raise ConfigError(f"the config is not valid JSON: {why}") from None
        if not isinstance(data, dict):
            raise ConfigError("the config must be a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            shown = ", ".join(_show(n) if not re.fullmatch(r"\w{1,40}", n) else n for n in unknown[:5])
            raise ConfigError(f"unknown config fields: {shown}{' ...' if len(unknown) > 5 else ''}")
        required = sorted(f.name for f in dataclasses.fields(cls)
                          if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        missing = [name for name in required if name not in data]
        if missing:
            raise ConfigError(f"incomplete config: missing {', '.join(missing)}")
        return cls(**data).validate()
