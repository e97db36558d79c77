"""The Circuits page's graph as a Streamlit component (``st.components.v2``, in the page's own DOM): an attribution or
contribution graph drawn with Plotly (the plotly package's own ``plotly.min.js``, served by the app, as live charts:
:mod:`viz_ui.app.preload`), with hover cards, pins, supernodes and thresholds answered in the browser
(``circuit_graph.js``). The browser reports the view (thresholds, pins, supernodes, the clicked node and edge) as the
component's state ``view``; :func:`view_state` reads it, and the page keeps it in the link (:func:`link_state`).
"""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st

from viz_ui.app.layout import write_param
from viz_ui.app.live_chart import pack
from viz_ui.app.preload import LOADER_JS, compact_js, live_chart_source

_HERE = Path(__file__).parent
_COMPONENT = st.components.v2.component(
    "viz_circuit_graph", js=compact_js(LOADER_JS + "\n" + (_HERE / "circuit_graph.js").read_text(encoding="utf-8")),
    css=(_HERE / "circuit_graph.css").read_text(encoding="utf-8"), isolate_styles=False)

# Per theme: text colours >= 4.5:1 on the surface (tests/test_circuits_page.py measures them); node and edge colours
# >= 3:1 (graphical objects, WCAG 1.4.11).
PALETTES = {
    "light": {"ink": "#31333f", "muted": "#555863", "surface": "#ffffff", "line": "#b9bbc3", "grid": "#eceef2",
              "accent": "#b3261e", "feature": "#4b5bd6", "error": "#7a7d87", "token": "#1f6f43", "logit": "#a4501b",
              "pos": "#2563eb", "neg": "#dc2626", "pos-text": "#1d4ed8", "neg-text": "#b91c1c",
              "resid": "#4b5bd6", "attn": "#2563eb", "mlp": "#a4501b"},
    "dark": {"ink": "#fafafa", "muted": "#c4c6cc", "surface": "#0e1117", "line": "#4a4e5a", "grid": "#1f232b",
             "accent": "#ff8a80", "feature": "#8c9bff", "error": "#a6a9b2", "token": "#6fd49a", "logit": "#f0a66a",
             "pos": "#60a5fa", "neg": "#f87171", "pos-text": "#93c5fd", "neg-text": "#fca5a5",
             "resid": "#8c9bff", "attn": "#60a5fa", "mlp": "#f0a66a"},
}
DEFAULT_VIEW = {"node_t": 0.8, "edge_t": 0.98, "pinned": [], "supernodes": [], "clicked": "", "view": "full",
                "edge": None}
LINK_KEY = "cg"  # the query parameter holding the view (JSON)
MAX_PINNED = 500


def clean_view(value, contribution: bool = False) -> dict:
    """A view (from the browser or a link) with only known keys of the right types, thresholds in range: anything
    else falls back to :data:`DEFAULT_VIEW` (a link is untrusted text)."""
    view = dict(DEFAULT_VIEW, node_t=0.04 if contribution else DEFAULT_VIEW["node_t"])
    if not isinstance(value, dict):
        return view
    for key, lo, hi in (("node_t", 0.0, 1.0), ("edge_t", 0.0, 1.0)):
        v = value.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= float(v) <= hi:
            view[key] = float(v)
    pinned = value.get("pinned")
    if isinstance(pinned, list):
        view["pinned"] = [p for p in pinned if isinstance(p, str) and len(p) <= 200][:MAX_PINNED]
    groups = value.get("supernodes")
    if isinstance(groups, list):
        view["supernodes"] = [[str(g[0])[:60]] + [m for m in g[1:] if isinstance(m, str) and m in view["pinned"]]
                              for g in groups[:100] if isinstance(g, list) and len(g) >= 3 and isinstance(g[0], str)]
    if isinstance(value.get("clicked"), str) and len(value["clicked"]) <= 200:
        view["clicked"] = value["clicked"]
    if value.get("view") in ("full", "pinned"):
        view["view"] = value["view"]
    edge = value.get("edge")
    if isinstance(edge, list) and len(edge) == 2 and all(isinstance(e, str) and len(e) <= 200 for e in edge):
        view["edge"] = edge
    return view


def link_state(contribution: bool = False) -> dict:
    """The view kept in the link (``?cg=...``), checked; the default view when there is none."""
    raw = st.query_params.get(LINK_KEY)
    try:
        return clean_view(json.loads(raw) if raw else None, contribution)
    except (ValueError, RecursionError):
        return clean_view(None, contribution)


def keep_in_link(view: dict, contribution: bool = False) -> None:
    """Write the view into the link (dropped when it is the default, or too long for an address:
    :func:`viz_ui.app.layout.write_param`)."""
    write_param(LINK_KEY, json.dumps(view, separators=(",", ":")),
                json.dumps(clean_view(None, contribution), separators=(",", ":")))


def view_state(key: str, contribution: bool = False) -> dict:
    """The view the browser last reported for the graph ``key`` (its thresholds, pins, supernodes, clicked node and
    edge), else the link's."""
    result = st.session_state.get(key)
    reported = None if result is None else result.get("view")
    return clean_view(reported, contribution) if reported is not None else link_state(contribution)


def circuit_graph(key: str, payload_json: str, revision: str, view: dict, theme: str, scale: float,
                  height: int, export: str = "png", filename: str = "circuit", on_change=None,
                  lecture: bool = False) -> bool:
    """Draw the graph ``key``: ``payload_json`` is :func:`viz_ui.analysis.circuits.graph_payload` (or
    ``contribution_payload``) as JSON, ``revision`` names it (the browser parses a payload once per revision),
    ``view`` the view to show (the browser keeps its own while the user moves, and follows a new one from the
    server). ``lecture``: no toolbar (lecture mode shows no downloads). Returns False when the browser cannot draw it
    (static serving off: :func:`live_chart_source`)."""
    src = live_chart_source()
    if src is None:
        return False
    data = {"src": src, "revision": revision, "state": view, "palette": PALETTES.get(theme, PALETTES["light"]),
            "scale": scale, "height": int(height), "export": export, "filename": filename, "lecture": bool(lecture)}
    _COMPONENT(key=key, data=pack(data, payload=payload_json), on_view_change=on_change or (lambda: None))
    return True
