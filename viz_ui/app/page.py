"""What a page works from (:class:`PageContext`), and the one header helper every page opens with
(:func:`open_page`): each page's parts take the context as an argument instead of reading the page's module
globals (issue 26)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import streamlit as st
from tokenizers import Tokenizer

from viz_model import Config, VizTransformer
from viz_ui.analysis.text_trace import Trace
from viz_ui.app.layout import AppState, Display, require_trace, setup_page, show_link
from viz_ui.app import streamlit_patches
from viz_ui.app.state import get_vocab_labels


@dataclass(frozen=True)
class PageContext:
    """The chosen model, its tokenizer, the text's trace and how the page is drawn, for one run of a page.

    ``app`` is the :class:`viz_ui.app.layout.AppState` the layout helpers (``show_figure``, ``show_table``, …)
    take; the other attributes are read from it. ``trace`` is None only on pages opened with ``needs_trace=False``
    while the text is empty or cannot be run.
    """

    app: AppState
    trace: Trace | None

    @property
    def model(self) -> VizTransformer:
        return self.app.model

    @property
    def cfg(self) -> Config:
        return self.app.model.cfg

    @property
    def tokenizer(self) -> Tokenizer:
        return self.app.tokenizer

    @property
    def path(self) -> str:
        """The model's key (a path, or ``"upload:<hash>"``): the first argument of the cached functions."""
        return self.app.model_path

    @property
    def text(self) -> str:
        """The sidebar's text, as typed (``trace.text`` is the text the model ran, cut to its context)."""
        return self.app.text

    @property
    def display(self) -> Display:
        return self.app.display

    @property
    def lecture(self) -> bool:
        return self.app.display.lecture

    @cached_property  # read once per context: each read of Streamlit's data cache is a copy of d_vocab strings
    def vocab(self) -> list[str]:
        """Every vocabulary id's token as shown on the pages, ``[d_vocab]``."""
        return get_vocab_labels(self.app.model_path)


def open_page(title: str, intro: str, *, needs_trace: bool = True, needs_lm_head: str | None = None) -> PageContext:
    """Draw the page's header and sidebar, load the model and run it on the text (:func:`viz_ui.app.layout.setup_page`)
    and return the page's context.

    Args:
        title: the page's title (also the browser tab's).
        intro: the caption under the title.
        needs_trace: stop the page when there is no trace (empty text, or a text that cannot be run: its message
            is already shown). False for pages that work without one (they read ``PageContext.trace``, maybe None).
        needs_lm_head: when given, the message shown (with the link) before the page stops on a checkpoint without a
            language-model head.

    Stops the page (``st.stop``) as described; never raises. Every page starts here, so this is where the app puts
    its Streamlit patches in place (:func:`viz_ui.app.streamlit_patches.install`: once per process; a later call
    returns at once).
    """
    streamlit_patches.install()
    app = setup_page(title, intro)
    trace = require_trace(app) if needs_trace else app.trace
    if needs_lm_head is not None and not app.model.has_lm_head:
        st.info(needs_lm_head, icon=":material/block:")
        show_link(app)
        st.stop()
    return PageContext(app, trace)
