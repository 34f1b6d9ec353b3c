"""A griffe extension for the documentation site (mkdocs.yml loads it): the docstrings'
Sphinx roles (``:class:`~engine_core.Engine```, ``:meth:`init```...) become plain code,
as Sphinx shows them: the last name with ``~``, the whole path without. Markdown reads
the rest of the docstrings' reStructuredText (double backticks, ``::`` blocks) well
enough as it is."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`(~?)([^`]+)`")


def _plain(found: re.Match[str]) -> str:
    path = found.group(2)
    return f"`{path.rsplit('.', 1)[-1] if found.group(1) else path}`"


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring once its object is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_plain, obj.docstring.value)
