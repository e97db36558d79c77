"""Where class mode enters the page (called from viz_ui.app.layout): the Classroom expander's controls, the bar above
the page, the question area, and publishing the teacher's view."""

from __future__ import annotations

import streamlit as st

from viz_ui.classroom.follow import check_applied, student_bar
from viz_ui.classroom.questions import question_area
from viz_ui.classroom.session import MESSAGE, current, sync
from viz_ui.classroom.teacher import class_controls, publish_view, teacher_bar

__all__ = ["check_applied", "class_bar", "publish_view", "question_area", "sidebar_controls"]


def sidebar_controls(draw: bool = True) -> None:
    """Join the class the link names (or keep this session's), then draw the Classroom expander's class part
    (``draw``: the expander is open; closed, nothing is drawn)."""
    cls = sync()
    if draw:
        class_controls(cls)


def class_bar() -> None:
    """Above the page: a pending message (wrong code, class ended, ...), then the teacher's line or the student's
    banner and poll."""
    message = st.session_state.pop(MESSAGE, None)
    if message:
        st.warning(message, icon=":material/school:")  # already plain text (viz_ui.analysis.text.plain where it quotes input)
    cls = current()
    if cls is None:
        return
    if cls.teacher:
        teacher_bar(cls)
    else:
        student_bar(cls)
