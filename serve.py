"""The app served with its own HTTP routes: ``streamlit run serve.py`` (README: *Set-up*).

``app.py`` is the app itself (its pages in ``pages/``); this file serves it as a Streamlit ``st.App`` with three more
HTTP routes:

- ``GET /class/CODE/news`` (:mod:`viz_ui.classroom.news`): a class's students learn of the teacher's changes from it
  at once instead of polling the server every second;
- ``POST /viz/ahead`` (:mod:`viz_ui.app.ahead`): a chart of a newly submitted text drawn ahead of the page's rerun;
- ``GET /viz/csv/TOKEN`` (:mod:`viz_ui.app.downloads`): a figure's data as CSV, from a link inside its chart instead
  of a download button per figure.

``streamlit run app.py`` still works; a class's students then poll every second, every chart waits for the rerun,
and every figure has a download button for its CSV.
"""

import streamlit as st

from viz_ui.classroom import class_store
from viz_ui.classroom.news import routes
from viz_ui.app import ahead, downloads

app = st.App("app.py", routes=[*routes(class_store), *ahead.routes(), *downloads.routes()])
