"""Turns for the runs that show a class's new view: at most :data:`FOLLOW_RUNS` at once per server process.

When the teacher changes the view, every student of a replica reruns the same page within a fraction of a second
(the bell, :mod:`viz_ui.classroom.bell`). Streamlit runs each session's script in its own thread; 30–40 of them at
once on one process share the GIL and contend for Streamlit's internal locks (its config lock at every message,
py-spy), so that each run costs more CPU than a run alone, and every student sees the page only when nearly all are
done. Taking turns keeps the CPU per run low, and the students see the view one after another instead of all at the
end (a server with 30 students following, the teacher changing the head on the attention page: 1.9 → 0.9 s of
server CPU per change, p95 2.0 → 1.0 s).

A student's poll takes a turn before it applies a new view or reruns its page for a question: the rerun it asks
for runs in the same thread, so the turn covers it. The full run after a view was applied takes one too (a no-op in
the thread that holds one). A turn is given back when the thread ends. Only these runs wait: a teacher, a student
exploring alone and every other session run as they come. A run waits at most :data:`WAIT_S` seconds, then goes on
without a turn. It holds no other lock while it waits (it has drawn nothing and computed nothing yet), so waiting
cannot deadlock with the figure and result locks of :mod:`viz_ui.app.gate`.
"""

from __future__ import annotations

import os
import threading


def _follow_runs(default: int = 1) -> int:
    """``VIZ_CLASS_FOLLOW_RUNS`` (1–64, read at start-up): runs showing a new view at once per process."""
    try:
        value = int(os.environ.get("VIZ_CLASS_FOLLOW_RUNS", default))
    except ValueError:
        return default
    return value if 1 <= value <= 64 else default


FOLLOW_RUNS = _follow_runs()
WAIT_S = 10.0  # a run waits at most this long for its turn
HOLD_S = 60.0  # a turn is given back at the latest this long after it was taken (a thread that lives on)
_TURNS = threading.BoundedSemaphore(FOLLOW_RUNS)
_HOLDERS: set[int] = set()  # the threads holding a turn (a thread's next run, e.g. after st.rerun, keeps its turn)


def take_turn() -> bool:
    """Wait (up to :data:`WAIT_S`) until fewer than :data:`FOLLOW_RUNS` runs of this process hold a turn, then hold
    one until the calling thread (Streamlit's script thread of this run, which also runs the reruns this run asks
    for) ends. Returns whether the thread holds a turn."""
    runner = threading.current_thread()
    if runner.ident in _HOLDERS:
        return True
    if not _TURNS.acquire(timeout=WAIT_S):
        return False
    _HOLDERS.add(runner.ident)
    threading.Thread(target=_give_back, args=(runner,), name="viz-turn", daemon=True).start()
    return True


def _give_back(runner: threading.Thread) -> None:
    runner.join(timeout=HOLD_S)
    _HOLDERS.discard(runner.ident)
    _TURNS.release()


def held() -> int:
    """Turns held now (for tests and benchmarks)."""
    return FOLLOW_RUNS - _TURNS._value  # noqa: SLF001  (BoundedSemaphore keeps its count there)
