"""Streamlit's keyed widgets read one key of the session state, not a new dict of all of it.

**Problem.** Streamlit builds ``st.selectbox``, ``st.radio``, ``st.slider``, ``st.text_area``, ``st.text_input``,
``st.number_input`` and the date and time inputs with the same check: ``session_state = get_session_state().
filtered_state``, then ``key in session_state and session_state[key] is None`` (the widget is drawn empty). The
``filtered_state`` property makes a new dict of every key of the session with its shown value, through the
"presenter" of every component that has one (each live chart and the class bell), to read one key. On the attention
page, with its 9 keyed widgets and 8 components, that was a fifth of the script's time in Python (py-spy, ``--gil``),
in every run of every student's session in a class (``bench/class_live.py``); with this patch a rerun of the
attention page took 45.3-47.4 ms of server CPU instead of 50.6-56.0.

**Fix.** :func:`install` gives those widget modules (:data:`MODULES`) a ``get_session_state`` whose
``filtered_state`` answers ``in`` and ``[]`` for one key through the session state's own ``in`` and ``[]`` (the same
value: ``SessionState.__getitem__`` is what ``filtered_state`` calls for each key, presenter included); anything else
asked of it (iteration, length) is answered from the whole ``filtered_state``, as before.

**Checked on** Streamlit 1.67.0 (``tests/test_widget_state.py``: the widgets draw the same values through it).

**Upstream.** https://github.com/streamlit/streamlit/issues/9415 ("Exponential slowdown in Streamlit as the number
of widgets increases", from https://github.com/streamlit/streamlit/pull/8529, which added this check in 1.34) is
closed, but the widgets of 1.67 still build the whole ``filtered_state`` for it. An upstream issue would ask the
widgets to test ``key in session_state`` and read ``session_state[key]`` on the session state itself.

**Remove when** no module of :data:`MODULES` reads ``get_session_state().filtered_state`` any more (the check in
:func:`problems` then reports it): delete this module and its line in ``PATCHES`` (``__init__.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

from viz_ui.app.streamlit_patches import targets

MODULES = ("selectbox", "radio", "slider", "text_widgets", "number_input", "time_widgets")
PACKAGE = "streamlit.elements.widgets"
READ = "get_session_state().filtered_state"  # what each module does that this patch makes cheap


def problems() -> list[str]:
    """What of Streamlit's internals this patch replaces or reads is missing or changed (empty: all found)."""
    names = [f"{PACKAGE}.{name}.get_session_state" for name in MODULES]
    return (targets.missing(names + ["streamlit.runtime.state.SafeSessionState.__contains__",
                                     "streamlit.runtime.state.SafeSessionState.__getitem__",
                                     "streamlit.runtime.state.SafeSessionState.filtered_state"])
            + [line for name in MODULES for line in targets.not_in_source(f"{PACKAGE}.{name}", [READ])])


def installed() -> bool:
    """Whether every module of :data:`MODULES` reads the session state through this patch."""
    return all(getattr(targets.find(f"{PACKAGE}.{name}.get_session_state"), "_viz_one_key", False) for name in MODULES)


class OneKeyView:
    """What the widgets read of ``filtered_state``: ``key in view`` and ``view[key]`` for one key; the rest from the
    whole ``filtered_state`` (made only when asked)."""

    def __init__(self, state: Any) -> None:
        self._state = state

    def __contains__(self, key: object) -> bool:
        return key in self._state

    def __getitem__(self, key: str) -> Any:
        return self._state[key]

    def _whole(self) -> dict[str, Any]:
        return self._state.filtered_state

    def __iter__(self) -> Iterator[str]:
        return iter(self._whole())

    def __len__(self) -> int:
        return len(self._whole())

    def __getattr__(self, name: str) -> Any:  # get(), keys(), items(), values(), ...
        return getattr(self._whole(), name)


class _Session:
    """The session state as the widget modules see it: ``filtered_state`` is a :class:`OneKeyView`; every other
    attribute is the real one's."""

    def __init__(self, state: Any) -> None:
        self._state = state

    @property
    def filtered_state(self) -> OneKeyView:
        return OneKeyView(self._state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)


def install() -> None:
    """Patch :data:`MODULES` (``streamlit.elements.widgets.*``) once per process; idempotent. A module or name that
    is missing is skipped here and reported by :func:`problems`."""
    for name in MODULES:
        try:
            module = importlib.import_module(f"{PACKAGE}.{name}")
        except ImportError:
            continue
        original = getattr(module, "get_session_state", None)
        if original is None or getattr(original, "_viz_one_key", False):
            continue

        def get_session_state(_original=original) -> _Session:
            return _Session(_original())

        get_session_state._viz_one_key = True  # type: ignore[attr-defined]
        module.get_session_state = get_session_state
