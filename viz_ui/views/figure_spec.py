"""A figure given as its builder and arguments, named by a digest of their content.

A class of 100 students following one teacher runs the same page 100 times on the same numbers: each run built the
same Plotly figures and wrote the same JSON (bench/class_live.py: about half of a student's page run on the
attention page). A :class:`FigureSpec` names a figure by what it is built from, so the page's live charts
(:mod:`viz_ui.app.live_chart`) build and write it once per server and send the same text to every session that asks
for the same figure, and to the same session when a rerun leaves it unchanged.

The builder must be a pure function of its arguments (a function of :mod:`viz_ui.views`: numbers, labels and display
settings in, a new figure out). Arguments are digested by content: numpy arrays (dtype, shape and bytes), strings,
numbers, None, lists, tuples, dicts and dataclasses of these. Anything else (an object array, a model, a function)
gives no digest: the figure is then built at every run, as any other figure.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go


class _Undigestible(TypeError):
    """An argument whose content this module cannot digest."""


def _feed(h, value: Any) -> None:
    """Feed ``value``'s type and content into the hash ``h`` (``hashlib`` object); raises :class:`_Undigestible`."""
    if value is None or isinstance(value, (bool, int, float, str, np.generic)):
        h.update(f"{type(value).__name__}:{value!r};".encode("utf-8", "surrogatepass"))
    elif isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise _Undigestible("an object array")
        h.update(f"nd:{value.dtype.str}:{value.shape};".encode())
        h.update(np.ascontiguousarray(value).data)
    elif isinstance(value, (list, tuple)):
        h.update(f"{type(value).__name__}:{len(value)};".encode())
        if value and all(type(v) is str for v in value):  # token labels: one update, each item's length first
            h.update("".join(f"{len(v)}:{v}" for v in value).encode("utf-8", "surrogatepass"))
        else:
            for v in value:
                _feed(h, v)
    elif isinstance(value, Mapping):
        h.update(f"dict:{len(value)};".encode())
        for k in sorted(value, key=repr):
            _feed(h, k)
            _feed(h, value[k])
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        h.update(f"dc:{type(value).__module__}.{type(value).__qualname__};".encode())
        for f in dataclasses.fields(value):
            _feed(h, f.name)
            _feed(h, getattr(value, f.name))
    else:
        raise _Undigestible(type(value).__name__)


def digest(build: Callable, args: tuple, kwargs: Mapping) -> str | None:
    """A hex digest (BLAKE2b, 128 bits) of ``build``'s module and name and of the content of ``args`` and
    ``kwargs``; None when an argument cannot be digested (see the module's docstring)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{build.__module__}.{build.__qualname__};".encode())
    try:
        _feed(h, tuple(args))
        _feed(h, dict(kwargs))
    except _Undigestible:
        return None
    return h.hexdigest()


class FigureSpec:
    """``build(*args, **kwargs)``, a figure not built yet. ``key``: the digest of the builder and its arguments
    (:func:`digest`; None: not digestible), computed once; ``figure()`` builds a new figure at every call."""

    def __init__(self, build: Callable[..., go.Figure], *args, **kwargs):
        self.build, self.args, self.kwargs = build, args, kwargs

    @functools.cached_property
    def key(self) -> str | None:
        return digest(self.build, self.args, self.kwargs)

    def figure(self) -> go.Figure:
        return self.build(*self.args, **self.kwargs)

    def __repr__(self) -> str:
        return f"FigureSpec({self.build.__qualname__}, key={self.key})"
