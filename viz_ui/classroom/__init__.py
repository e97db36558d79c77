"""Class mode: a teacher leads, students follow on their own screens and answer (docs/classroom.md).

``class_store()`` is this process's ``ClassStore``: Redis at ``VIZ_CLASS_STORE`` (``redis://host:port/db``) when
set, so that every app replica behind a load balancer sees the same classes, else one in-process store shared by
the sessions of this server.
"""

from __future__ import annotations

import functools
import os

from viz_ui.classroom.memory_store import MemoryClassStore
from viz_ui.classroom.redis_store import RedisClassStore
from viz_ui.classroom.store import ClassStore, ClassStoreUnavailable

__all__ = ["ClassStore", "ClassStoreUnavailable", "MemoryClassStore", "RedisClassStore", "class_store"]


@functools.lru_cache(maxsize=4)
def _store_for(url: str) -> ClassStore:
    if not url:
        return MemoryClassStore()
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("VIZ_CLASS_STORE must be a Redis URL such as redis://127.0.0.1:6379/0, or unset")
    return RedisClassStore(url)


def class_store() -> ClassStore:
    """This process's store (one per setting, shared by every session): ``RedisClassStore`` at
    ``VIZ_CLASS_STORE`` when set, else a ``MemoryClassStore``. Raises ``ValueError`` for a setting that is not a
    Redis URL."""
    return _store_for(os.environ.get("VIZ_CLASS_STORE", "").strip())
