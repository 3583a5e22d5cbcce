"""Nothing a user passes reaches SQL except as a bound parameter (issue 16, "Hostile input").

Two checks, because neither alone is sound:

1. **By reading the code** (``test_sql_text_is_built_only_from_reviewed_parts``). Every
   statement sqljobs runs is a named query from a ``.sql`` file; the only text put into a
   statement at run time fills a ``{marker}``. The test walks the AST of every module and
   lists (a) each call of ``execute``/``executemany``/``executescript`` whose statement is
   built in place (an f-string, ``%``, ``+``, ``.format``) and (b) each ``.replace`` that
   fills a ``{marker}``, and compares both lists with the reviewed ones below, each with
   the reason its value cannot come from a user. A new interpolation fails the test until
   someone reviews it and adds it here. It also checks that the ``.sql`` files use no
   marker outside that list. This covers paths no test runs, but cannot see a value that
   reaches an allowed marker by a route nobody foresaw: hence the second check.
2. **By watching the driver** (``test_hostile_values_never_appear_in_statement_text``).
   Every statement sent through sqlite3 and psycopg is recorded (a sqlite3 connection
   subclass, psycopg's ``Cursor.execute`` wrapped) while a hostile value goes through every
   public path that takes a string: enqueue by name and by key, arguments, schedules, job
   filters and bulk actions, the dashboard's filters, ``idempotent()`` keys, a worker's
   catalogue, results and error messages. The value must never appear in any statement's
   text; it may only travel as a parameter. (sqlite3's trace callback would not do: it
   shows statements with their parameters already expanded.)

The dashboard property at the end checks the same from the outside: hostile filters give
200 or 400, never 500, and change no row.
"""

from __future__ import annotations

import ast
import functools
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

import sqljobs
from sqljobs import App, JobContext, JobFilter, JobState, Retry
from sqljobs.dashboard import create_app

from .conftest import db_execute, is_pg
from .test_hostile_enqueue import texts

SRC = Path(sqljobs.__file__).resolve().parent

BUILT_STATEMENTS = {
    ("lab/claimticker.py", "TABLE"): "a module constant",
    ("lab/e10_workflows.py", "TABLE"): "a module constant",
    ("lab/workflow_load.py", "TABLE, mark, mark"): "a module constant and the driver's placeholder",
    ("lab/db.py", "name"): "the lab's own generated database name",
    ("lab/e4_idempotency.py", "AMOUNT, self.p"): "a constant and the driver's placeholder",
    ("lab/e4_idempotency.py", "self.p"): "the driver's placeholder",
    ("lab/e4_idempotency.py", "bank.p"): "the driver's placeholder",
    ("testing/plugin.py", "name"): "the plugin's generated test database name",
    ("testing/plans.py", "'EXPLAIN QUERY PLAN ' + sql"): "a test's own statement, explained",
    ("testing/plans.py", "f'EXPLAIN ({options}) ' + sql"): (
        "a test's own statement, explained with one of two fixed option lists"
    ),
    ("notifiers/postgres.py", "self._probe_channel"): "a channel named by a random uuid hex",
}
"""Statements built in place (by module, and what they interpolate), and why what they
interpolate is no user's input."""

MARKERS = {
    "{schema}": "the schema option, refused unless it is a plain identifier (PostgresBackend)",
    "{schema}.": "removed, for a connection no backend handed out (mark_idempotent)",
    "{queue_filter}": "one of two fixed fragments from the .sql files (_filtered)",
    "{levels}": "one of two fixed CTEs from the .sql files (_filled)",
    "{level_queue}": "one of two fixed fragments from the .sql files (_filled)",
    "{level_tasks}": "a fixed fragment from the .sql files, or nothing (_filled)",
    "{level_jobs}": "one of three fixed SELECTs from SQLite's .sql file (_filled)",
    "{level_picked}": "a fixed CTE from PostgreSQL's .sql files (_filled)",
    "{claim_chosen}": "a fixed UPDATE from PostgreSQL's .sql files (_filled)",
    "{levels_of_keys}": "a fixed CTE from the .sql files (_filled)",
    "{lease}": "one of two fixed SET fragments from SQLite's .sql file (_filled)",
    "{where}": "fixed fragments from browse.sql joined by AND (ops.browsing._where)",
    "{columns}": "a column list from the .sql files",
    "{job_columns}": "a column list from the .sql files",
    "{milliseconds}": "str(int(...)) of the busy timeout, a number",
    "{level}": "a SQLite synchronous level, one of four checked names",
    "{channel}": "sqljobs_ + the checked schema name",
}
"""The markers sqljobs fills in statement text at run time, and where each value comes from."""


