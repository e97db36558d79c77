"""A griffe extension for the API reference (mkdocs.yml): the docstrings name other objects with Sphinx roles
(:func:`load_upload`, :class:`HookPoint`, :mod:`.ablation`), which Markdown would print as they are; this turns each
into a code span of its target (`load_upload`), leading ``~`` and ``.`` removed."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc|const)?:`~?\.?([^`]+)`")


class RstRoles(griffe.Extension):
    """Rewrites every docstring's Sphinx roles as Markdown code spans when griffe loads an object."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(lambda m: f"`{m.group(1)}`", obj.docstring.value)
