"""What every job run in a daemon thread of a shared server shares: cooperative cancellation and waiting
(:class:`BackgroundJob`), and a torch thread count of the job's own (:func:`limit_threads`). Used by the Train your
own page's trainings (:mod:`viz_model.training.live`) and the dictionary trainings (:mod:`viz_model.features.job`).

Threads: ``torch.set_num_threads`` looks process-global, but with torch's OpenMP backend (the Linux and Windows
CPU builds; ``torch.__config__.parallel_info()``) it sets the calling thread's OpenMP and MKL thread count and
the default that threads *started later* take on their first parallel operation. A job's thread therefore
sets its own count, then a short helper thread sets the default back to what it was when this module was
imported, under a lock: a job uses ``VIZ_TRAIN_THREADS`` threads, and the server's other threads
(Streamlit starts one per script run) keep theirs (tests/test_live.py checks both).
"""

from __future__ import annotations

import threading

import torch

# torch.set_num_threads in a thread also sets the default of threads started later: see the module docstring
_PROCESS_THREADS = torch.get_num_threads()
_THREADS_LOCK = threading.Lock()


def limit_threads(n: int) -> None:
    """Run torch on ``n`` threads in the calling thread only (see the module docstring)."""
    with _THREADS_LOCK:
        torch.get_num_threads()  # this thread's lazy initialisation first: it would reset the count later
        torch.set_num_threads(n)
        helper = threading.Thread(target=torch.set_num_threads, args=(_PROCESS_THREADS,), name="viz-threads-reset")
        helper.start()
        helper.join()


class BackgroundJob:
    """What every job run in a daemon thread shares (:class:`viz_model.training.live.TrainJob`,
    :class:`viz_model.features.job.DictionaryJob`): the subclass starts ``_thread``, sets ``_ended`` when the work is
    over whatever happened, and checks ``_stop`` between steps (cooperative cancellation)."""

    _stop: threading.Event
    _ended: threading.Event
    _thread: threading.Thread

    def cancel(self) -> None:
        """Ask the job to stop before its next step (what it has done so far is kept)."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the job has ended; return whether it has."""
        return self._ended.wait(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._ended.is_set()
