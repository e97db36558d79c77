"""The limits of training live on a shared server (:mod:`viz_model.training.live`): what a user may choose, the
memory a training costs, and the settings that bound it, each read from the environment when a job starts:

- ``VIZ_MAX_TRAININGS`` (default 2): trainings running at once on the server; one more is refused with
  "the server is busy (N trainings running); try again in a minute". One running training per session.
- ``VIZ_MAX_TRAIN_MB`` (default 1,024): the training memory estimate (:func:`train_bytes`), checked before any
  tensor is allocated, with the inference cap of :func:`viz_model.limits.check_budget` (``VIZ_MAX_MODEL_MB``).
- ``VIZ_MAX_TRAIN_SECONDS`` (default 300): wall time of one job, tokenizer included.
- ``VIZ_TRAIN_THREADS`` (default 1): torch threads of the training thread.
- Fields within :data:`RANGES`; a text of at most ``VIZ_MAX_TRAIN_CHARS`` (default 2,000,000) characters.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from viz_model.config import Config
from viz_model.limits import BudgetError, check_budget, count_params

# (smallest, largest) of every setting a user chooses; d_model must also be a multiple of n_heads
RANGES = {"n_layers": (1, 4), "n_heads": (1, 8), "d_model": (16, 256), "n_ctx": (16, 256), "steps": (10, 3000),
          "vocab_size": (260, 4096), "batch_size": (1, 32), "lr": (1e-5, 1e-1)}
MIN_CHARS = 200  # below this no context of 16 tokens fits after the held-out part is set aside
MAX_SNAPSHOTS = 16  # step 0 and 15 more on an even schedule (viz_model.training.live.snapshot_steps)
JOB_OVERHEAD = 128 * 2**20  # bytes a job costs besides its model (see train_bytes)
DEFAULTS = {"VIZ_MAX_TRAININGS": 2, "VIZ_MAX_TRAIN_MB": 1024, "VIZ_MAX_TRAIN_SECONDS": 300, "VIZ_TRAIN_THREADS": 1,
            "VIZ_MAX_TRAIN_CHARS": 2_000_000}


def setting(name: str) -> float:
    """A limit from the environment variable ``name`` (one of :data:`DEFAULTS`), read on every call; a missing,
    unreadable or non-positive value gives the default."""
    try:
        value = float(os.environ.get(name, DEFAULTS[name]))
    except ValueError:
        value = DEFAULTS[name]
    return value if math.isfinite(value) and value > 0 else DEFAULTS[name]


class TrainingRefused(ValueError):
    """A training that may not start: bad text or settings, too large, or one already running in the session.
    The message is one line, for the user."""


class ServerBusy(TrainingRefused):
    """The server-wide cap on concurrent trainings is reached."""


@dataclass(frozen=True)
class TrainSettings:
    """What the user chooses (within :data:`RANGES`). d_head = d_model / n_heads, d_mlp = 4 d_model."""

    n_layers: int = 2
    n_heads: int = 4
    d_model: int = 128
    n_ctx: int = 64  # context in tokens (the length of each training window)
    steps: int = 500  # AdamW steps
    vocab_size: int = 512  # largest vocabulary of the BPE tokenizer (fewer when the text has fewer merges)
    batch_size: int = 16  # windows per step
    lr: float = 3e-3  # peak learning rate (linear warm-up over min(50, steps / 10) steps, cosine decay to lr / 10)
    seed: int = 0

    def check(self) -> None:
        """Raises:
            TrainingRefused: one line naming the first field out of range, or a width not divisible by the heads.
        """
        for name, (lo, hi) in RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
                raise TrainingRefused(f"{name} must be between {lo:g} and {hi:g} (got {value!r})")
        if self.d_model % self.n_heads:
            raise TrainingRefused(f"the width d_model ({self.d_model}) must be a multiple of the number of heads "
                                  f"({self.n_heads})")

    def config(self, d_vocab: int) -> Config:
        """The model's :class:`Config` for a tokenizer of ``d_vocab`` tokens."""
        return Config(n_layers=self.n_layers, d_model=self.d_model, n_heads=self.n_heads,
                      d_head=self.d_model // self.n_heads, d_mlp=4 * self.d_model, d_vocab=d_vocab, n_ctx=self.n_ctx,
                      positional="learned")


