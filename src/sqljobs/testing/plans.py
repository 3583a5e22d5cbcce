"""The plan a database chooses for a statement, for tests that check a query reads an
index instead of the whole table.

    plan = explain(app, "SELECT id FROM sqljobs_jobs WHERE state = :state", {"state": "dead"})
    assert_uses_index(plan, "sqljobs_jobs_ended")

On SQLite it runs ``EXPLAIN QUERY PLAN``; on PostgreSQL ``EXPLAIN (FORMAT JSON)`` (with
``analyze=True``, ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)``: the statement really runs).
The statement is written in the engine's own dialect and parameter style (``:name`` or
``?`` on SQLite, ``%(name)s`` or ``%s`` on PostgreSQL). Given an App or a backend, it
runs on one of the backend's own connections (in a transaction that commits), so the
session settings that shape plans are those the queue's statements run under; given a
DB-API connection, on that one, inside whatever transaction it is in.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

if TYPE_CHECKING:
    from ..app import App
    from ..backends.base import Backend

Engine = Literal["sqlite", "postgres"]
Params = Mapping[str, Any] | Sequence[Any] | None

_SQLITE_READ = re.compile(
    r"(?P<op>SCAN|SEARCH) (?P<table>\w+)(?: AS \w+)?"
    r"(?: USING (?P<how>COVERING INDEX|INDEX|INTEGER PRIMARY KEY|PRIMARY KEY)(?: (?P<index>\w+))?)?"
    r"(?: \((?P<cond>.*)\))?"
)


@dataclass(frozen=True)
class PlanNode:
    """One step of a plan: how it reads (SQLite's ``SCAN``/``SEARCH``, PostgreSQL's node
    type such as ``Index Scan``), the table and index it reads, if any, and the condition
    it seeks by. ``raw`` is the engine's own row or JSON node. On SQLite a table read
    under an alias is found by the aliases in the statement's text; a subquery or CTE
    read by name shows as a table of that name. SQLite's primary key (the rowid) shows as
    the index ``"PRIMARY KEY"``."""

    operation: str
    table: str | None = None
    index: str | None = None
    condition: str = ""
    raw: Any = field(default=None, compare=False, repr=False)

    @property
    def full_scan(self) -> bool:
        """A read of every row of its table (SQLite's ``SCAN`` without an index,
        PostgreSQL's ``Seq Scan``)."""
        if self.table is None:
            return False
        return self.operation == "Seq Scan" or (self.operation == "SCAN" and not self.index)


@dataclass(frozen=True)
class Plan:
    """What ``EXPLAIN`` said about one statement, on ``engine``: its ``nodes`` (every step,
    depth first) and ``text`` (one line a step, for failure messages). On PostgreSQL
    ``raw`` is the JSON document (with ``analyze``, it holds the buffer counts)."""

    engine: Engine
    sql: str
    nodes: tuple[PlanNode, ...]
    raw: Any = field(compare=False, repr=False)

    @property
    def text(self) -> str:
        return "\n".join(_line(node) for node in self.nodes)

    @property
    def indexes(self) -> set[str]:
        """The indexes the plan reads."""
        return {n.index for n in self.nodes if n.index}

    def reads(self, table: str) -> list[PlanNode]:
        """The steps that read ``table`` (by its rows or by one of its indexes)."""
        return [n for n in self.nodes if n.table == table]

    def full_scans(self) -> set[str]:
        """The tables the plan reads every row of."""
        return {n.table for n in self.nodes if n.full_scan and n.table}

    def __str__(self) -> str:
        return self.text


def explain(
    target: App | Backend | Any,
    sql: str,
    params: Params = None,
    *,
    analyze: bool = False,
) -> Plan:
    """The plan of ``sql`` with ``params`` on ``target``'s database: an App, a backend, or
    an open DB-API connection (``sqlite3`` or ``psycopg``). ``analyze`` (PostgreSQL only)
    runs the statement and counts its buffers."""
    connection = _connection_of(target)
    if connection is not None:
        return _explain_on(connection, sql, params, analyze)
    backend = cast("Backend", target if hasattr(target, "job_transaction") else target.backend)
    with backend.job_transaction() as conn:
        return _explain_on(conn, sql, params, analyze)


def assert_uses_index(plan: Plan, name: str, *, table: str | None = None) -> None:
    """Fail unless ``plan`` reads index ``name``; with ``table``, also unless every read of
    that table goes through an index (no full scan of it)."""
    if name not in plan.indexes:
        raise AssertionError(
            f"the plan does not use index {name}:\n{plan.text}\n-- for: {plan.sql}"
        )
    if table is not None and table in plan.full_scans():
        raise AssertionError(f"the plan reads all of {table}:\n{plan.text}\n-- for: {plan.sql}")


def _connection_of(target: Any) -> Any:
    """``target`` if it is a DB-API connection, else None."""
    if isinstance(target, sqlite3.Connection):
        return target
    module = type(target).__module__
    return target if module.startswith("psycopg") else None


def _explain_on(conn: Any, sql: str, params: Params, analyze: bool) -> Plan:
    if isinstance(conn, sqlite3.Connection):
        if analyze:
            raise ValueError("explain(analyze=True) is PostgreSQL's: SQLite plans only")
        rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params or ()).fetchall()
        aliases = _aliases(sql)
        nodes = tuple(_sqlite_node(row[-1], row, aliases) for row in rows)
        return Plan("sqlite", sql, nodes, rows)
    options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "FORMAT JSON"
    row = conn.execute(f"EXPLAIN ({options}) " + sql, params).fetchone()
    doc = row[0]
    return Plan("postgres", sql, tuple(_pg_nodes(doc[0]["Plan"])), doc)


