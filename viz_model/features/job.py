"""Training sparse dictionaries for the loaded model in the background of a shared server (the "Train dictionaries
for this model" part of the Features and Steering pages).

A :class:`DictionaryJob` tokenizes a text with the model's own tokenizer, collects ``blocks.{l}.hook_resid_post``
of the chosen layers (:func:`viz_model.features.train.collect_activations`), trains one TopK SAE per layer in turn
(:func:`viz_model.features.train.train_on_activations`, Gao et al. 2024), builds each one's top-context index on the
first :data:`INDEX_TOKENS` tokens (:func:`viz_model.features.index.build_index`) and writes everything in SAELens's
layout into a folder (``<folder>/<hook name>/cfg.json`` + ``sae_weights.safetensors`` + ``top_contexts.safetensors``,
and ``<folder>/corpus.safetensors``), in a daemon thread.

It reuses the Train your own page's machinery (:mod:`viz_model.training.live_limits`, :mod:`viz_model.jobs` and the
registry of :mod:`viz_model.training.live`): the text checks (``VIZ_MAX_TRAIN_CHARS``), the memory cap ``VIZ_MAX_TRAIN_MB``
(checked before anything is allocated, with :func:`dictionary_bytes`), the wall-time limit
``VIZ_MAX_TRAIN_SECONDS``, the thread count ``VIZ_TRAIN_THREADS`` (:func:`viz_model.jobs.limit_threads`)
and the server's :data:`viz_model.training.live.REGISTRY` (one training per session, ``VIZ_MAX_TRAININGS`` in all,
model trainings and dictionary trainings together): start it with
``REGISTRY.start(session, text, settings, source, make=DictionaryJob, model=model, tokenizer=tokenizer,
folder=folder)``. A cancel (or the time limit) stops the current layer after its current step: the layers trained so
far, the current one included with the steps it did, are written. Any failure becomes a one-line
:attr:`DictProgress.error`.
"""

from __future__ import annotations

import copy
import io
import logging
import threading
import time
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from viz_model.loading.checkpoint import first_line
from viz_model.jobs import BackgroundJob, limit_threads
from viz_model.training.live_limits import TrainingRefused, check_text, setting
from viz_model.features.index import build_index, save_corpus, save_index
from viz_model.features.saelens import save_dictionary
from viz_model.features.train import collect_activations, token_windows, train_on_activations

log = logging.getLogger(__name__)

# (smallest, largest) of what a user chooses; k must also be at most d_sae
RANGES = {"d_sae": (64, 16384), "k": (1, 256), "steps": (10, 5000), "batch_size": (64, 4096)}
MAX_TOKENS = 131_072  # tokens of activations collected per layer (the first ones of the text)
INDEX_TOKENS = 8_192  # tokens the top-context index of each dictionary is built on
WINDOW = 128  # tokens per window run from position 0 (fewer when the model's context is shorter)


