"""What is shown, built without Streamlit: each figure is a function returning a ``plotly.graph_objects.Figure``,
each table a ``pandas.DataFrame``, each "Export as code" a string, so that all are tested without an app.

:mod:`.figures` holds the shared figure helpers (layout, styling for the display, attention heatmaps); the other
modules are named after the page they serve (:mod:`.head_view`, :mod:`.interventions`, :mod:`.steering`, ...), and
``code_*`` after the page whose code they export. Imports :mod:`viz_ui.analysis`, never :mod:`viz_ui.app`.
"""
