"""sqljobs benchmarks on SQLite and PostgreSQL, side by side with their peers, in one table.

    python benchmarks/run.py [--quick] [--only sqlite|postgres|NAME,...] [--json]
    python benchmarks/run.py --scale [--quick] [--json]

NAME is a benchmark (drain, enqueue, article, latency, startup, scaling, workflows: see
workflows.py, beside DBOS and Absurd);
``--only postgres,drain`` runs PostgreSQL's drain alone. Each benchmark repeats 3 times
(1 with ``--quick``) and reports medians, each against its target where it has one.
Progress goes to stderr; the table
(or JSON) to stdout. Without a PostgreSQL server its half shows one SKIPPED row.
``--scale`` runs the scale suite instead (scale.py): big tables, many worker processes,
enqueues under load.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import sqlite_suite
from common import Row, log
from rich.console import Console
from rich.markup import escape
from rich.table import Table

HALVES = {"sqlite": ("SQLite", "sqlite_suite"), "postgres": ("PostgreSQL", "pg_suite")}
NAMES = list(sqlite_suite.BENCHMARKS)


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if unit in ("%", "ms") or abs(value) < 10:
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def table(rows: list[Row], title: str) -> Table:
    t = Table(title=title)
    for col in ("db", "benchmark", "measure", "median", "unit", "runs", "target", "status"):
        t.add_column(col, justify="right" if col in ("median", "runs") else "left", no_wrap=True)
    t.add_column("note", overflow="fold")
    style = {"PASS": "green", "MISS": "bold red", "ERROR": "bold red", "SKIPPED": "yellow"}
    previous: tuple[str, str] | None = None
    for r in rows:
        if previous and (r.db, r.bench) != previous:
            t.add_section()
        previous = (r.db, r.bench)
        runs = " ".join(fmt(v, r.unit) for v in r.runs) if len(r.runs) > 1 else ""
        status = f"[{style[r.status]}]{r.status}[/]" if r.status else ""
        unit = "" if r.unit == "x" else r.unit
        target = f"{r.target}{'x' if r.unit == 'x' else ''}" if r.target else ""
        t.add_row(r.db, r.bench, r.measure, fmt(r.value, r.unit), unit, runs, target, status,
                  escape(r.skipped or r.note))  # fmt: skip
    return t


def revision() -> str:
    """The commit measured, flagged if ``src`` has uncommitted changes: a table taken while
    the library is being edited must say so."""
    root = Path(__file__).resolve().parent.parent
    try:
        git = ["git", "-C", str(root)]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "src"], capture_output=True,
                               text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "-"
    return f"{head} + uncommitted src changes" if dirty else head


def environment() -> dict[str, str]:
    """Versions of everything measured, so a table can be compared with a later one."""
    env = {"python": platform.python_version(), "SQLite": sqlite3.sqlite_version}
    try:
        import pg_server

        env["PostgreSQL"] = pg_server.server_version()
    except Exception:  # not installed, not reachable: its rows say why
        env["PostgreSQL"] = "-"
    env["revision"] = revision()
    for package in ("sqljobs", "huey", "pgqueuer", "procrastinate", "dbos", "absurd-sdk"):
        try:
            env[package] = version(package)
        except PackageNotFoundError:
            env[package] = "not installed"
    env["machine"] = f"{platform.machine()}, {os.cpu_count()} cpus"
    return env


def selection(only: str | None) -> tuple[list[str], list[str]]:
    """The halves and the benchmarks that ``--only`` names (all of either if none)."""
    words = [w.strip() for w in (only or "").split(",") if w.strip()]
    unknown = [w for w in words if w not in HALVES and w not in NAMES]
    if unknown:
        raise ValueError(f"unknown {unknown}; choose from {[*HALVES, *NAMES]}")
    halves = [h for h in HALVES if h in words] or list(HALVES)
    names = [n for n in NAMES if n in words] or NAMES
    return halves, names


def run_half(half: str, names: list[str], runs: int) -> list[Row]:
    """The named benchmarks of one half, or one SKIPPED row if it cannot run here."""
    db, module = HALVES[half]
    try:
        suite = importlib.import_module(module)
        reason = suite.unavailable()
    except ImportError as exc:  # psycopg comes with the ``postgres`` extra
        suite, reason = None, f"{exc.name} is not installed (pip install -e '.[postgres]')"
    if suite is None or reason:
        log(f"{db}: SKIPPED: {reason}")
        return [Row(db, "every benchmark", ", ".join(names), None, "", skipped=reason)]
    rows: list[Row] = []
    for name in names:
        log(f"{db} {name}: {suite.BENCHMARKS[name].__doc__}")
        rows += suite.BENCHMARKS[name](runs)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one repetition per benchmark")
    parser.add_argument("--only", help=f"comma-separated: {', '.join([*HALVES, *NAMES])}")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--scale", action="store_true", help="the scale suite (scale.py)")
    args = parser.parse_args(argv)
    if args.scale:
        if args.only:
            parser.error("--scale runs the whole scale suite: --only does not apply")
        return run_scale(args.quick, args.json)
    try:
        halves, names = selection(args.only)
    except ValueError as exc:
        parser.error(str(exc))
    runs = 1 if args.quick else 3
    started = time.perf_counter()
    rows: list[Row] = []
    for half in halves:
        rows += run_half(half, names, runs)
    elapsed = time.perf_counter() - started
    log(f"took {elapsed:.0f} s")
    env = environment()
    if args.json:
        report = {"environment": env, "runs": runs, "elapsed_s": round(elapsed, 1),
                  "rows": [r.to_dict() for r in rows]}  # fmt: skip
        print(json.dumps(report, indent=2))
        return 0
    title = (f"sqljobs benchmarks, median of {runs} run(s): "
             + ", ".join(f"{k} {v}" for k, v in env.items()))  # fmt: skip
    console = Console(width=None if sys.stdout.isatty() else 220)
    console.print(table(rows, title))
    counts = {s: sum(r.status == s for r in rows) for s in ("PASS", "MISS", "ERROR", "SKIPPED")}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()) + f"; took {elapsed:.0f} s")
    return 0


def run_scale(quick: bool, as_json: bool) -> int:
    """The scale suite: its three tables (or JSON), with what was measured on."""
    import scale
    import scale_report

    started = time.perf_counter()
    sections = scale.run(quick)
    elapsed = time.perf_counter() - started
    log(f"took {elapsed:.0f} s")
    env = environment()
    if as_json:
        report = {"environment": env, "quick": quick, "elapsed_s": round(elapsed, 1),
                  "sections": {title: {"rows": [r.to_dict() for r in s.rows], "notes": s.notes}
                               for title, s in sections.items()}}  # fmt: skip
        print(json.dumps(report, indent=2))
        return 0
    console = Console(width=None if sys.stdout.isatty() else 220)
    console.print(escape(f"sqljobs at scale{' (--quick)' if quick else ''}: "
                         + ", ".join(f"{k} {v}" for k, v in env.items())))  # fmt: skip
    rows = []
    for title, section in sections.items():
        console.print(scale_report.pivot(title, section.rows))
        for line in section.notes:
            console.print(escape(line))
        rows += section.rows
    counts = {s: sum(r.status == s for r in rows) for s in ("PASS", "MISS", "ERROR", "SKIPPED")}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()) + f"; took {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