@dataclass(frozen=True)
class DictSettings:
    """What the user chooses: the layers, the kind (``"sae"``: one SAE on ``blocks.{l}.hook_resid_post`` each;
    ``"transcoder"``: one transcoder each, reading ``blocks.{l}.ln2.hook_normalized`` and predicting
    ``blocks.{l}.hook_mlp_out``, as attribution graphs need), the number of features ``d_sae``, the features kept per
    token ``k``, Adam steps and rows per step (see :func:`viz_model.features.train.train_on_activations`)."""

    layers: tuple[int, ...] = (0,)
    kind: str = "sae"
    d_sae: int = 1024
    k: int = 32
    steps: int = 300
    batch_size: int = 1024
    lr: float = 1e-3
    seed: int = 0

    def check(self, n_layers: int) -> None:
        """Raises:
            TrainingRefused: one line naming the first field out of range, no layer, or a layer the model lacks.
        """
        for name, (lo, hi) in RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise TrainingRefused(f"{name} must be an integer between {lo:,} and {hi:,} (got {value!r})")
        if self.kind not in ("sae", "transcoder"):
            raise TrainingRefused(f"kind must be 'sae' or 'transcoder', not {self.kind!r}")
        if self.k > self.d_sae:
            raise TrainingRefused(f"k ({self.k}) must be at most the number of features d_sae ({self.d_sae})")
        if not self.layers:
            raise TrainingRefused("choose at least one layer")
        bad = [l for l in self.layers if not (isinstance(l, int) and 0 <= l < n_layers)]
        if bad:
            raise TrainingRefused(f"the model has layers 0 to {n_layers - 1}, not {bad[0]!r}")

    def hooks(self) -> list[str]:
        """The hook each dictionary reads, by layer."""
        if self.kind == "transcoder":
            return [f"blocks.{l}.ln2.hook_normalized" for l in sorted(set(self.layers))]
        return [f"blocks.{l}.hook_resid_post" for l in sorted(set(self.layers))]

    def out_hooks(self) -> list[str | None]:
        """The hook each dictionary predicts: a transcoder's MLP output, None for an SAE (it rebuilds its input)."""
        if self.kind == "transcoder":
            return [f"blocks.{l}.hook_mlp_out" for l in sorted(set(self.layers))]
        return [None] * len(set(self.layers))


def dictionary_bytes(settings: DictSettings, d_model: int, n_tokens: int = MAX_TOKENS, model_bytes: int = 0) -> int:
    """An estimate of a job's peak memory in bytes (float32 everywhere)::

        model_bytes                  the job's own copy of the model (see DictionaryJob)
        + 4 n L d h                  the activations of every chosen layer (n tokens, L layers, d = d_model; h = 2 for
                                     transcoders, which keep their input and their target, else 1)
        + 4 · 5 P                    one dictionary's weights, gradients and Adam's two moments, and the copy
                                     written (P = d_sae (2 d + 1) + d)
        + 4 · 6 B s                  a step's pre-activations, their gradient and top-k temporaries (B rows, s = d_sae)
        + 4 · 2 I s                  the index's activations (I = INDEX_TOKENS tokens) and their float16 copy
        + 64 MB                      the rest (the model's own forward passes for the activations, allocator slack)
    """
    s, d, layers = settings.d_sae, d_model, len(set(settings.layers))
    params = s * (2 * d + 1) + d
    per_layer = 2 if settings.kind == "transcoder" else 1
    return (model_bytes + 4 * n_tokens * layers * d * per_layer + 20 * params + 24 * settings.batch_size * s
            + 8 * min(INDEX_TOKENS, n_tokens) * s + 64 * 2**20)


def check_size(settings: DictSettings, d_model: int, n_layers: int, n_tokens: int = MAX_TOKENS,
               model_bytes: int = 0) -> int:
    """:func:`dictionary_bytes` when the settings are in range and the job fits ``VIZ_MAX_TRAIN_MB``.

    Raises:
        TrainingRefused: out of range, or above the cap (one line saying what to lower).
    """
    settings.check(n_layers)
    need, cap = dictionary_bytes(settings, d_model, n_tokens, model_bytes), int(setting("VIZ_MAX_TRAIN_MB") * 2**20)
    if need > cap:
        raise TrainingRefused(f"these dictionaries would need about {need / 2**20:,.0f} MB to train, above this "
                              f"server's {cap / 2**20:,.0f} MB (VIZ_MAX_TRAIN_MB): choose fewer layers or features")
    return need


@dataclass(frozen=True)
class DictProgress:
    """A consistent copy of a job's state for the page."""

    status: str  # "preparing", "training", "done", "cancelled", "timed out" or "failed"
    fraction: float  # of the whole job, 0 to 1
    message: str  # what it does now, one line
    elapsed: float  # seconds since the job started (until it ended)
    error: str | None  # one line, when status is "failed"
    written: list[str] = field(default_factory=list)  # hook names whose dictionary is written, in order
    fvu: list[float] = field(default_factory=list)  # each written dictionary's last training-batch FVU
    dead: list[float] = field(default_factory=list)  # ... and its fraction of dead features
    n_tokens: int = 0  # tokens of activations per layer

    @property
    def running(self) -> bool:
        return self.status in ("preparing", "training")


