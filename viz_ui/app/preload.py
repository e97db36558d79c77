"""Have the browser fetch and compile Plotly's code while the server is still importing torch.

Streamlit loads its Plotly chunk (PlotlyChart.*.js, ~3.5 MB) only when the first chart arrives, so on a cold
start the browser sat idle while the server imported torch and ran the model, then spent another 1–1.5 s on
the chunk before drawing (bench/cold_start.py). Pages call :func:`preload_plotly` before their heavy imports.
This module imports nothing but Streamlit.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from pathlib import Path

import streamlit as st

# Streamlit's own static files; the name is hashed per release. If a release renames or drops the chunk,
# nothing is preloaded and the charts load as before.
_CHUNKS = sorted((Path(st.__file__).parent / "static" / "static" / "js").glob("PlotlyChart.*.js"))
PLOTLY_CHUNK: str | None = _CHUNKS[0].name if len(_CHUNKS) == 1 else None


def preload_plotly() -> None:
    """Start loading Streamlit's Plotly chunk in the browser: a module ``import()`` next to Streamlit's main
    bundle, so an app served under a base path works too; a failure is ignored (the first chart loads it then).

    Drawn on every run, so the page's elements keep their places (an element present only on a session's first
    run shifted every later one, and the old ones lingered during the next rerun); the browser imports a
    module once, and an unchanged element is not re-run."""
    if PLOTLY_CHUNK is not None:  # next to Streamlit's own bundle, wherever the app is served from
        st.html("<script>{const b = document.querySelector('script[type=module][src*=\"/static/js/\"]');"
                f"import(new URL(b ? '{PLOTLY_CHUNK}' : './static/js/{PLOTLY_CHUNK}', b ? b.src : document.baseURI)"
                ".href).catch(() => {});}</script>", unsafe_allow_javascript=True)
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
