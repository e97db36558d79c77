"""Have the browser fetch and compile Plotly's code while the server is still importing torch and running the model.

Charts are live charts (:mod:`viz_ui.app.live_chart`): they draw with the plotly package's own ``plotly.min.js``
(about 4.6 MB), which this module copies into the app's ``static/`` folder (:func:`live_chart_source`). Pages call
:func:`preload_plotly` first, before their heavy imports: the browser then fetches that file during the page's run
(the same promise a live chart awaits: ``plotly_loader.js``) instead of when the first chart arrives. A page opened
afresh still draws its first chart 0.2–1.0 s after its run ends (Chromium on 2 cores, bench/cold_start.py): the
browser's main thread evaluates Plotly's code, then mounts and draws the charts, one after another. Where live charts
cannot be served, figures fall back to ``st.plotly_chart``, and the preload loads Streamlit's own Plotly chunk
instead (:mod:`viz_ui.app.streamlit_patches.plotly_chunk`). This module imports nothing but Streamlit, plotly's package
root, the standard library and two modules of :mod:`viz_ui.app.streamlit_patches` (which import only Streamlit).
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import shutil
import tempfile
import threading
from pathlib import Path

import plotly
import streamlit as st

from viz_ui.app.streamlit_patches import plotly_chunk, recover

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "static"  # Streamlit serves the folder beside the main script (app.py) as app/static/
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
LOADER_JS = (Path(__file__).with_name("plotly_loader.js")).read_text(encoding="utf-8")
RECOVER_JS = recover.SCRIPT  # viz_ui/app/streamlit_patches/recover.js


def compact_js(code: str) -> str:
    """``code`` without its comment lines (a line that starts with ``//``) and without the indentation of each line:
    the same program for code whose template literals and strings each stay on one line (ours: the loader and the
    live chart). A Streamlit component's code travels inline in every one of its elements, at every run: the live
    chart's, 25 kB with its comments, went 7 times into every run of the attention page (every student's, in a
    class); 15 kB without them."""
    return "\n".join(line.strip() for line in code.splitlines() if line.strip() and not line.lstrip().startswith("//"))


# st.html passes its text through DOMPurify, which drops a script whose text holds "<" before a letter or "/" (as a
# comment's "<script>" would): the loader's code is sent without its comment lines (tests/test_timeline.py checks
# that no "<" is left).
LOADER_CODE = compact_js(LOADER_JS)
RECOVER_CODE = compact_js(RECOVER_JS)  # a page Streamlit's frontend can no longer draw loads itself again


def _install() -> str | None:
    """Copy plotly.min.js into :data:`STATIC` under a name with plotly's version (a new version is a new URL, so a
    browser never runs a cached older copy) unless it is there; its URL relative to the app's pages, or None."""
    name = f"plotly-{plotly.__version__}.min.js"
    target = STATIC / name
    try:
        if not target.is_file() or target.stat().st_size != PLOTLY_JS.stat().st_size:
            STATIC.mkdir(exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=STATIC, suffix=".part", delete=False) as tmp:
                with PLOTLY_JS.open("rb") as src:
                    shutil.copyfileobj(src, tmp)
            os.chmod(tmp.name, 0o644)
            os.replace(tmp.name, target)  # atomic: another session never serves half a file
    except OSError:
        return None
    return f"app/static/{name}"


_SOURCE: str | None | bool = False  # not looked at yet


def live_chart_source() -> str | None:
    """The URL (relative to the page) of Plotly's code for live charts, or None when this server cannot serve it
    (``server.enableStaticServing`` off, or the static folder not writable): then show figures with
    ``st.plotly_chart``."""
    global _SOURCE
    if not st.get_option("server.enableStaticServing"):
        return None
    if _SOURCE is False:
        _SOURCE = _install()
    return _SOURCE


def preload_plotly() -> None:
    """Start loading Plotly's code in the browser: the live charts' ``plotly.min.js`` (:func:`live_chart_source`),
    through the loader the live charts use, so that the first chart finds it loaded or under way; where live charts
    are not served, Streamlit's Plotly chunk (a module ``import()`` next to Streamlit's main bundle, so an app served
    under a base path works too). A failure is ignored: the first chart loads the code then.

    Drawn on every run, so the page's elements keep their places (an element present only on a session's first
    run shifted every later one, and the old ones lingered during the next rerun); the browser loads the code once
    per tab, and an unchanged element is not re-run. The same script installs ``recover.js``: a page that Streamlit's
    frontend can no longer draw (its "Bad delta path index" error, which leaves the tab blank) loads itself again
    (:mod:`viz_ui.app.streamlit_patches.recover`)."""
    src = live_chart_source()
    if src is not None:
        load = f"{LOADER_CODE}\nloadPlotly({json.dumps(src)}).catch(() => {{}});"
    else:  # Streamlit's own Plotly chunk, next to its main bundle (viz_ui/app/streamlit_patches/plotly_chunk.py)
        load = plotly_chunk.preload_script()
    st.html(f"<script>{RECOVER_CODE}\n(() => {{\n{load}\n}})();</script>", unsafe_allow_javascript=True)
    _import_once()


_IMPORTS = threading.Lock()
_IMPORTED = False


def _import_once() -> None:
    """Import every ``viz_ui`` module (and through them torch and ``viz_model``) once, in one thread, in a fixed
    order. Sessions run in threads of their own: when a class opened several pages of a freshly started server
    at once, two threads importing the same modules in different orders could each wait for a module the other
    was importing, and Python's deadlock escape handed one of them a half-initialised module ("cannot import
    name 'require_trace' from 'viz_ui.app.layout'", bench/class_load.py --cold). After the first page, a no-op."""
    global _IMPORTED
    if _IMPORTED:
        return
    with _IMPORTS:
        if not _IMPORTED:
            import viz_ui
            modules = [m.name for m in pkgutil.walk_packages(viz_ui.__path__, "viz_ui.") if not m.ispkg]
            for name in sorted(modules, key=lambda name: name != "viz_ui.app.layout"):
                importlib.import_module(name)
            _IMPORTED = True