class _Stop(threading.Event):
    """The event the training loop polls: set by a cancel, or reading as set once the wall-time limit has passed."""

    def __init__(self, deadline: float) -> None:
        super().__init__()
        self.deadline = deadline

    def is_set(self) -> bool:
        return super().is_set() or time.monotonic() > self.deadline


class DictionaryJob(BackgroundJob):
    """One background training of dictionaries (see the module docstring); the signature fits
    :meth:`viz_model.training.live.Registry.start` (``make=DictionaryJob``).

    Args:
        text: the text to train on (checked as the Train your own page checks it).
        settings: a :class:`DictSettings`.
        source: a short label of the text ("shipped stories", a file name).
        model: the loaded model, copied when the thread starts (hooks that pages add to the shared model while the
            job collects activations must not reach either side), the copy freed once activations are collected;
            tokenizer: its tokenizer (``encode(text).ids``).
        folder: where the set is written (created; ``<folder>/<hook name>/``).

    Raises (on creation):
        TrainingRefused: a bad text or settings, a size above the cap, a text the tokenizer cannot encode or too
            short for one window; nothing large has been allocated.
    """

    def __init__(self, text: str, settings: DictSettings, source: str = "pasted text", *, model, tokenizer,
                 folder: str | Path, max_seconds: float | None = None, threads: int | None = None) -> None:
        self.text = check_text(text)
        self.settings, self.source, self.model = settings, source, model
        self.folder = Path(folder)
        cfg = model.cfg
        if not cfg.causal or cfg.is_encoder_decoder:
            raise TrainingRefused("dictionaries are trained here for decoder-only models (this one is an encoder or "
                                  "an encoder-decoder)")
        self.model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        check_size(settings, cfg.d_model, cfg.n_layers, model_bytes=self.model_bytes)
        try:
            ids = tokenizer.encode(self.text).ids
        except Exception as exc:  # noqa: BLE001  (an uploaded tokenizer may fail in its own way)
            raise TrainingRefused(f"the model's tokenizer cannot encode the text ({first_line(exc)})") from None
        self.window = min(WINDOW, cfg.n_ctx)
        if len(ids) < self.window:
            raise TrainingRefused(f"the text gives {len(ids):,} tokens, fewer than one window of {self.window}")
        self.windows = token_windows(ids[:MAX_TOKENS], self.window)
        self.estimate = dictionary_bytes(settings, cfg.d_model, self.windows.numel(), self.model_bytes)
        self.max_seconds = float(max_seconds or setting("VIZ_MAX_TRAIN_SECONDS"))
        self.threads = int(threads or setting("VIZ_TRAIN_THREADS"))
        self.id = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._stop = _Stop(float("inf"))
        self._ended = threading.Event()
        self._status, self._fraction, self._message, self._error = "preparing", 0.0, "starting", None
        self._written: list[str] = []
        self._fvu: list[float] = []
        self._dead: list[float] = []
        self._t0 = self._t1 = None
        self._thread = threading.Thread(target=self._run, name=f"viz-dict-{self.id[:8]}", daemon=True)

    # -- control ---------------------------------------------------------------------------------------------
    def start(self) -> DictionaryJob:
        self._t0 = time.monotonic()
        self._stop.deadline = self._t0 + self.max_seconds
        self._thread.start()
        return self

    # -- reading ---------------------------------------------------------------------------------------------
    def progress(self) -> DictProgress:
        with self._lock:
            end = self._t1 if self._t1 is not None else time.monotonic()
            return DictProgress(self._status, self._fraction, self._message,
                                0.0 if self._t0 is None else end - self._t0, self._error, list(self._written),
                                list(self._fvu), list(self._dead), int(self.windows.numel()))

    def folders(self) -> list[Path]:
        """The folders of the dictionaries written so far, in layer order."""
        return [self.folder / hook for hook in self.progress().written]

    def zip_bytes(self) -> bytes:
        """The written set as a ``.zip``: one folder per dictionary (``cfg.json``, ``sae_weights.safetensors``,
        ``top_contexts.safetensors``) and ``corpus.safetensors`` at its root, as the upload takes it back."""
        return zip_folder(self.folder)

    # -- the thread ------------------------------------------------------------------------------------------
    def _set(self, **values) -> None:
        with self._lock:
            for key, value in values.items():
                setattr(self, "_" + key, value)

    def _run(self) -> None:
        try:
            limit_threads(self.threads)
            self._train()
        except BaseException as exc:  # noqa: BLE001  the page shows one line
            log.exception("dictionary job %s failed", self.id)
            self._set(status="failed", error=first_line(exc, 300))
        finally:
            with self._lock:
                self._t1 = time.monotonic()
            self._ended.set()

    def _train(self) -> None:
        s, hooks, outs = self.settings, self.settings.hooks(), self.settings.out_hooks()
        share = 0.1  # of the whole job for collecting the activations
        # a copy of its own: the page's threads add and remove hooks on the shared model while this one runs
        model = copy.deepcopy(self.model).eval()
        for hook in model.hook_dict.values():
            hook.remove_hooks()
        acts = collect_activations(model, self.windows, hooks + [o for o in outs if o], cancel=self._stop,
                                   progress=lambda f, m: self._set(fraction=share * f, message=m))
        del model
        if any(len(a) < len(self.windows) * self.window for a in acts.values()):
            self._set(status="cancelled" if super(_Stop, self._stop).is_set() else "timed out")
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        n_index = min(len(self.windows), max(1, INDEX_TOKENS // self.window))
        save_corpus(self.windows[:n_index], self.folder)
        self._set(status="training")
        per = (1 - share) / len(hooks)
        stopped = False
        for i, (hook, out_hook) in enumerate(zip(hooks, outs)):
            if self._stop.is_set():
                stopped = True
                break
            base = share + i * per

            def progress(f: float, m: str, base=base, hook=hook) -> None:
                self._set(fraction=base + per * f, message=f"{hook}: {m}")

            d, result = train_on_activations(acts[hook], acts[out_hook] if out_hook else None, s.d_sae, hook, "topk",
                                             s.k, hook_name_out=out_hook, steps=s.steps, batch_size=s.batch_size,
                                             lr=s.lr, seed=s.seed, progress=progress, cancel=self._stop)
            if result.steps < 1:
                stopped = True
                break
            out = self.folder / hook
            save_dictionary(d, out, trained_by="viz_model.features.job", source=self.source[:200],
                            steps=result.steps)
            with torch.no_grad():
                f = d.encode(acts[hook][: n_index * self.window]).to(torch.float16)
            save_index(build_index(f.view(n_index, self.window, s.d_sae), context=min(24, self.window),
                                   lead=min(19, self.window - 1)), out)
            del f
            with self._lock:
                self._written.append(hook)
                self._fvu.append(result.fvu)
                self._dead.append(result.dead_fraction)
            acts[hook] = None  # free this layer's activations
            if out_hook:
                acts[out_hook] = None
            if result.cancelled:
                stopped = True
                break
        done = len(self._written) == len(hooks) and not stopped
        status = "done" if done else "cancelled" if super(_Stop, self._stop).is_set() else "timed out"
        self._set(status=status, fraction=1.0 if done else self._fraction,
                  message=f"{len(self._written)} of {len(hooks)} dictionaries written")


def zip_folder(folder: str | Path) -> bytes:
    """Every file under ``folder`` in a ``.zip`` (paths relative to it; stored, since weights barely compress)."""
    folder = Path(folder)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    return buffer.getvalue()


__all__ = ["DictProgress", "DictSettings", "DictionaryJob", "check_size", "dictionary_bytes", "zip_folder"]
