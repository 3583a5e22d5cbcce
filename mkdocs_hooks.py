"""mkdocs hooks for the documentation site (see mkdocs.yml).

The docstrings are written for readers of the source, in reStructuredText's roles
(``:class:`~sqljobs.Retention```); mkdocstrings renders them as Markdown, which would show
the role's name. This shows the role's target as code instead, shortened as ``~`` asks.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|meth|func|attr|data|mod|exc|obj):<code>(~?)([^<]+)</code>")


def _code(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub(_code, html)
