"""The app served with its class news route: ``streamlit run serve.py`` (README: *Start*).

``app.py`` is the app itself (its pages in ``pages/``); this file serves it as a Streamlit ``st.App`` with one more
HTTP route, ``GET /class/CODE/news`` (:mod:`viz_ui.classroom.news`): a class's students learn of the teacher's
changes from it at once instead of polling the server every second. ``streamlit run app.py`` still works; a class's
students then poll every second.
"""

import streamlit as st

from viz_ui.classroom import class_store
from viz_ui.classroom.news import routes

app = st.App("app.py", routes=routes(class_store))