def _sqlite_node(detail: str, row: Any, aliases: Mapping[str, str]) -> PlanNode:
    read = _SQLITE_READ.fullmatch(detail)
    if read is None:
        return PlanNode(detail, raw=row)
    index = read["index"] or None
    if index is None and read["how"] and "PRIMARY KEY" in read["how"]:
        index = "PRIMARY KEY"  # the table's own b-tree, sought by key
    table = aliases.get(read["table"], read["table"])
    return PlanNode(read["op"], table, index, read["cond"] or "", row)


def _aliases(sql: str) -> dict[str, str]:
    """Alias to table, from ``FROM t a``, ``JOIN t AS a`` and ``, t a`` in ``sql``:
    SQLite's plan names a table read under an alias by its alias alone."""
    found = {}
    for table, alias in _ALIASED.findall(sql):
        if alias.upper() not in _KEYWORDS:
            found[alias] = table
    return found


_ALIASED = re.compile(r"(?:\bFROM|\bJOIN|,)\s+(?:\w+\.)?(\w+)\s+(?:AS\s+)?(\w+)", re.IGNORECASE)
_KEYWORDS = frozenset(
    {
        "WHERE",
        "JOIN",
        "INNER",
        "LEFT",
        "RIGHT",
        "FULL",
        "CROSS",
        "NATURAL",
        "ON",
        "USING",
        "GROUP",
        "ORDER",
        "LIMIT",
        "HAVING",
        "UNION",
        "EXCEPT",
        "INTERSECT",
        "WINDOW",
        "SET",
        "VALUES",
        "RETURNING",
        "INDEXED",
        "NOT",
        "AS",
    }
)


def _pg_nodes(node: dict[str, Any]) -> Iterator[PlanNode]:
    index = node.get("Index Name")
    table = node.get("Relation Name")
    condition = node.get("Index Cond") or node.get("Recheck Cond") or node.get("Filter") or ""
    yield PlanNode(node["Node Type"], table, index, condition.strip("()"), node)
    for child in node.get("Plans", []):
        yield from _pg_nodes(child)


def _line(node: PlanNode) -> str:
    parts = [node.operation]
    if node.table:
        parts.append(f"on {node.table}")
    if node.index:
        parts.append(f"using {node.index}")
    if node.condition:
        parts.append(f"({node.condition})")
    return " ".join(parts)