def _built_statements() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(statements built in place, markers filled by .replace) in every module of src."""
    built: set[tuple[str, str]] = set()
    markers: set[tuple[str, str]] = set()
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), where)):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            name, args = node.func.attr, node.args
            if name in ("execute", "executemany", "executescript") and args:
                statement = args[0]
                formatted = isinstance(statement, ast.Call) and (
                    isinstance(statement.func, ast.Attribute) and statement.func.attr == "format"
                )
                concatenated = isinstance(statement, ast.BinOp) and isinstance(
                    statement.op, ast.Mod | ast.Add
                )
                if isinstance(statement, ast.JoinedStr):
                    parts = [v.value for v in statement.values if isinstance(v, ast.FormattedValue)]
                    built.add((where, ", ".join(ast.unparse(part) for part in parts)))
                elif formatted or concatenated:
                    built.add((where, ast.unparse(statement)))
            if name == "replace" and args and isinstance(args[0], ast.Constant):
                marker = args[0].value
                if isinstance(marker, str) and re.fullmatch(r"\{\w+\}\.?", marker):
                    markers.add((where, marker))
    return built, markers


def test_sql_text_is_built_only_from_reviewed_parts() -> None:
    built, markers = _built_statements()
    assert built == set(BUILT_STATEMENTS), (
        "a statement is built in place: pass user values as parameters, or review it and "
        f"add it to BUILT_STATEMENTS: {sorted(built ^ set(BUILT_STATEMENTS))}"
    )
    unknown = {(where, m) for where, m in markers if m not in MARKERS}
    assert not unknown, f"a new marker is filled into statement text; review it: {unknown}"
    for path in SRC.rglob("*.sql"):
        used = set(re.findall(r"\{\w+\}", path.read_text()))
        assert used <= set(MARKERS) | {"{placeholders}"}, (path, used - set(MARKERS))


# -- watching the drivers -------------------------------------------------------------------

MARK = "zq'\"; DROP TABLE sqljobs_jobs; -- %s ? :x $1 {schema}"
"""A hostile value that is easy to find in statement text: it must never be there."""
FOUND = "zq'"


class _Cursor(sqlite3.Cursor):
    seen: list[str]

    def execute(self, sql: str, *args: Any) -> Any:
        _Connection.seen.append(sql)
        return super().execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        _Connection.seen.append(sql)
        return super().executemany(sql, *args)


class _Connection(sqlite3.Connection):
    """A sqlite3 connection that writes down every statement it is given."""

    seen: list[str] = []

    def cursor(self, factory: Any = _Cursor) -> Any:
        return super().cursor(factory)

    def execute(self, sql: str, *args: Any) -> Any:
        self.seen.append(sql)
        return super().execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        self.seen.append(sql)
        return super().executemany(sql, *args)

    def executescript(self, sql: str) -> Any:
        self.seen.append(sql)
        return super().executescript(sql)


@pytest.fixture
def statements(url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement text the app's driver is given during the test."""
    seen: list[str] = []
    if is_pg(url):
        import psycopg

        for name in ("execute", "executemany"):
            real = getattr(psycopg.Cursor, name)

            def recording(self: Any, query: Any, *args: Any, _real: Any = real, **kw: Any) -> Any:
                seen.append(query if isinstance(query, str) else repr(query))
                return _real(self, query, *args, **kw)

            monkeypatch.setattr(psycopg.Cursor, name, recording)
    else:
        _Connection.seen = seen
        monkeypatch.setattr(
            sqlite3, "connect", functools.partial(sqlite3.connect, factory=_Connection)
        )
    yield seen


