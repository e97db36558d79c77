"""Strings from files shown as they are: escaping for Streamlit's Markdown, and one-line error messages
(no Streamlit here).

Streamlit renders Markdown (with GitHub's extensions, KaTeX between ``$``, and its own ``:material/icon:``,
``:color[text]`` and ``:emoji:`` directives) in ``st.markdown``, ``st.error``, ``st.success``, ``st.subheader``,
captions and widget labels. A model named ``![x](http://evil/x.png)`` would make every viewer's browser fetch
that address; :func:`plain` makes such a string show literally instead.
"""

from __future__ import annotations

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
