"""The scale suite's tables: one line per figure, one column per condition, so a figure
reads across its conditions and its ratio to the first sits right under it."""

from __future__ import annotations

from common import Row
from rich.markup import escape
from rich.table import Table

STYLE = {"PASS": "green", "MISS": "bold red", "ERROR": "bold red", "SKIPPED": "yellow"}


def number(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "%":
        return f"{value:.0f} %"
    if abs(value) < 100:
        return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"
    return f"{value:,.0f}"


def cell(row: Row | None) -> str:
    """A figure, coloured by its target if it has one; why not, if it could not be had."""
    if row is None:
        return ""
    if row.skipped:
        return "n/a" if row.skipped.startswith("n/a") else f"[{STYLE['SKIPPED']}]SKIPPED[/]"
    if row.value is None:
        return f"[{STYLE['ERROR']}]ERROR[/]"
    text = number(row.value, row.unit)
    return f"[{STYLE[row.status]}]{text}[/]" if row.status else text


def pivot(title: str, rows: list[Row], first: str = "figure") -> Table:
    """``rows`` as a table: a line per (db, bench), a column per ``measure``, in the
    order they come; each line's note is the first note or skip reason among its rows."""
    columns = list(dict.fromkeys(r.measure for r in rows))
    lines = list(dict.fromkeys((r.db, r.bench) for r in rows))
    at: dict[tuple[str, str, str], Row] = {}
    for r in rows:
        if (r.db, r.bench, r.measure) in at:  # two figures for one cell: a labelling bug
            raise ValueError(f"two rows for {r.db} / {r.bench} / {r.measure}")
        at[(r.db, r.bench, r.measure)] = r
    t = Table(title=title, title_justify="left")
    t.add_column("db", no_wrap=True)
    t.add_column(first, no_wrap=True)
    for column in columns:
        t.add_column(column, justify="right")
    t.add_column("note", overflow="fold")
    previous = None
    for db, bench in lines:
        if previous is not None and db != previous:
            t.add_section()
        previous = db
        line = [at.get((db, bench, c)) for c in columns]
        notes = [r.note or r.skipped for r in line if r is not None and (r.note or r.skipped)]
        t.add_row(db, bench, *(cell(r) for r in line), escape(notes[0] if notes else ""))
    return t
