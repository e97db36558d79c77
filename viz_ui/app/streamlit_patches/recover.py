"""A page that Streamlit's frontend can no longer draw loads its address again (``recover.js``).

**Problem.** Streamlit's frontend throws "Bad delta path index N (should be between [0, M])" when a run's element
arrives for a place the page has just cleared; React then unmounts the whole app, the tab stays blank and its
websocket is closed. Seen on a following student's screen under load (a fragment run's ``new_session`` before the
frontend had taken the new page into its state); :mod:`.fragment_from_page_left` closes that path, and
:mod:`.fragment_after_stop` the one that dropped the end of a page.

**Fix.** ``recover.js`` (sent by :func:`viz_ui.app.preload.preload_plotly` in the script every page draws first)
listens for uncaught errors and, on one whose message contains :data:`PHRASE`, loads the page's address again: the
address holds the view (and a class's code), so the same view comes back. At most once in 10 s, so that a page that
fails at once is never reloaded in a loop; any other error is left alone. This leans on a frontend internal: the
wording of an error message, which :func:`problems` looks for in Streamlit's built frontend.

**Checked on** Streamlit 1.67.0 (``tests/test_browser.py``: ``test_a_page_the_frontend_can_no_longer_draw_loads_
itself_again``).

**Upstream.** No issue for this crash path was found. Related: https://github.com/streamlit/streamlit/issues/3788
(closed: the same class of error under its older wording, "Bad 'setIn' index") and
https://github.com/streamlit/streamlit/issues/15084 (closed: a white screen after a stale fragment rerun). An upstream
issue would ask the frontend to recover from an element sent for a place it has cleared (ask for a full rerun)
instead of unmounting the app.

**Remove when** Streamlit's frontend no longer leaves a blank tab on that error, or when the two patches named above
are gone and ``tests/test_class_browser.py`` shows no page error under load: delete this module, ``recover.js``, its
line in ``PATCHES`` (``__init__.py``), its use in ``viz_ui/app/preload.py`` and its browser test.
"""

from __future__ import annotations

from pathlib import Path

from viz_ui.app.streamlit_patches import targets

PHRASE = "Bad delta path index"  # the start of the message of Streamlit's frontend that recover.js waits for
SCRIPT = (Path(__file__).with_name("recover.js")).read_text(encoding="utf-8")


def problems() -> list[str]:
    """Empty when Streamlit's built frontend still throws the error ``recover.js`` waits for."""
    found = [] if PHRASE in SCRIPT else [f"recover.js no longer waits for {PHRASE!r}"]
    bundles = sorted((targets.streamlit_static() / "static" / "js").glob("index.*.js"))
    if not any(PHRASE in path.read_text(encoding="utf-8", errors="replace") for path in bundles):
        found.append(f"Streamlit's frontend (static/js/index.*.js) no longer throws {PHRASE!r}: recover.js would "
                     "wait for an error that never comes")
    return found
