"""A custom component's value is shown through one class, not a class made anew at every read.

**Problem.** Streamlit (``streamlit/components/v2/presentation.py``) shows the value of a custom component (each
live chart, the class bell, the step scrubber) in ``st.session_state`` through a "presenter" that defines a class,
``_WriteThrough`` (a ``dict`` whose writes go back to the component's state), inside the function, so every read of
the value builds a new class: a type, its seven methods and their closures, about 30 objects in a reference cycle
that only Python's cyclic garbage collector frees. Streamlit reads every component's value at the start of every
run (``SessionState._compact_state``) and again when the component is drawn. With a class of 100 students following
their teacher on 3 replicas (``bench/class_live.py``), almost all of a replica's cyclic garbage was these classes
(about 1,000 of them, 31,000 objects, in one collection), and the collector's time was about a seventh of the
replica's CPU, in pauses of 70-120 ms (full collections) that stop every session of the replica.

**Fix.** :func:`install` replaces the presenter factory that Streamlit's component module calls
(``make_bidi_component_presenter`` in :data:`TARGET`) with :func:`presenter`: the same merge of the component's state
with its trigger values, the same write-through ``dict`` (:class:`WriteThrough`, defined once), the same refusal to
change a component's state after it was drawn in the run. Adapted from Streamlit's ``make_bidi_component_presenter``
(Apache License 2.0, Copyright Snowflake Inc.): since this is a copy, :func:`problems` also compares a fingerprint of
Streamlit's function with :data:`COPIED_FROM`, the one read, so that a change upstream is looked at, not missed.
One collection of a class replica then held about 500 objects instead of 31,000.

**Checked on** Streamlit 1.67.0 (``tests/test_presenter.py``: the same values, errors and write-backs as
Streamlit's own presenter, and one class).

**Upstream.** No issue or pull request was found in Streamlit's tracker. An upstream issue would ask that
``_WriteThrough`` be defined once at module level in ``streamlit/components/v2/presentation.py`` (its callbacks
passed in, as here), so that reading a component's value leaves no reference cycle.

**Remove when** Streamlit's presenter no longer defines a class per call (the fingerprint check reports any change
to it: read the new code, then either update this copy and :data:`COPIED_FROM`, or delete this module and its line
in ``PATCHES`` (``__init__.py``) and ``tests/test_presenter.py``).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Callable

from streamlit.errors import StreamlitAPIException
from streamlit.runtime.scriptrunner import get_script_run_ctx

from viz_ui.app.streamlit_patches import targets

_LOGGER = logging.getLogger(__name__)
TARGET = "streamlit.components.v2.bidi_component.main"  # the module that calls make_bidi_component_presenter
ORIGINAL = "streamlit.components.v2.presentation.make_bidi_component_presenter"  # the function copied here
COPIED_FROM = "b9bef4bdbffc6838"  # targets.fingerprint of ORIGINAL's source in Streamlit 1.67.0


def problems() -> list[str]:
    """What of Streamlit's internals this patch replaces or reads is missing or changed (empty: all found)."""
    found = targets.missing([f"{TARGET}.make_bidi_component_presenter", ORIGINAL,
                             "streamlit.runtime.state.session_state.SessionState._new_widget_state",
                             "streamlit.runtime.state.session_state.SessionState._key_id_mapper",
                             "streamlit.runtime.scriptrunner_utils.shared_run_state.SharedRunState"])
    found += targets.parameters_differ(ORIGINAL, ["aggregator_id", "component_id", "allowed_state_keys"])
    found += targets.not_in_source("streamlit.runtime.scriptrunner_utils.shared_run_state.SharedRunState",
                                   ["widget_ids_this_run", "form_ids_this_run"])
    source = targets.unwrapped_source(ORIGINAL)
    if source and targets.fingerprint(source) != COPIED_FROM:
        found.append(f"{ORIGINAL} changed since presenter.py copied it (fingerprint "
                     f"{targets.fingerprint(source)}, was {COPIED_FROM}): compare the two and update the copy")
    return found


def installed() -> bool:
    """Whether Streamlit's component module calls :func:`presenter`."""
    return getattr(targets.find(TARGET), "make_bidi_component_presenter", None) is presenter


