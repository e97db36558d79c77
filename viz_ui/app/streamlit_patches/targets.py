"""Checks that what a patch replaces or reads is still in the installed Streamlit.

Each patch module of this package has a ``problems()`` function built from these checks: it returns one line per
name that is missing or changed (empty when the patch finds everything it was written against), and
:func:`viz_ui.app.streamlit_patches.install` reports those lines instead of letting a patch silently do nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
from collections.abc import Iterable
from pathlib import Path


def find(dotted: str) -> object | None:
    """The object named ``dotted`` ("package.module.Class.attribute"), or None when any part of it is missing.
    The longest importable prefix is the module; the rest are attributes."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            try:
                obj = getattr(obj, name)
            except AttributeError:
                return None
        return obj
    return None


def missing(names: Iterable[str]) -> list[str]:
    """``"<name> is gone"`` for each dotted name in ``names`` that :func:`find` cannot find."""
    return [f"{name} is gone" for name in names if find(name) is None]


def parameters_differ(dotted: str, expected: list[str]) -> list[str]:
    """A line when the function ``dotted`` exists and its parameters are not ``expected`` (names, in order)."""
    func = find(dotted)
    if func is None:
        return []  # reported by missing()
    got = list(inspect.signature(inspect.unwrap(func)).parameters)
    return [] if got == expected else [f"{dotted} now takes ({', '.join(got)}), not ({', '.join(expected)})"]


def unwrapped_source(dotted: str) -> str:
    """The source of ``dotted`` as Streamlit wrote it (under any wrapper of ours that keeps ``__wrapped__``)."""
    obj = find(dotted)
    return inspect.getsource(inspect.unwrap(obj)) if obj is not None else ""


def not_in_source(dotted: str, fragments: Iterable[str]) -> list[str]:
    """A line for each text of ``fragments`` that the source of ``dotted`` (a class, function or module) no longer
    contains: the attributes and code a patch reads but cannot look up on the class itself (set per instance)."""
    if find(dotted) is None:
        return []  # reported by missing()
    source = unwrapped_source(dotted)
    return [f"{dotted} no longer contains `{text}`" for text in fragments if text not in source]


def fields_missing(dotted: str, fields: Iterable[str]) -> list[str]:
    """A line for each field of ``fields`` that the dataclass ``dotted`` lacks."""
    cls = find(dotted)
    if cls is None:
        return []
    have = {f.name for f in dataclasses.fields(cls)}
    return [f"{dotted} has no field {name}" for name in fields if name not in have]


def fingerprint(text: str) -> str:
    """The first 16 hex digits of the SHA-256 of ``text``: a copied function's source as it was when we read it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def streamlit_static() -> Path:
    """The folder of Streamlit's built frontend (``index.html`` and ``static/js/``)."""
    import streamlit

    return Path(streamlit.__file__).parent / "static"
