"""A random token per chart of a browser session, kept in its session state: how the app's own HTTP routes name one
chart of one session (:mod:`viz_ui.app.ahead`, :mod:`viz_ui.app.downloads`). A token is unguessable, so a request
reaches only what that session's page registered; it stays the same across the session's runs."""

import secrets

import streamlit as st


def chart_token(bucket: str, chart: str) -> str:
    """This session's token for the chart ``chart`` (its key) in the session-state dict ``bucket`` (one per route),
    made at the first call."""
    tokens = st.session_state.setdefault(bucket, {})
    token = tokens.get(chart)
    if token is None:
        token = tokens[chart] = secrets.token_urlsafe(18)
    return token
