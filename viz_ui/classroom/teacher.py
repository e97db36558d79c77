"""The teacher's side of a class: Start / End, the code, link and QR code to project, how many follow, and
publishing the teacher's view on every run where it changed."""

from __future__ import annotations

from urllib.parse import urlencode

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from viz_ui.analysis.text import plain
from viz_ui.classroom import ClassStoreUnavailable, class_store
from viz_ui.classroom.qr import qr_png
from viz_ui.classroom.questions import ask_form
from viz_ui.classroom.session import ClassSession, current, current_page, leave, say, start, store_error
from viz_ui.classroom.view import SESSION_KEYS, make_view, valid_code

TICK_SECONDS = 1.0  # how often the teacher's screen publishes a pending view and counts its followers


def class_link(code: str) -> str:
    """The absolute student link, ``<app address>/?class=CODE`` (the app's address from ``st.context.url``, its page
    path removed; the students' screens switch to the teacher's page themselves). Never holds the token."""
    from streamlit.runtime.context_util import maybe_trim_page_path
    url = st.context.url or "http://localhost:8501"
    ctx = get_script_run_ctx()
    root = maybe_trim_page_path(url, ctx.pages_manager) if ctx is not None else url
    return root.rstrip("/") + "/?" + urlencode({"class": code})


def class_controls(cls: ClassSession | None) -> None:
    """The Classroom expander's class part: Start a class or join one by code; in a class, its code, link, QR code
    and End (teacher) or Leave (student)."""
    if cls is None:
        st.button("Start a class", key="class_start", icon=":material/cast_for_education:", on_click=start,
                  help="Students open the link (or scan the QR code) and follow what this screen shows.")
        st.text_input("…or join a class: code", key="class_join", max_chars=12, on_change=_join_typed,
                      placeholder="e.g. K7QX2M")
        return
    if not cls.teacher:
        st.markdown(f"In class **{cls.code}** as a student.")
        st.button("Leave the class", key="class_leave", on_click=leave, icon=":material/logout:")
        return
    link = class_link(cls.code)
    st.markdown(f"Teaching class **{cls.code}**. Students open:")
    st.code(link, language=None, wrap_lines=True)
    st.image(qr_png(link, scale=4), caption="Scan to join", width=160)
    st.button("Project the code and QR code", key="class_project", icon=":material/qr_code_2:",
              on_click=lambda: st.session_state.update(_class_project=True))
    st.caption("This screen's own link holds the teacher's key (teach=…): keep it to yourself; it lets this "
               "browser go on teaching after a reconnect.")
    ask_form(cls)
    st.button("End the class", key="class_end", on_click=_end, icon=":material/stop_circle:")


def _join_typed() -> None:
    typed = st.session_state.get("class_join") or ""
    code = valid_code(typed)
    st.session_state["class_join"] = ""
    if code is None:
        say(f"“{plain(typed, 40)}” is not a class code (6 letters and digits, e.g. K7QX2M).")
        return
    st.query_params["class"] = code  # sync() joins it in this run


def _end() -> None:
    cls = current()
    if cls is None:
        return
    try:
        class_store().close(cls.code, cls.token)
    except (KeyError, PermissionError):
        pass  # already ended (or expired)
    except (ClassStoreUnavailable, OSError) as exc:
        say(store_error(exc))
        return
    leave(f"Class {cls.code} has ended.")


def teacher_bar(cls: ClassSession) -> None:
    """The teacher's line above the page (projected with it): the code and how many follow, refreshed every few
    seconds; the join screen when asked for."""
    if st.session_state.pop("_class_project", False):
        _join_screen(class_link(cls.code), cls.code)
    _teacher_tick()


@st.fragment(run_every=TICK_SECONDS)
def _teacher_tick() -> None:
    """Every TICK_SECONDS: publish a view left pending (a page that drew no figure after its first link), rerun the
    page when the class's question was asked or revealed elsewhere (the teacher's other tab: a projector window and
    a laptop), then the follower count."""
    cls = current()
    if cls is None or not cls.teacher:
        return
    ctx = get_script_run_ctx()
    own_tick = ctx is not None and bool(ctx.fragment_ids_this_run)  # a tick of its own, after the page's run
    if own_tick:  # the view is settled
        publish_view()
    try:
        if own_tick:
            if cls.question_changed(class_store().question(cls.code)):
                st.rerun()  # the page's question area draws it, as a student's poll has it do
        n = class_store().followers(cls.code)
    except KeyError:
        leave(f"Class {cls.code} has ended (a class lives at most a day).")
        st.rerun()
    except (ClassStoreUnavailable, OSError) as exc:
        st.caption(f":material/cloud_off: {plain(store_error(exc))}")
        return
    st.markdown(f":material/cast_for_education: Class **{cls.code}** · {n} student{'s' * (n != 1)} following")


@st.dialog("Join the class", width="large")
def _join_screen(link: str, code: str) -> None:
    left, right = st.columns([1, 1], vertical_alignment="center")
    left.image(qr_png(link, scale=12), width=420)
    right.markdown(f"Scan the code, or open the link and type the class code:\n\n# {code}")
    st.code(link, language=None, wrap_lines=True)


def publish_view(first: bool = False) -> None:
    """The teacher's session publishes its view when it differs from the last one published (a dict compare: called
    after every figure, :func:`viz_ui.app.layout.show_link`). ``first``: the run's first call (end of ``setup_page``),
    before the page drew its own widgets: a view of another page is then left for the page's next call (or the
    next tick), so that a page change reaches the students as one view, not two. Nothing for a non-teacher."""
    cls = current()
    if cls is None or not cls.teacher:
        return
    state = st.session_state
    view = make_view(current_page(), st.query_params.to_dict(),
                     {key: state["_" + key] for key in SESSION_KEYS if "_" + key in state})
    if view == cls.published or (first and cls.published and view["page"] != cls.published.get("page")):
        return
    try:
        class_store().publish(cls.code, cls.token, view)
    except KeyError:
        leave(f"Class {cls.code} has ended (a class lives at most a day).")
        return
    except PermissionError:
        leave(f"This link's teacher key is not class {cls.code}'s: the students' link (without teach=…) joins it.")
        return
    except (ValueError, TypeError, ClassStoreUnavailable, OSError) as exc:
        st.sidebar.warning(f"The view was not sent to the class: {plain(store_error(exc))}")
        return
    cls.published = view
