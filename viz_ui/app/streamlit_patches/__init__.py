"""Every replacement of a Streamlit internal, and every reliance on Streamlit's frontend internals, in one place.

The app replaces a few of Streamlit's private functions to fix races and costs seen in class mode, and leans on two
details of Streamlit's built frontend. Each lives in one module of this package, whose docstring gives the problem,
the fix, the Streamlit version it was checked on, the upstream issue and when the module can go
(``docs/streamlit-patches.md`` is the guide):

- :mod:`.fragment_after_stop`: a fragment rerun waits for a stopped ScriptRunner's last messages
  (``AppSession._create_scriptrunner``);
- :mod:`.fragment_from_page_left`: a fragment rerun asked on a page the session has left is dropped or becomes a full
  rerun (``ScriptRunner._run_script``);
- :mod:`.widget_state`: keyed widgets read one key of the session state (``get_session_state`` of six widget
  modules);
- :mod:`.presenter`: a custom component's value is shown through one class (``make_bidi_component_presenter``);
- :mod:`.recover`: a page the frontend can no longer draw loads itself again (the wording of a frontend error);
- :mod:`.plotly_chunk`: Streamlit's Plotly chunk is preloaded where live charts are not served (a bundle file name).

:func:`install` puts the Python patches in place, once per process; the app calls it once, first thing in
:func:`viz_ui.app.page.open_page`. Importing this package changes nothing in Streamlit.

They were written against and checked on Streamlit 1.67 (:data:`CHECKED_ON`); ``requirements.txt`` pins
``streamlit==1.67.*``. Where the installed Streamlit is another release, or a patch does not find what it replaces or
reads, :func:`install` logs one error naming each problem and this package (the app keeps working, without the
patches that cannot apply), ``tests/test_streamlit_pin.py`` fails, and ``python -m viz_ui.app.streamlit_patches``
lists the problems (exit status 1).
"""

from __future__ import annotations

import logging
import threading

import streamlit

from viz_ui.app.streamlit_patches import (fragment_after_stop, fragment_from_page_left, plotly_chunk, presenter,
                                          recover, widget_state)

CHECKED_ON = "1.67.0"  # the Streamlit release every patch here was read against and tested on
SERIES = (1, 67)  # the releases the patches accept: 1.67.* (requirements.txt pins the same)
HOME = "viz_ui/app/streamlit_patches/"  # where a maintainer looks (and docs/streamlit-patches.md)
PATCHES = (fragment_after_stop, fragment_from_page_left, widget_state, presenter, recover, plotly_chunk)
_LOGGER = logging.getLogger(__name__)
_LOCK = threading.Lock()
_FOUND: list[str] | None = None  # the problems install() found (None: not installed yet)


def version_problem(version: str | None = None) -> str | None:
    """A line saying that Streamlit ``version`` (default: the installed one) is outside the release series the
    patches were checked on, or None when it is inside."""
    version = version or streamlit.__version__
    try:
        series = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        series = None
    if series == SERIES:
        return None
    return (f"Streamlit {version} is installed, but the patches in {HOME} were checked on "
            f"{'.'.join(map(str, SERIES))}.* ({CHECKED_ON}); install the pinned release (requirements.txt) or check "
            "each patch against this one (docs/streamlit-patches.md)")


def problems() -> list[str]:
    """Every reason a patch of this package may not work on the installed Streamlit, one line each, naming the
    module (empty when the installed Streamlit is the checked series and every patch finds what it relies on)."""
    found = [line for line in [version_problem()] if line]
    for module in PATCHES:
        name = module.__name__.rpartition(".")[2]
        found += [f"{HOME}{name}.py: {line}" for line in module.problems()]
    return found


def _message(found: list[str]) -> str:
    return ("Streamlit patches: " + "; ".join(found) + f". See {HOME} and docs/streamlit-patches.md.")


def installed() -> dict[str, bool]:
    """For each Python patch (a module with ``install``), whether it is in place in this process."""
    return {module.__name__.rpartition(".")[2]: module.installed() for module in PATCHES if hasattr(module, "install")}


def install() -> list[str]:
    """Put every Python patch in place, once per process (later calls return at once; safe from several sessions'
    threads). Returns the problems found at the first call (see :func:`problems`), which are also logged once as one
    error; a patch that does not find what it replaces is skipped, never half applied."""
    global _FOUND
    if _FOUND is not None:
        return _FOUND
    with _LOCK:
        if _FOUND is None:
            found = problems()
            broken = {line.split(":", 1)[0] for line in found}
            for module in PATCHES:
                if hasattr(module, "install") and f"{HOME}{module.__name__.rpartition('.')[2]}.py" not in broken:
                    module.install()
            if found:
                _LOGGER.error(_message(found))
            _FOUND = found
    return _FOUND