class WriteThrough(dict):
    """A component's shown value: a ``dict`` read also by attribute (a missing name reads None); a write or a delete
    of a key checks that the component was not drawn yet in this run (``check(key)`` raises
    ``StreamlitAPIException``), ignores a key outside ``allowed`` (when given) and stores the whole dict back in the
    component's state (``persist(dict)``). ``copy.deepcopy`` returns the same object, as Streamlit's does; ``copy.copy`` a new one with the same callbacks.
    Pickled, it is the plain ``dict`` it shows."""

    def __init__(self, data: dict, check: Callable[[str], None], persist: Callable[[dict], None],
                 allowed: set[str] | None) -> None:
        super().__init__(data)
        object.__setattr__(self, "_check", check)
        object.__setattr__(self, "_persist", persist)
        object.__setattr__(self, "_allowed", allowed)

    def __getattr__(self, name: str) -> object:
        return self.get(name)

    def __setattr__(self, name: str, value: object) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self[name] = value

    def __copy__(self) -> WriteThrough:
        return WriteThrough(dict(self), self._check, self._persist, self._allowed)

    def __reduce__(self):  # pickled as the plain dict it shows (its callbacks belong to the running session)
        return dict, (dict(self),)

    def __deepcopy__(self, memo: dict[int, Any]) -> WriteThrough:
        memo[id(self)] = self
        return self

    def __setitem__(self, key: str, value: object) -> None:
        self._check(key)
        if self._allowed is not None and key not in self._allowed:
            return
        super().__setitem__(key, value)
        self._persist(dict(self))

    def __delitem__(self, key: str) -> None:
        self._check(key)
        super().__delitem__(key)
        self._persist(dict(self))


def presenter(aggregator_id: str, component_id: str | None = None, allowed_state_keys: set[str] | None = None):
    """A presenter for the component ``component_id`` whose trigger values are in the widget ``aggregator_id``:
    ``present(base_value, session_state)`` returns ``base_value`` merged over the triggers' latest values as a
    :class:`WriteThrough`, or ``base_value`` itself when it is not a dict or there are no trigger values to merge
    (exactly as Streamlit 1.67's ``make_bidi_component_presenter``)."""
    def present(base_value: object, session_state) -> object:
        if not isinstance(base_value, dict):
            return base_value

        def check(key: str) -> None:
            ctx = get_script_run_ctx()
            if ctx is not None and component_id is not None:
                user_key = session_state._key_id_mapper.get_key_from_id(component_id)
                if component_id in ctx.shared.widget_ids_this_run or user_key in ctx.shared.form_ids_this_run:
                    raise StreamlitAPIException(
                        f"`st.session_state.{user_key}.{key}` cannot be modified after the component"
                        f" with key `{user_key}` is instantiated.",
                        error_id="bidi-component-state-cannot-be-modified")

        def persist(value: dict) -> None:
            try:
                if component_id is not None:
                    session_state._new_widget_state.set_from_value(component_id, value)
            except Exception as exc:  # as Streamlit: a failed write-back is logged, not raised
                _LOGGER.debug("Failed to persist CCv2 state update: %s", exc)

        try:
            meta = session_state._new_widget_state.widget_metadata.get(aggregator_id)
            if meta is None or meta.value_type != "json_trigger_value":
                return base_value
            try:
                payloads = session_state._new_widget_state[aggregator_id]
            except KeyError:
                payloads = None
            if isinstance(payloads, dict):
                payloads = [payloads]
            flat: dict[str, object] = {}
            if isinstance(payloads, list):
                for payload in payloads:
                    if isinstance(payload, dict) and isinstance(payload.get("event"), str):
                        flat[payload["event"]] = payload.get("value")
            flat.update(base_value)
            return WriteThrough(flat, check, persist, allowed_state_keys)
        except Exception as exc:  # as Streamlit: the stored value is shown when the merge fails
            _LOGGER.debug("Failed to merge trigger events into component state: %s", exc, exc_info=exc)
            return base_value

    return present


def install() -> bool:
    """Make Streamlit's component module use :func:`presenter` (once per process; idempotent). Returns whether it
    is in place."""
    try:
        module = importlib.import_module(TARGET)
    except ImportError:
        return False
    if getattr(module, "make_bidi_component_presenter", None) is presenter:
        return True
    if not hasattr(module, "make_bidi_component_presenter"):
        return False
    module.make_bidi_component_presenter = presenter
    return True