def train_bytes(settings: TrainSettings) -> int:
    """An estimate of a job's peak memory in bytes, from the settings alone (the vocabulary at its largest)::

        JOB_OVERHEAD                  128 MB: what a job costs before its model (the tokenizer's training, the
                                      thread's allocator arena, the modules torch imports at its first AdamW step)
        + 28 P                        weights, gradients, AdamW's two moments and the temporaries of its
                                      multi-tensor step (float32)
        + 4 P + 2 P · MAX_SNAPSHOTS   the newest weights copied for the probe; the snapshots (float16)
        + 4 B (L (T (24 d + 4 m) + 6 h T²) + 10 T V)   activations kept for the backward pass and their
                                      gradients: per layer and token the residual stream, norms, q, k, v, z,
                                      outputs and the MLP's hidden layer; per head the scores, masked scores and
                                      pattern; the logits, their softmax and gradients

    with P = :func:`viz_model.limits.count_params`, B = batch, L = layers, T = context, d = d_model, m = 4 d,
    h = heads, V = vocabulary. The coefficients were fitted to the peak RSS growth of a fresh process training 7
    sizes (bench/train_live.py): the estimate was 0.94 to 1.44 times it (the heads' T² terms vary most: 542 to
    677 MB measured for 2 layers × 8 heads at a context of 256 in two runs).
    """
    s = settings
    params = count_params(s.config(s.vocab_size))
    d, m, t = s.d_model, 4 * s.d_model, s.n_ctx
    activations = 4 * s.batch_size * (s.n_layers * (t * (24 * d + 4 * m) + 6 * s.n_heads * t * t) + 10 * t * s.vocab_size)
    return JOB_OVERHEAD + 28 * params + 4 * params + 2 * params * MAX_SNAPSHOTS + activations


def check_size(settings: TrainSettings) -> int:
    """Return :func:`train_bytes` when the settings are in range and the job fits the caps.

    Raises:
        TrainingRefused: out of range, above ``VIZ_MAX_TRAIN_MB``, or above the inference cap ``VIZ_MAX_MODEL_MB``.
    """
    settings.check()
    need, cap = train_bytes(settings), int(setting("VIZ_MAX_TRAIN_MB") * 2**20)
    cfg = settings.config(settings.vocab_size)
    if need > cap:
        raise TrainingRefused(f"this size would need about {need / 2**20:,.0f} MB to train ({count_params(cfg):,} "
                              f"parameters), above this server's {cap / 2**20:,.0f} MB (VIZ_MAX_TRAIN_MB): choose fewer "
                              "layers, a smaller width or a shorter context")
    try:
        check_budget(cfg)
    except BudgetError as exc:
        raise TrainingRefused(str(exc)) from None
    return need


def check_text(text: object) -> str:
    """The text, when it can be trained on.

    Raises:
        TrainingRefused: not a string, empty, shorter than :data:`MIN_CHARS` or longer than ``VIZ_MAX_TRAIN_CHARS``.
    """
    if not isinstance(text, str) or not text.strip():
        raise TrainingRefused("the text is empty: paste or upload a text, or choose the shipped stories")
    if len(text.strip()) < MIN_CHARS:
        raise TrainingRefused(f"the text is too short ({len(text.strip())} characters): give at least {MIN_CHARS:,}")
    cap = int(setting("VIZ_MAX_TRAIN_CHARS"))
    if len(text) > cap:
        raise TrainingRefused(f"the text has {len(text):,} characters, above the {cap:,} this server trains on "
                              "(VIZ_MAX_TRAIN_CHARS)")
    return text
