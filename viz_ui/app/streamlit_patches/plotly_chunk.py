"""Streamlit's own Plotly code (a chunk of its frontend bundle) is loaded while a page's script still runs.

**Problem.** Where live charts cannot be served (``server.enableStaticServing`` off, or the app's ``static/``
folder not writable), figures are drawn with ``st.plotly_chart``, whose Plotly code is a separate chunk of Streamlit's
frontend (``static/js/PlotlyChart.<hash>.js``, 4.7 MB in 1.67.0) that the browser fetches only when the first chart
arrives, after the page's run has imported torch and run the model: the first chart then waits for that download and
its compilation.

**Fix.** :func:`preload_script` gives the JavaScript that :func:`viz_ui.app.preload.preload_plotly` sends first on
every page: a module ``import()`` of that chunk, resolved next to Streamlit's main bundle (the ``<script
type="module" src=".../static/js/index.<hash>.js">`` of Streamlit's ``index.html``), so that an app served under a
base path works too. This leans on two frontend internals: the chunk's file name and where the main bundle lives,
both checked by :func:`problems`. A failed import is ignored: the first chart then loads the code as before.

**Checked on** Streamlit 1.67.0 (the chunk's name and the main bundle's place: ``tests/test_streamlit_pin.py``;
the browser tests serve live charts, so none takes this path).

**Upstream.** No issue was found. An upstream issue would ask for a documented way to preload the code of
``st.plotly_chart`` (or a stable name for its chunk).

**Remove when** live charts are always served (then this path is never taken), or Streamlit preloads the chunk
itself: delete this module, its line in ``PATCHES`` (``__init__.py``) and its use in ``viz_ui/app/preload.py``.
"""

from __future__ import annotations

import re

from viz_ui.app.streamlit_patches import targets

PATTERN = "PlotlyChart.*.js"  # the chunk's file name in static/js/; the hash part changes with every release
_CHUNKS = sorted((targets.streamlit_static() / "static" / "js").glob(PATTERN))
CHUNK: str | None = _CHUNKS[0].name if len(_CHUNKS) == 1 else None  # None: nothing is preloaded
_MAIN_BUNDLE = re.compile(r'<script type="module"[^>]*\ssrc="[^"]*/static/js/index\.[^"]*\.js"')


def preload_script() -> str:
    """JavaScript that starts loading :data:`CHUNK` in the browser ("" when this Streamlit has no such chunk)."""
    if CHUNK is None:
        return ""
    return ("{const b = document.querySelector('script[type=module][src*=\"/static/js/\"]');"
            f"import(new URL(b ? '{CHUNK}' : './static/js/{CHUNK}', b ? b.src : document.baseURI)"
            ".href).catch(() => {});}")


def problems() -> list[str]:
    """Empty when Streamlit's frontend has exactly one Plotly chunk and loads its main bundle from ``static/js/``."""
    found = [] if CHUNK is not None else [f"Streamlit's frontend has {len(_CHUNKS)} files static/js/{PATTERN}, not 1"]
    index = targets.streamlit_static() / "index.html"
    if not (index.is_file() and _MAIN_BUNDLE.search(index.read_text(encoding="utf-8"))):
        found.append("Streamlit's index.html no longer loads its main bundle as a module from static/js/")
    return found
