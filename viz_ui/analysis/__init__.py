"""From a model and a text to the numbers the pages show: the trace of a text (:mod:`.trace`, bounded at real
sizes by :mod:`.trace_bounded`), head scores, logit lens, costs and time estimates, the step-by-step attention
arithmetic, and so on. Torch and numpy only: no module here imports Streamlit or Plotly (a test checks), so all of
it runs in a script or a notebook. Imports :mod:`viz_model`, never :mod:`viz_ui.app` or :mod:`viz_ui.views`.
"""
