"""A fragment rerun asked for on a page the session has left is dropped (a timed one) or becomes a full rerun of the
page the session shows.

**Problem.** A browser's fragment rerun request names the page the browser shows. When it reaches the server while
the script switches page (a student's class poll, itself a fragment run, applies the teacher's view with
``st.switch_page``), Streamlit queues it and runs it just after the new page's full run. Run on the page the request
named, the session's page went back to the old one for that fragment run, and the browser, told by the run's
``new_session`` that the page changed, cleared the new page's elements, then got the fragment's elements at their
place in the new page and threw ("Bad delta path index 2 (should be between [0, 0])"): a blank page
(``tests/test_class_browser.py``, 2 runs in 5 when students followed fast). Run on the current page instead, it still
threw under CPU load ("Bad delta path index 3 (should be between [0, 2])"; 3 of 6 such runs in 40 page changes,
2026-11-28): its ``new_session`` reaches the browser a few milliseconds after the full run's, and Streamlit's
frontend compares the fragment run's page with the page it holds in React state, which a busy browser has not yet
updated from the full run's message; it then clears the page it has just been sent, mid-way.

**Fix.** :func:`install` wraps ``ScriptRunner._run_script`` so that it never runs a fragment on a page the session
has left (:func:`from_page_left`): a timed rerun (a poll's timer) is dropped, since it brings no change of its own
and the new page's full run has just run the same fragment inline (and registered its timer again); any other (the
class bell's ring, a click in a fragment: its widget states may be a change) becomes a full rerun of the current page
with the current query string, which the browser draws from an empty page whatever page it thinks it shows. The race
script then crashed 0 times in 40 page changes (was 3).

**Checked on** Streamlit 1.67.0 (``tests/test_rerun_order.py``, ``tests/test_class_browser.py``).

**Upstream.** No issue for this path was found in Streamlit's tracker. Related: https://github.com/streamlit/streamlit/pull/9617
(merged in 2024: the frontend clears fragment timers when the page changes, after a "Bad 'setIn' index" crash;
a request already on its way is not covered) and https://github.com/streamlit/streamlit/issues/15084 (closed by
https://github.com/streamlit/streamlit/pull/15130: a stale ``run_every`` rerun of a nested fragment crashed the app
to a white screen). An upstream issue would ask the server to drop a timed fragment rerun whose
``page_script_hash`` is not the session's current page, and to run any other such request as a full rerun.

**Remove when** Streamlit no longer runs a fragment rerun on a page the session has left: delete this module and
its line in ``PATCHES`` (``__init__.py``), then run ``tests/test_class_browser.py`` several times (it fails on any
frontend error) and ``bench/class_live.py``.
"""

from __future__ import annotations

from dataclasses import replace

from streamlit.runtime.scriptrunner.script_runner import ScriptRunner
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData

from viz_ui.app.streamlit_patches import targets

TARGET = "streamlit.runtime.scriptrunner.script_runner.ScriptRunner._run_script"


def problems() -> list[str]:
    """What of Streamlit's internals this patch replaces or reads is missing or changed (empty: all found)."""
    return (targets.missing([TARGET, "streamlit.runtime.pages_manager.PagesManager.current_page_script_hash",
                             "streamlit.runtime.scriptrunner_utils.script_run_context.get_script_run_ctx"])
            + targets.parameters_differ(TARGET, ["self", "rerun_data"])
            + targets.not_in_source("streamlit.runtime.scriptrunner.script_runner.ScriptRunner",
                                    ["self._pages_manager"])
            + targets.not_in_source("streamlit.runtime.scriptrunner_utils.script_run_context.ScriptRunContext",
                                    ["query_string"])
            + targets.fields_missing("streamlit.runtime.scriptrunner_utils.script_requests.RerunData",
                                     ["fragment_id", "fragment_id_queue", "is_auto_rerun", "page_script_hash",
                                      "page_name", "is_fragment_scoped_rerun", "query_string"]))


def is_fragment_rerun(rerun_data: RerunData) -> bool:
    """Whether ``rerun_data`` reruns fragments only (not the whole page)."""
    return bool(rerun_data.fragment_id or rerun_data.fragment_id_queue)


def from_page_left(rerun_data: RerunData, current_page: str, current_query: str = "") -> RerunData | None:
    """``rerun_data`` to run now in a session showing ``current_page`` (a page script hash, "" before the first run)
    with the query string ``current_query`` ("" when not known). A fragment rerun that names another page: None (not
    run) when it is a timed rerun (``is_auto_rerun``), else a full rerun of the current page (no page name, no
    fragments, the current query string when known, the request's widget states). Anything else is unchanged."""
    if is_fragment_rerun(rerun_data) and current_page and rerun_data.page_script_hash not in ("", current_page):
        if rerun_data.is_auto_rerun:
            return None
        return replace(rerun_data, page_script_hash=current_page, page_name="", fragment_id=None,
                       fragment_id_queue=[], is_fragment_scoped_rerun=False,
                       query_string=current_query or rerun_data.query_string)
    return rerun_data


def installed() -> bool:
    """Whether ``ScriptRunner._run_script`` is this module's."""
    return getattr(ScriptRunner._run_script, "_viz_page_left", False)


def install() -> None:
    """Wrap ``ScriptRunner._run_script`` once per process (later calls do nothing)."""
    if installed():
        return
    original = ScriptRunner._run_script

    def run_script(self: ScriptRunner, rerun_data: RerunData) -> None:
        pages = getattr(self, "_pages_manager", None)
        current = getattr(pages, "current_page_script_hash", "") or ""
        ctx = get_script_run_ctx(suppress_warning=True)  # this runner's thread: the last run's query string, or ""
        data = from_page_left(rerun_data, current, getattr(ctx, "query_string", "") or "")
        return None if data is None else original(self, data)

    run_script._viz_page_left = True
    run_script.__doc__ = original.__doc__
    run_script.__wrapped__ = original  # the checks in problems() read Streamlit's own source through it
    ScriptRunner._run_script = run_script
