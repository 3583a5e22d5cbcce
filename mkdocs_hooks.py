"""mkdocs hooks for the documentation site (see mkdocs.yml).

``on_config`` adds the pages other branches are writing to the nav once they exist.

``on_page_content``: the docstrings are written for readers of the source, in
reStructuredText's roles (``:class:`~sqljobs.Retention```); mkdocstrings renders them as
Markdown, which would show the role's name. This shows the role's target as code instead,
shortened as ``~`` asks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_ROLE = re.compile(r":(?:class|meth|func|attr|data|mod|exc|obj):<code>(~?)([^<]+)</code>")


def _code(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub(_code, html)


def on_config(config: Any, **_: Any) -> Any:
    """Put each page of ``extra.optional_pages`` in the nav section it names, once its file
    exists (a nav entry for a missing file would fail ``--strict``), unless the nav lists
    it already."""
    docs_dir = Path(config["docs_dir"])
    nav = config["nav"] or []
    listed = set(_files(nav))
    for page in config["extra"].get("optional_pages", []):
        if page["file"] in listed or not (docs_dir / page["file"]).is_file():
            continue
        for entry in nav:
            if isinstance(entry, dict) and page["section"] in entry:
                entry[page["section"]].append({page["title"]: page["file"]})
                break
        else:
            raise ValueError(f"optional page {page['file']}: no nav section {page['section']!r}")
    return config


def _files(nav: Any) -> Iterator[str]:
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from _files(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from _files(value)
