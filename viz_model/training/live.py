"""Training a tiny model in the background of a shared server (the "Train your own" page), on the project's one
training loop (:func:`viz_model.training.loop.train_steps`).

A :class:`TrainJob` trains a byte-level BPE tokenizer on a text, then a small decoder-only
:class:`viz_model.VizTransformer` (learned positions, pre-LN, GELU, tied embeddings), in a daemon thread. While it
runs it exposes its progress (step, the loss of every step, elapsed seconds), the newest weights as a fresh model
(for a probe text), and snapshots taken on an even schedule from initialisation to the end (kept as a timeline:
steps, train and held-out loss, fp16 weights). It stops when the steps are done, when :meth:`TrainJob.cancel` is
called (cooperatively: the loop checks ``should_stop`` before each step) or at the wall-time limit, and keeps a
usable model in each case; any failure becomes a one-line :attr:`Progress.error`.

The limits (size, memory, wall time, threads, concurrent trainings) are in :mod:`viz_model.training.live_limits`;
:class:`Registry` enforces one running training per session and ``VIZ_MAX_TRAININGS`` in all.

Threads: the training thread runs on ``VIZ_TRAIN_THREADS`` threads and the server's others keep theirs
(:func:`viz_model.jobs.limit_threads`; tests/test_live.py checks both).
"""

from __future__ import annotations

import io
import logging
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from viz_model.loading.checkpoint import first_line, save_checkpoint
from viz_model.config import Config
from viz_model.jobs import BackgroundJob, limit_threads
from viz_model.model import VizTransformer
from viz_model.loading.sources import private_dir
from viz_model.tokenizer import iter_chunks, train_bpe
from viz_model.training.loop import lm_batches, train_steps
from viz_model.training.live_limits import (DEFAULTS, MAX_SNAPSHOTS, MIN_CHARS, RANGES, ServerBusy, TrainingRefused,  # noqa: F401
                          TrainSettings, check_size, check_text, setting, train_bytes)
from viz_model.loading.timeline import LoadedTimeline, load_timeline, write_timeline
from viz_model.training.train import encode

log = logging.getLogger(__name__)

SHIPPED_TEXT = Path(__file__).resolve().parents[2] / "assets" / "texts" / "model-stories.txt"
HELD_OUT = 0.1  # the last 10 % of the text (cut at a line end) measures the held-out loss
EVAL_TOKENS = 2_048  # tokens evaluated per snapshot, of the training text and of the held-out part
PUBLISH_EVERY = 5  # steps between two copies of the newest weights for the probe


def snapshot_steps(steps: int, n: int = MAX_SNAPSHOTS) -> list[int]:
    """The steps at which a job keeps a snapshot: 0 (the initialisation), then ``n - 1`` more evenly spaced up to
    ``steps`` (fewer when ``steps < n - 1``), ascending and distinct."""
    return sorted({round(i * steps / (n - 1)) for i in range(n)})


def split_text(text: str) -> tuple[str, str]:
    """(training part, held-out part): the last :data:`HELD_OUT` of the text, cut at a line end when there is one."""
    at = int(len(text) * (1 - HELD_OUT))
    cut = text.rfind("\n", 0, at) + 1
    cut = cut if cut > len(text) // 2 else at  # a text without line ends (or with one early) is cut mid-line
    return text[:cut], text[cut:]


@torch.no_grad()
def window_loss(model: VizTransformer, ids: torch.Tensor, max_tokens: int = EVAL_TOKENS) -> float:
    """Mean next-token cross-entropy (nats/token) over non-overlapping windows of ``n_ctx`` tokens of the first
    ``max_tokens`` of ``ids`` ``[n]`` (the first token of each window is context only): the measure of
    :func:`viz_model.training.train.evaluate`, with the windows run as one batch; a last window shorter than
    ``n_ctx`` is run on its own. The model's train/eval mode is restored.

    Raises:
        ValueError: when ``ids`` holds fewer than 2 tokens.
    """
    ids = ids[:max_tokens]
    if len(ids) < 2:
        raise ValueError("fewer than 2 tokens to evaluate")
    n, was_training = model.cfg.n_ctx, model.training
    model.eval()
    full = len(ids) // n * n
    parts = [ids[:full].view(-1, n)] if full else []
    if len(ids) - full >= 2:
        parts.append(ids[full:][None])
    total, count = 0.0, 0
    for windows in parts:
        logits = model(windows)[:, :-1]
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1), reduction="sum"))
        count += windows[:, 1:].numel()
    model.train(was_training)
    return total / count


