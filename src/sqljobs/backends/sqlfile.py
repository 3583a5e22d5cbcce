"""Load named SQL statements from ``.sql`` files kept beside each backend.

A file holds blocks that start with a line ``-- name: some_query``; the text up to the next
such line is the statement. Keeping SQL in files makes it readable and diffable as SQL.
"""

from __future__ import annotations

import re
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def load_queries(package: str, filename: str) -> dict[str, str]:
    """Return {name: statement} for every named block in the file."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _NAME.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def load_statements(package: str, *filenames: str) -> dict[str, str]:
    """The named blocks of several files as one dictionary; a name used twice is refused,
    since the later block would silently replace the earlier."""
    out: dict[str, str] = {}
    for filename in filenames:
        queries = load_queries(package, filename)
        clash = sorted(out.keys() & queries.keys())
        if clash:
            raise LookupError(f"{package}/{filename} names {clash} again")
        out.update(queries)
    return out


def load_migrations(package: str) -> list[tuple[int, str, str]]:
    """Return [(version, name, sql)] for the package's files named ``NNNN_name.sql``, in order."""
    out = []
    for entry in resources.files(package).iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            out.append((int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    return sorted(out)
