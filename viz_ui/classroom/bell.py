"""A student's class bell: a tiny component in the poll's fragment that waits in the browser for the class's news
(the long-polled route of :mod:`viz_ui.classroom.news`) and reruns the fragment as soon as it changes (bell.js).

With it, a student's screen follows the teacher within ~0.2 s of a change instead of up to a poll period, and the
fragment itself polls only every :data:`viz_ui.classroom.follow.HEARTBEAT_SECONDS` (the heartbeat that counts the
class's followers, and a safety net). Drawn only when the route is served (``streamlit run serve.py``).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

_COMPONENT = st.components.v2.component("viz_class_bell", js=(Path(__file__).with_name("bell.js")).read_text(
    encoding="utf-8"), isolate_styles=True)


def bell(code: str, news: str, following: bool) -> None:
    """Draw the bell of class ``code`` on a screen drawn with ``news`` (:func:`viz_ui.classroom.news.news_string`);
    ``following``: a new view rings it too (else only a question, a reveal or the end of the class). Draws nothing
    visible."""
    _COMPONENT(key="class_bell", data={"url": f"class/{code}/news", "news": news, "following": bool(following)},
               on_news_change=lambda: None)