def test_hostile_values_never_appear_in_statement_text(
    url: str, statements: list[str], tmp_path: Path
) -> None:
    app = App(url)

    @app.task(name=MARK, retry=Retry(max_attempts=1))
    def hostile(ctx: JobContext, value: str) -> None:
        ctx.progress(1, note=MARK)
        if value == "fail":
            raise RuntimeError(MARK)
        with ctx.transaction() as tx:  # the job completes with it
            sqljobs.idempotent(tx, MARK)

    @app.task(name="plain")
    def plain(**kwargs: Any) -> None: ...

    @app.task(name="answer")
    def answer() -> str:
        return MARK

    done = hostile.with_options(key=MARK).enqueue(MARK)
    answered = answer.enqueue()
    failed = hostile.enqueue("fail")
    app.enqueue(MARK + " elsewhere", args=[MARK], kwargs={MARK: MARK}, key=MARK + "2", known=False)
    plain.enqueue_many([{"x": MARK}, {MARK: 1}])
    app.schedule(MARK, every=3600, task="plain", kwargs={"x": MARK})
    assert app.get_schedule(MARK) is not None
    app.pause_schedule(MARK)
    app.resume_schedule(MARK)
    app.run_until_empty(timeout=20)
    assert done.refresh().state is JobState.DONE and answered.result(timeout=5) == MARK
    assert MARK in (app.job(failed.id).refresh().last_error or "")
    for field in ("task", "key", "text"):
        wanted = JobFilter(**{field: MARK})  # type: ignore[arg-type]
        found = app.find_jobs(wanted).jobs  # text matches the arguments as stored: JSON,
        assert found or field == "text"  # where MARK's quote is escaped
        app.count_jobs(wanted)
    app.retry_jobs(JobFilter(task=MARK, state="dead"))
    app.cancel_jobs(JobFilter(key=MARK + "2"))
    app.delete_jobs(JobFilter(key=MARK + "2", state="cancelled"))
    client = TestClient(create_app(app), base_url="http://127.0.0.1")
    for page in ("/jobs", "/api/jobs"):
        response = client.get(page, params={"task": MARK, "key": MARK, "text": MARK})
        assert response.status_code == 200
    assert app.unschedule(MARK)

    assert len(statements) > 50, "nothing recorded: the recording hooks are not in the path"
    leaked = [sql for sql in statements if FOUND in sql]
    assert not leaked, f"a hostile value reached statement text: {leaked[0][:300]}"
    assert app.stats().counts  # and the table is still there


# -- the dashboard's filters ---------------------------------------------------------------

DB = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PARAMS = ["state", "queue", "task", "key", "text", "since", "until", "before", "limit", "ids",
          "action", "back", "nope", "task[]"]  # fmt: skip
ODD_VALUES = ["-1", "0", "1e400", "nan", "9" * 40, "1,2,x", "2026-13-45", "1h", "dead",
              "' OR 1=1 --"]  # fmt: skip
params = st.lists(
    st.tuples(st.sampled_from(PARAMS), st.one_of(texts, st.sampled_from(ODD_VALUES))),
    max_size=4,
)


def _rows(app: App) -> list[tuple[Any, ...]]:
    return [
        tuple(r) for r in db_execute(app, "SELECT id, state, task FROM sqljobs_jobs ORDER BY id")
    ]


def test_hostile_dashboard_filters_answer_200_or_400_and_change_nothing(app: App) -> None:
    @app.task(name="shown")
    def shown() -> None: ...

    for _ in range(3):
        shown.enqueue()
    app.enqueue("shown", key="'; DROP TABLE sqljobs_jobs; --")
    before = _rows(app)
    client = TestClient(create_app(app), base_url="http://127.0.0.1")  # a 500 raises here

    @given(query=params, page=st.sampled_from(["/jobs", "/api/jobs", "/jobs/confirm"]))
    @DB
    def check(query: list[tuple[str, str]], page: str) -> None:
        try:
            "".join(v for _, v in query).encode()
        except UnicodeEncodeError:
            return  # a URL carries UTF-8: a lone surrogate cannot be sent
        sent: list[tuple[str, str | int | float | bool | None]] = list(query)
        response = client.get(page, params=sent)
        assert response.status_code in (200, 400), (page, query, response.text[:300])

    check()
    for job_id in ("0", "-1", "9" * 40, "1e3", "abc", "%27%3B%20DROP%20TABLE%20x", "1%00"):
        for page in (f"/jobs/{job_id}", f"/api/jobs/{job_id}"):
            assert client.get(page).status_code in (400, 404), page
    assert _rows(app) == before
