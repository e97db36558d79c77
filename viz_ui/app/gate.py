"""Costly work behind a button (Streamlit glue): what the loaded model would take more than :data:`GATE_SECONDS` to
compute is never computed as a page opens. The page shows a button with the estimated time; a click computes it
with a progress bar and a Cancel button, and keeps the result in Streamlit's cache, keyed by the values it depends on.

Estimates come from the loaded model's own measured speed (:func:`copy_seconds`: the seconds one copy of an
``n``-token text takes in a batched forward pass, measured once per model and length bucket: a probe for a small
model, the trace's own forward for a large one) times the work in forward-equivalents (:mod:`viz_ui.analysis.costs`).

Cancelling: a click on Cancel (or any other widget) makes Streamlit rerun the page, which stops the running script
at its next progress update; nothing half-done is stored, and the next run of the page says it was cancelled.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import streamlit as st
import torch

from viz_model import VizTransformer
from viz_model.interventions.batching import copies_per_pass, seconds_per_forward
from viz_model.interventions.cost import forward_flops

GATE_SECONDS = 1.0  # work estimated above this many seconds waits for a click (environment: VIZ_GATE_SECONDS)
PROBE_BATCH = 8  # copies in the speed probe of a small model
PROBE_FLOPS = 20e9  # a probe computes at most this many FLOPs per run (about 0.2 s on a 2-core CPU)

Progress = Callable[[int, int], None]

_LOCKS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # key -> its lock, while someone holds it
_LOCKS_GUARD = threading.Lock()


def one_at_a_time(key: tuple) -> threading.RLock:
    """The lock of ``key`` (any hashable value), shared by every session of this server: hold it while computing
    a result that the others would compute too, then look again before computing. Without it, a class whose 30
    students open the same page at once computed its speed probe and each gated result 30 times over, concurrently
    (bench/class_live.py: about 120 ms of server CPU per student on the attention page's first visit instead of
    40). Re-entrant: a computation may take it again in the same thread."""
    try:
        hash(key)
    except TypeError:  # a list or dict inside: its text stands for it
        key = repr(key)
    with _LOCKS_GUARD:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = threading.RLock()
        return lock


def gate_seconds() -> float:
    """The threshold in seconds: ``VIZ_GATE_SECONDS`` when it is a number ≥ 0 (``inf``: never ask), else
    :data:`GATE_SECONDS`."""
    try:
        value = float(os.environ.get("VIZ_GATE_SECONDS", "").strip() or GATE_SECONDS)
    except ValueError:
        return GATE_SECONDS
    return value if value >= 0 else GATE_SECONDS


def length_bucket(n_tokens: int) -> int:
    """The power of two ≥ ``n_tokens`` (at least 8) that a speed measurement stands for."""
    return 1 << max(3, (max(1, n_tokens) - 1).bit_length())


@st.cache_resource(show_spinner=False)
def _speeds() -> dict[tuple[str, int], float]:
    return {}  # (model key, length bucket) -> seconds per copy, shared by every session of this server


def probe_seconds(model: VizTransformer, n_tokens: int, batch: int = PROBE_BATCH) -> float:
    """Seconds per copy of a plain forward pass over ``batch`` copies (fewer where the memory budget says so,
    :func:`viz_model.interventions.batching.copies_per_pass`) of ``n_tokens`` random ids
    (:func:`viz_model.interventions.batching.seconds_per_forward`: one warm-up run, then one timed)."""
    batch = max(1, min(batch, copies_per_pass(model, n_tokens)))
    ids = torch.randint(0, model.cfg.d_vocab, (1, n_tokens), generator=torch.Generator().manual_seed(0))
    kwargs = {"src_tokens": ids} if model.encoder is not None else {}
    return seconds_per_forward(model, ids, batch, **kwargs)


def copy_seconds(model: VizTransformer, path: str, n_tokens: int, trace_seconds: float | None) -> float:
    """Seconds one copy of an ``n_tokens`` text takes in the batched passes of this model's sweeps, measured once
    per (model key, :func:`length_bucket`) and kept for the server's life.

    A small model (a forward at the bucket's length under :data:`PROBE_FLOPS` multiply-add FLOPs,
    :func:`viz_model.interventions.cost.forward_flops`): :func:`probe_seconds`, a few batched forwards of that
    length (batching makes each copy of a small model much cheaper than a forward alone; the best of two runs
    leaves out the first run's warm-up). A larger one: the trace's own forward (``trace_seconds``, every hook
    recorded: a little pessimistic), which costs nothing more; a probe there would cost seconds. Without a trace
    time, a probe of one copy.
    """
    bucket = length_bucket(n_tokens)
    table = _speeds()
    if (path, bucket) in table:
        return table[(path, bucket)]
    with one_at_a_time(("speed", path, bucket)):
        if (path, bucket) in table:  # measured while this session waited
            return table[(path, bucket)]
        flops = forward_flops(model, bucket)
        flops = flops["encoder"] + sum(flops["blocks"]) + flops["decode"]
        batch = int(max(1, min(PROBE_BATCH, PROBE_FLOPS // max(1.0, flops))))
        if batch == 1 and trace_seconds is not None:
            table[(path, bucket)] = trace_seconds * bucket / max(1, n_tokens)
        else:
            table[(path, bucket)] = probe_seconds(model, bucket, batch)
    return table[(path, bucket)]


def flops_per_second(model: VizTransformer, path: str, n_tokens: int, trace_seconds: float | None) -> float:
    """The model's measured matrix-multiply rate: the FLOPs of one copy at the :func:`length_bucket`
    (:func:`viz_model.interventions.cost.forward_flops`) over :func:`copy_seconds`."""
    bucket = length_bucket(n_tokens)
    flops = forward_flops(model, bucket)
    total = flops["encoder"] + sum(flops["blocks"]) + flops["decode"]
    return total / max(1e-9, copy_seconds(model, path, n_tokens, trace_seconds))


def about(seconds: float) -> str:
    """An estimate as words: "under a second", "about 40 s", "about 4 min", "about 2 h"."""
    if seconds < 1:
        return "under a second"
    if seconds < 90:
        return f"about {max(1, round(seconds, -1) if seconds >= 15 else round(seconds)):.0f} s"
    if seconds < 5400:
        return f"about {round(seconds / 60):.0f} min"
    return f"about {seconds / 3600:.1f} h"


class NotComputed(Exception):
    """Raised by :func:`_kept` when a result is not in the cache (Streamlit does not cache a call that raises)."""


@st.cache_data(max_entries=64, ttl=3600, show_spinner=False)
def _kept(name: str, key: tuple, _value: Any = None) -> Any:
    """The cache of gated results: ``(name, key)`` → the value stored by the call that computed it. Called without
    a value, it answers from the cache or raises :class:`NotComputed`."""
    if _value is None:
        raise NotComputed(name)
    return _value


def cached_result(name: str, key: tuple) -> Any | None:
    """The result of ``name`` for ``key`` if it is in the cache, else None (nothing is computed)."""
    try:
        return _kept(name, key)
    except NotComputed:
        return None


def running_flag(name: str) -> str:
    """The session key set while this session computes ``name`` through :func:`costly` (still set on the next run:
    that run was stopped, and :func:`costly` says it was cancelled). A caller that finds the result elsewhere (a
    cache of its own) drops it, as :func:`costly` does when the result is in its cache."""
    return f"_gate_running_{name}"


def costly(name: str, key: tuple, estimate_s: float, compute: Callable[[Progress | None], Any], label: str,
           where: Any = None) -> Any | None:
    """The result of ``compute`` for ``key``: from the cache, computed at once when ``estimate_s`` is at most
    :func:`gate_seconds`, else after a click on a button that says ``label`` and the estimate.

    Args:
        name: what is computed (one name per kind of result, e.g. ``"head_effects"``).
        key: every value the result depends on (model key, texts, settings): the cache key, with ``name``.
        estimate_s: the estimated seconds of ``compute`` on this model (see :func:`copy_seconds`).
        compute: ``compute(progress)`` returns the result (never None); ``progress(done, total)``, when not None,
            moves the progress bar (and is where a click on Cancel stops the script).
        label: the button's words, e.g. "Compute the per-head effect map" (" — about 40 s" is added).
        where: the Streamlit container to draw in (default: the page).

    Returns:
        The result, or None while it waits for a click (the button is shown).
    """
    where = where if where is not None else st
    flag = running_flag(name)  # set while this session computes it: still set on the next run = cancelled
    found = cached_result(name, key)
    if found is not None:
        st.session_state.pop(flag, None)
        return found
    if estimate_s <= gate_seconds():
        with st.spinner(f"{label}…"), one_at_a_time((name, key)):  # Streamlit shows it only after half a second
            found = cached_result(name, key)  # computed by another session while this one waited
            return found if found is not None else _kept(name, key, _value=compute(None))
    if st.session_state.get(flag) is not None:  # a run of this work was stopped before it ended
        where.warning(f"{label}: cancelled. Nothing was kept; the button starts it again.", icon=":material/cancel:")
        del st.session_state[flag]
    box = where.empty()  # the button, then the progress bar and Cancel in its place, then nothing
    clicked = box.button(f"{label} — {about(estimate_s)}", key=f"gate_{name}", icon=":material/play_arrow:",
                         help="Not computed as the page opens: this model would take "
                              f"{about(estimate_s)} on this server (estimated from its own measured speed). "
                              "A progress bar and a Cancel button follow the click; the result is kept.")
    if not clicked:
        return None
    with box.container():
        bar = st.progress(0.0, text=f"{label}: starting…")
        st.button("Cancel", key=f"gate_cancel_{name}", icon=":material/stop:")
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        left = (time.perf_counter() - started) * (total - done) / done if done else estimate_s
        bar.progress(min(1.0, done / max(1, total)),
                     text=f"{label}: {done:,} of {total:,} done, {about(left)} left")

    st.session_state[flag] = key
    try:
        value = compute(progress)
    except Exception:  # a failure, not a cancel (Streamlit's stop and rerun are BaseExceptions): nothing to say
        del st.session_state[flag]
        raise
    del st.session_state[flag]
    box.empty()
    return _kept(name, key, _value=value)


def combine(parts: list[tuple[int, Callable[[Progress | None], Any]]]) -> Callable[[Progress | None], list]:
    """One ``compute(progress)`` from several: ``parts`` are ``(weight, compute)``; the combined progress counts
    each part's share by its weight (e.g. its cells), so one bar covers them all."""
    total = sum(w for w, _ in parts)

    def run(progress: Progress | None) -> list:
        out, offset = [], 0
        for weight, part in parts:
            sub = None if progress is None else (
                lambda d, t, o=offset, w=weight: progress(o + round(w * d / max(1, t)), total))
            out.append(part(sub))
            offset += weight
            if progress is not None:
                progress(offset, total)
        return out

    return run
