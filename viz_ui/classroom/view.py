"""What a class follows: the teacher's view as a small dict, and the rules that apply it (no Streamlit here).

A view is ``{"page": "pages/attention.py", "params": {"text": "...", "layer": "2", ...}}``: the page's file and the
link's parameters (strings, as in the address bar), without the class's own parameters (``class``, ``teach``) and
without the personal display choices (lecture mode, font scale, theme, figure format), which stay each screen's own.
"""

from __future__ import annotations

import re

CLASS_PARAMS = ("class", "teach")  # the class's own parameters: never part of a view
PERSONAL_PARAMS = ("lecture", "scale", "theme", "export", "embed", "embed_options")  # each screen keeps its own
# Values sent from the teacher's session even when its link leaves them out: a text too long for a link, and the
# layer and head once picked (a link without them opens the text's most salient head, not the teacher's head 0).
SESSION_KEYS = ("text", "layer", "head")
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # the store's codes: no 0/O or 1/I to misread
_CODE = re.compile(f"[{CODE_ALPHABET}]{{6}}")


def make_view(page: str, params: dict[str, str], session_values: dict[str, object]) -> dict:
    """The view to publish: ``page`` (the page's file relative to the app, e.g. ``"app.py"``), the link's
    ``params`` less the class and personal parameters, and ``session_values`` (of :data:`SESSION_KEYS`, as the
    teacher's session holds them) written as strings over them."""
    shared = {k: str(v) for k, v in params.items() if k not in CLASS_PARAMS and k not in PERSONAL_PARAMS}
    shared.update({k: str(v) for k, v in session_values.items() if k in SESSION_KEYS and v is not None})
    return {"page": page, "params": shared}


def valid_code(value: object) -> str | None:
    """A class code as typed (any case, spaces around) in the store's form, or None when it cannot be one."""
    code = str(value or "").strip().upper()
    return code if _CODE.fullmatch(code) else None


def keys_to_reset(*param_sets: dict[str, str]) -> set[str]:
    """The shared values a student's session forgets before applying a view: every key of the previous view, the
    new one and the student's own link, so that each is read again from the new view or falls back to its default
    as opening the view's link would (personal and class parameters excepted)."""
    keys = set().union(*(p.keys() for p in param_sets))
    return {k for k in keys if k not in CLASS_PARAMS and k not in PERSONAL_PARAMS}


def student_params(view_params: dict[str, str], own_params: dict[str, str], code: str) -> dict[str, str]:
    """The student's link after applying a view: the view's parameters, the student's own personal ones, and
    ``class=code`` (a student's link never holds the teacher's token)."""
    personal = {k: v for k, v in own_params.items() if k in PERSONAL_PARAMS}
    shared = {k: v for k, v in view_params.items() if k not in CLASS_PARAMS and k not in PERSONAL_PARAMS}
    return {**shared, **personal, "class": code}
