"""Griffe extension for the API reference: Sphinx roles in docstrings as inline code.

attnwh's docstrings name other objects the Sphinx way (:func:`check_study`,
:class:`BatchCapture`); Markdown would show the role's name as text before the code. This
drops the role and keeps the code span, when mkdocstrings loads each object (mkdocs.yml,
the python handler's `extensions`).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj):(`[^`]+`)")


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"\1", obj.docstring.value)
