"""Strings from files shown as they are: escaping for Streamlit's Markdown, for HTML and for Plotly's text, and
one-line error messages (no Streamlit here).

Every string that comes from a model, a tokenizer, a file or another user (token texts, model and file names,
feature and hook names from a dictionary's cfg.json, error messages that quote them, a class's questions) goes through
one of these before it reaches the page:

- :func:`plain` where Streamlit renders Markdown (with GitHub's extensions, KaTeX between ``$``, and its own
  ``:material/icon:``, ``:color[text]`` and ``:emoji:`` directives): ``st.markdown``, ``st.caption``,
  ``st.info``/``warning``/``error``/``success``, headings, widget labels and help, the options of ``st.radio`` and
  ``st.select_slider``, expander and tab labels, progress texts, and every cell and header of a static
  ``st.table``. A model named ``![x](http://evil/x.png)`` would make every viewer's browser fetch that address.
- :func:`plain_html` in HTML (``st.html``, the head view's SVG): text and attribute values.
- :func:`plotly_text` in every string of a Plotly figure that holds data (hover text, ``customdata`` read by a
  ``hovertemplate``, tick labels, cell texts, titles): Plotly draws a subset of HTML there (``<b>``, ``<i>``, ``<s>``,
  ``<br>``, ``<a href>``, ``<span style>``), so ``<s>`` (Llama's first token) would strike the rest through.

Selectboxes' and multiselects' options, ``st.dataframe``, ``st.code`` and ``st.text_area`` show text as it is and
need none of them.
"""

from __future__ import annotations

import html
import re

# CommonMark lets a backslash escape any ASCII punctuation; these are the ones Markdown, GFM, KaTeX or
# Streamlit's directives give a meaning to.
SPECIAL = set("\\`*_{}[]()#+-.!|<>~$:=&\"'@")
WORD_JOINER = "\u2060"  # invisible, zero width: breaks the patterns matched after parsing (see plain)
# Matched on the parsed text, where escapes are already undone: Streamlit's icon and emoji shortcodes
# (":material_x:", ":smile:") and GFM's bare links ("http://", "www.", "name@host").
_AFTER_PARSE = re.compile(r"(?<=:)(?=[\w/+-])|(?<=@)|(?<=www)(?=\.)", re.IGNORECASE)


def plain(text: object, limit: int | None = 300) -> str:
    """``text`` as Markdown that Streamlit shows literally: every Markdown, GFM, KaTeX and Streamlit special
    character backslash-escaped, line breaks and tabs as spaces, and an invisible word joiner (U+2060) after
    ``:`` before a word, after ``@`` and between ``www`` and ``.``, which are matched on the text after the
    escapes are undone (icon and emoji shortcodes, bare links). Strings longer than ``limit`` characters are
    cut with "…" (``None``: no limit).

    """
    text = "" if text is None else str(text)
    if limit is not None and len(text) > limit:
        text = text[: max(0, limit - 1)] + "…"
    text = re.sub(r"[\r\n\t\v\f]+", " ", text)
    text = _AFTER_PARSE.sub(WORD_JOINER, text)
    return "".join("\\" + c if c in SPECIAL else c for c in text)


def plain_html(text: object, limit: int | None = None) -> str:
    """``text`` as HTML text or a (double- or single-quoted) attribute value that shows it literally: ``&``, ``<``,
    ``>``, ``"`` and ``'`` as character references (``html.escape``). Cut to ``limit`` characters with "…" (None: no
    limit)."""
    text = "" if text is None else str(text)
    if limit is not None and len(text) > limit:
        text = text[: max(0, limit - 1)] + "…"
    return html.escape(text, quote=True)


def plotly_text(text: object) -> str:
    """``text`` for a Plotly string that shows it literally: ``&``, ``<`` and ``>`` as ``&amp;``, ``&lt;``, ``&gt;``.
    Plotly (``src/lib/svg_text_utils.js``) splits its text at ``<...>`` tags and decodes, in the text between them,
    those three, ``&nbsp;`` and a few more by name and every numeric reference, but not ``&quot;``: quotes stay as
    they are."""
    return ("" if text is None else str(text)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def recoverable(exc: BaseException) -> bool:
    """Whether a failure may be shown as a message while the session carries on: every ``Exception``, and the
    ``PanicException`` of Rust extensions built with pyo3 (``tokenizers``, ``safetensors``), which derives from
    ``BaseException`` only (a tokenizer's regex that backtracks too much panics). Not ``KeyboardInterrupt``,
    ``SystemExit``, ``GeneratorExit`` or Streamlit's own rerun and stop signals."""
    if isinstance(exc, Exception):
        return True
    kind = type(exc)
    return kind.__name__ == "PanicException" or kind.__module__ == "pyo3_runtime"


def error_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message (its type's name when empty), at most ``limit`` characters."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"