@dataclass(frozen=True)
class Snapshot:
    """The model after ``step`` steps: weights (float16, as shipped timelines store them) and its losses."""

    step: int
    state: dict[str, torch.Tensor]
    train_loss: float  # nats/token on the first EVAL_TOKENS tokens of the training part
    valid_loss: float  # nats/token on the first EVAL_TOKENS tokens of the held-out part


@dataclass(frozen=True)
class Progress:
    """A consistent copy of a job's state for the page."""

    status: str  # "preparing", "training", "done", "cancelled", "timed out" or "failed"
    step: int  # steps done
    steps: int  # steps asked for
    losses: list[float]  # the batch loss of every step done (nats/token), losses[i] after step i + 1
    elapsed: float  # seconds since the job started (until it ended)
    error: str | None  # one line, when status is "failed"
    snapshot_steps: list[int] = field(default_factory=list)
    valid_losses: list[float] = field(default_factory=list)  # held-out loss at each snapshot
    n_tokens: int = 0  # tokens of the training part
    d_vocab: int = 0
    version: int = 0  # grows each time newer weights are published

    @property
    def running(self) -> bool:
        return self.status in ("preparing", "training")


class TrainJob(BackgroundJob):
    """One background training (see the module docstring). Create it through :meth:`Registry.start` on a server,
    or directly and call :meth:`start`.

    Raises (on creation):
        TrainingRefused: bad text or settings, or a size above the caps; nothing has been allocated.
    """

    def __init__(self, text: str, settings: TrainSettings = TrainSettings(), source: str = "pasted text",
                 max_seconds: float | None = None, threads: int | None = None):
        self.text = check_text(text)
        self.settings = settings
        self.estimate = check_size(settings)
        self.source = source
        self.max_seconds = float(max_seconds or setting("VIZ_MAX_TRAIN_SECONDS"))
        self.threads = int(threads or setting("VIZ_TRAIN_THREADS"))
        self.id = uuid.uuid4().hex
        self.tokenizer: Tokenizer | None = None
        self.threads_used = 0
        self.cfg: Config | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ended = threading.Event()
        self._status, self._error, self._step, self._n_tokens = "preparing", None, 0, 0
        self._losses: list[float] = []
        self._snapshots: list[Snapshot] = []
        self._latest: tuple[int, dict[str, torch.Tensor]] | None = None  # (version, float32 weights)
        self._version = 0
        self._built: tuple[int, VizTransformer] | None = None
        self._t0 = self._t1 = None
        self._thread = threading.Thread(target=self._run, name=f"viz-train-{self.id[:8]}", daemon=True)

    # -- control ---------------------------------------------------------------------------------------------
    def start(self) -> TrainJob:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    # -- reading ---------------------------------------------------------------------------------------------
    def progress(self) -> Progress:
        with self._lock:
            end = self._t1 if self._t1 is not None else time.monotonic()
            return Progress(self._status, self._step, self.settings.steps, list(self._losses),
                            0.0 if self._t0 is None else end - self._t0, self._error,
                            [s.step for s in self._snapshots], [s.valid_loss for s in self._snapshots],
                            self._n_tokens, self.cfg.d_vocab if self.cfg else 0, self._version)

    @property
    def snapshots(self) -> list[Snapshot]:
        with self._lock:
            return list(self._snapshots)

    def snapshot_model(self, index: int) -> VizTransformer:
        """A fresh model (eval mode, float32) with the weights of snapshot ``index``."""
        return self._build(self.snapshots[index].state)

    def latest_model(self) -> VizTransformer | None:
        """A model with the newest published weights (every :data:`PUBLISH_EVERY` steps, and at the end), in eval
        mode and never trained further, so it may be run while the job goes on; the same object until newer
        weights come. None before the first weights (while the tokenizer is trained)."""
        with self._lock:
            latest, built = self._latest, self._built
        if latest is None:
            return None
        if built is None or built[0] != latest[0]:
            built = (latest[0], self._build(latest[1]))
            with self._lock:
                self._built = built
        return built[1]

    def checkpoint_bytes(self) -> bytes:
        """The newest model as a native checkpoint (:func:`viz_model.save_checkpoint`), with the job's settings and
        losses in its metadata.

        Raises:
            RuntimeError: when the job has no weights yet.
        """
        model = self.latest_model()
        if model is None:
            raise RuntimeError("the training has no model yet")
        p = self.progress()
        meta = {"trained_by": "viz_model.training.live", "source": self.source[:200], "steps": str(p.step),
                "settings": str(asdict(self.settings)), "final_train_loss": f"{p.losses[-1]:.4f}" if p.losses else ""}
        with tempfile.TemporaryDirectory(prefix="viz-train-") as folder:
            path = save_checkpoint(model, self.tokenizer, Path(folder) / "model.safetensors", meta)
            return path.read_bytes()

    def timeline(self) -> dict:
        """The snapshots as a timeline's numbers: ``steps``, ``train_loss``, ``valid_loss`` (lists of equal length)."""
        snaps = self.snapshots
        return {"steps": [s.step for s in snaps], "train_loss": [s.train_loss for s in snaps],
                "valid_loss": [s.valid_loss for s in snaps]}

    def write_timeline(self, folder: str | Path) -> Path:
        """Write the snapshots as a training timeline (:mod:`viz_model.loading.timeline`) into ``folder``: one
        native checkpoint per snapshot (``step_NNNNNN.safetensors``, float16 as kept) and ``timeline.json`` with
        the steps, losses and the recipe; return the path of ``timeline.json``.

        Raises:
            RuntimeError: when the job has no snapshot yet.
            CheckpointError: from :func:`viz_model.loading.timeline.write_timeline`.
        """
        folder, snaps = Path(folder), self.snapshots
        if not snaps:
            raise RuntimeError("the training has no snapshot yet")
        names = []
        for snap in snaps:
            names.append(f"step_{snap.step:06d}.safetensors")
            save_checkpoint(self._build(snap.state), self.tokenizer, folder / names[-1],
                            {"step": str(snap.step), "source": self.source[:200]}, dtype=torch.float16)
        return write_timeline(folder, [s.step for s in snaps], names, [s.train_loss for s in snaps],
                              [s.valid_loss for s in snaps], source=self.source[:200], recipe=asdict(self.settings),
                              trained_by="viz_model.training.live (the Train your own page)",
                              losses="nats/token: train_loss on the first 2,048 training tokens, valid_loss on the "
                                     "first 2,048 tokens of the held-out last 10 % of the text")

    def loaded_timeline(self) -> LoadedTimeline:
        """The snapshots as a :class:`viz_model.loading.timeline.LoadedTimeline` (what the timeline page shows),
        written to a private temporary folder and read back with the checks of any timeline; the folder is
        removed before this returns.

        Raises:
            RuntimeError, CheckpointError: as :meth:`write_timeline` and :func:`load_timeline`.
        """
        with private_dir("timeline") as folder:
            self.write_timeline(folder)
            return load_timeline(folder, label=f"trained: {self.source[:60]}")

    def timeline_zip(self) -> bytes:
        """The timeline folder of :meth:`write_timeline` as a ``.zip`` (files at its root), as the timeline page's
        upload takes it."""
        with private_dir("timeline") as folder:
            self.write_timeline(folder)
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:  # weights barely compress
                for path in sorted(folder.iterdir()):
                    archive.write(path, path.name)
            return buffer.getvalue()

    # -- the thread ------------------------------------------------------------------------------------------
    def _build(self, state: dict[str, torch.Tensor]) -> VizTransformer:
        model = VizTransformer(self.cfg)
        model.load_state_dict({k: v.float() for k, v in state.items()})
        return model.eval()

    def _set(self, **values) -> None:
        with self._lock:
            for key, value in values.items():
                setattr(self, "_" + key, value)

    def _publish(self, model: VizTransformer) -> None:
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        with self._lock:
            self._version += 1
            self._latest = (self._version, state)

    def _snapshot(self, model: VizTransformer, step: int, train_ids: torch.Tensor, valid_ids: torch.Tensor) -> None:
        snap = Snapshot(step, {k: v.detach().half().clone() for k, v in model.state_dict().items()},
                        window_loss(model, train_ids), window_loss(model, valid_ids))
        with self._lock:
            self._snapshots.append(snap)

    def _should_stop(self) -> bool:
        return self._stop.is_set() or time.monotonic() - self._t0 > self.max_seconds

    def _run(self) -> None:
        try:
            limit_threads(self.threads)
            self.threads_used = torch.get_num_threads()  # what this thread runs on (tests/test_live.py)
            self._train()
        except BaseException as exc:  # noqa: BLE001  (a Rust panic of tokenizers too): the page shows one line
            log.exception("training job %s failed", self.id)
            self._set(status="failed", error=first_line(exc, 300))
        finally:
            with self._lock:
                self._t1 = time.monotonic()
            self._ended.set()

    def _train(self) -> None:
        s = self.settings
        train_text, valid_text = split_text(self.text)
        self.tokenizer = train_bpe(iter_chunks(train_text), s.vocab_size)
        train_ids, valid_ids = encode(self.tokenizer, train_text), encode(self.tokenizer, valid_text)
        need = s.n_ctx + 2
        if len(train_ids) < need or len(valid_ids) < 2:
            raise TrainingRefused(f"the text is too short for a context of {s.n_ctx} tokens: it gives "
                                  f"{len(train_ids):,} training tokens, at least {need:,} are needed (with 10 % held "
                                  "out): give a longer text or a shorter context")
        self.cfg = s.config(self.tokenizer.get_vocab_size())
        self._set(n_tokens=len(train_ids))
        if self._should_stop():
            self._set(status="cancelled" if self._stop.is_set() else "timed out")
            return
        model = VizTransformer(self.cfg)
        model.init_weights(seed=s.seed)
        keep = set(snapshot_steps(s.steps))
        self._snapshot(model, 0, train_ids, valid_ids)
        self._publish(model)
        self._set(status="training")
        batches = lm_batches(train_ids, s.n_ctx, s.batch_size, s.seed)
        warmup = max(1, min(50, s.steps // 10))
        step = 0
        for done in train_steps(model, batches, s.steps, s.lr, s.lr / 10, warmup, should_stop=self._should_stop):
            step = done.step
            with self._lock:
                self._losses.append(done.loss)
                self._step = step
            if step in keep:
                self._snapshot(model, step, train_ids, valid_ids)
            if step % PUBLISH_EVERY == 0 or step in keep:
                self._publish(model)
        if step and step not in keep:  # stopped early: the last step done is the last snapshot
            self._snapshot(model, step, train_ids, valid_ids)
            self._publish(model)
        status = "done" if step == s.steps else "cancelled" if self._stop.is_set() else "timed out"
        self._set(status=status)


class Registry:
    """The server's running jobs, by session: at most one per session and ``VIZ_MAX_TRAININGS`` in all (or
    ``max_jobs``). Finished jobs leave it (the session keeps its own reference)."""

    def __init__(self, max_jobs: int | None = None):
        self.max_jobs = max_jobs
        self._lock = threading.Lock()
        self._jobs: dict[str, TrainJob] = {}

    def running(self) -> int:
        """Trainings running now."""
        with self._lock:
            return len(self._prune())

    def job(self, session: str) -> TrainJob | None:
        """The session's running job, if any."""
        with self._lock:
            return self._prune().get(session)

    def _prune(self) -> dict[str, TrainJob]:
        for key in [k for k, j in self._jobs.items() if not j.running]:
            del self._jobs[key]
        return self._jobs

    def start(self, session: str, text: str, settings: TrainSettings = TrainSettings(), source: str = "pasted text",
              make: Callable[..., TrainJob] = TrainJob, **kwargs) -> TrainJob:
        """Start a job for ``session``.

        Raises:
            TrainingRefused: bad text or settings, too large (nothing allocated), or the session already has a
                running job.
            ServerBusy: ``VIZ_MAX_TRAININGS`` (or ``max_jobs``) jobs are running.
        """
        job = make(text, settings, source, **kwargs)  # checks the text and the size first
        with self._lock:
            jobs = self._prune()
            if session in jobs:
                raise TrainingRefused("a training is already running in this session: cancel it or wait until it ends")
            cap = int(self.max_jobs or setting("VIZ_MAX_TRAININGS"))
            if len(jobs) >= cap:
                raise ServerBusy(f"the server is busy ({len(jobs)} training{'s' if len(jobs) != 1 else ''} running); "
                                 "try again in a minute")
            jobs[session] = job.start()
        return job


REGISTRY = Registry()  # the server's (one per process)
