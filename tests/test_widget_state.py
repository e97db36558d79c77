"""viz_ui/app/streamlit_patches/widget_state.py: Streamlit's keyed widgets read their key through a one-key view of the session state,
with the same outcome as through the whole ``filtered_state``: a key set to None draws the widget empty, a tuple in
a slider's key makes it a range slider, a value set beforehand is the widget's value."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def _script() -> None:
    import streamlit as st

    from viz_ui.app.streamlit_patches import widget_state
    widget_state.install()
    widget_state.install()  # twice: once is what counts
    for key, value in {"pick": None, "choice": "b", "words": None, "span": (2, 5), "count": None}.items():
        st.session_state.setdefault(key, value)
    shown = {"pick": st.selectbox("Pick", ["a", "b"], key="pick"),
             "choice": st.radio("Choice", ["a", "b", "c"], key="choice"),
             "words": st.text_area("Words", key="words"),
             "span": st.slider("Span", 0, 10, key="span"),
             "count": st.number_input("Count", key="count"),
             "free": st.selectbox("Free", ["x", "y"], index=1)}
    st.session_state["shown"] = shown


def test_keyed_widgets_read_their_key_as_streamlit_does():
    import streamlit.elements.widgets.selectbox as selectbox
    at = AppTest.from_function(_script).run()
    assert not at.exception, [e.value for e in at.exception]
    assert getattr(selectbox.get_session_state, "_viz_one_key", False)  # installed in this process
    assert at.session_state["shown"] == {"pick": None, "choice": "b", "words": None, "span": (2, 5), "count": None,
                                         "free": "y"}
    at.selectbox(key="pick").set_value("b").run()  # a value picked stays through the next run
    assert at.session_state["shown"]["pick"] == "b" and at.session_state["shown"]["span"] == (2, 5)
