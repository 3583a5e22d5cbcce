"""Rows to records, by column name, for every backend.

A statement's columns are read by the names its cursor reports, never by position: the
SQL names each column after the field it fills (``attempts AS attempt``), so adding,
dropping or reordering a column cannot silently shift a value into the wrong field; a
column the record needs and the statement lacks fails loudly, naming both. The pickers
are built once per column list and cached, so a claim pays one dictionary lookup for
this, not a search per row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from operator import itemgetter
from typing import Any

from ..jobs import ClaimedJob, ExpiredJob, Job, JobState, Progress, TaskInfo
from ..schedules import SCHEDULE_COLUMNS, ScheduleState, state_from_row
from .base import EffectRecord

Names = tuple[str, ...]
Row = Sequence[Any]

CLAIMED = tuple(f.name for f in fields(ClaimedJob))
EXPIRED = tuple(f.name for f in fields(ExpiredJob))
TASK_INFO = tuple(f.name for f in fields(TaskInfo))
SCHEDULE = tuple(name.strip() for name in SCHEDULE_COLUMNS.split(","))
JOB = (
    "id", "queue", "task", "payload", "key", "state", "priority", "run_at", "created_at",
    "attempts", "max_attempts", "token", "lease", "lease_until", "worker", "started_at",
    "finished_at", "errors", "lease_expiries", "crashes", "last_error", "last_traceback",
    "deadline_at", "history", "result", "progress", "limit_key", "limit_max", "rate_max",
    "rate_window", "parents", "after_policy", "waiting_on", "key_hold", "released_key",
    "debounced",
)  # fmt: skip
"""The columns a statement that shows whole jobs returns (in any order)."""
EFFECT = ("state", "result", "error", "attempts", "mine")
CLAIM_ORDER = ("priority", "run_at", "id")


@dataclass(frozen=True)
class Result:
    """What one statement gave: its column names, its rows and how many rows it touched."""

    names: Names
    rows: list[Any]
    rowcount: int

    def pick(self, *wanted: str) -> list[tuple[Any, ...]]:
        """Each row's values of the ``wanted`` columns, in that order."""
        if wanted == self.names:  # the common case of an exact statement: no copying
            return self.rows
        get = picker(self.names, wanted)
        return [get(row) for row in self.rows]

    def first(self, *wanted: str) -> tuple[Any, ...] | None:
        """The first row's values of the ``wanted`` columns, or None if there is no row."""
        return picker(self.names, wanted)(self.rows[0]) if self.rows else None


def result(cursor: Any) -> Result:
    """Read a DB-API cursor (sqlite3 or psycopg) that has just executed a statement."""
    names = columns(cursor)
    if names is None:
        return Result((), [], cursor.rowcount)
    rows = cursor.fetchall()  # sqlite3 counts a RETURNING statement's rows as they are read
    return Result(names, rows, cursor.rowcount)


def columns(cursor: Any) -> Names | None:
    """The column names of the statement ``cursor`` ran (None: it returns no rows).

    psycopg's are read from libpq's result directly: its ``description`` builds a Column
    object, type lookups included, per column per call, which a claim would pay each time.
    """
    pgresult = getattr(cursor, "pgresult", None)
    if pgresult is not None:
        count = pgresult.nfields
        return tuple(pgresult.fname(i).decode() for i in range(count)) if count else None
    description = cursor.description
    return None if description is None else tuple(column[0] for column in description)


@lru_cache(maxsize=512)
def picker(names: Names, wanted: Names) -> Callable[[Row], tuple[Any, ...]]:
    """A function giving a row's values of ``wanted``, found by name in ``names`` once."""
    missing = [w for w in wanted if w not in names]
    if missing:
        raise LookupError(f"a statement returned columns {names} without {missing}")
    get = itemgetter(*(names.index(w) for w in wanted))
    if len(wanted) == 1:
        return lambda row: (get(row),)
    return get


def claimed_jobs(names: Names, rows: list[Any]) -> list[ClaimedJob]:
    """Claimed rows as jobs, in claim order (highest priority, then oldest due, then
    oldest id): ``UPDATE ... RETURNING`` gives them in no particular order."""
    oldest_first, highest_first = _claim_order(names)
    rows.sort(key=oldest_first)  # then a stable sort by priority: keys made in C, not
    rows.sort(key=highest_first, reverse=True)  # a Python call per row
    get = picker(names, CLAIMED)
    return [ClaimedJob(*get(row)) for row in rows]


@lru_cache(maxsize=64)
def _claim_order(names: Names) -> tuple[Callable[[Row], Any], Callable[[Row], Any]]:
    """Sort keys for claim order: (run_at, id), then priority (descending, stable)."""
    priority, run_at, id_ = (names.index(n) for n in CLAIM_ORDER)
    return itemgetter(run_at, id_), itemgetter(priority)


def expired_job(names: Names, row: Row) -> ExpiredJob:
    """A running job as the reaper sees it (SQLite gives its flags as 0/1)."""
    values = dict(zip(EXPIRED, picker(names, EXPIRED)(row), strict=True))
    values["worker_alive"] = bool(values["worker_alive"])
    values["prefetched"] = bool(values["prefetched"])
    return ExpiredJob(**values)


def job(names: Names, row: Row) -> Job:
    """A whole job, for inspection. A payload that is not the JSON sqljobs writes is
    shown as one argument rather than hidden, and so is a history that is not a JSON list
    (one entry): ``jobs show`` and the dashboard show a damaged row instead of failing on
    it. History arrives as text (SQLite) or already decoded (PostgreSQL's jsonb)."""
    values = dict(zip(JOB, picker(names, JOB)(row), strict=True))
    payload, history = values.pop("payload"), values.pop("history")
    try:
        data = json.loads(payload)
        args, kwargs = list(data.get("args", [])), dict(data.get("kwargs", {}))
    except (ValueError, TypeError, AttributeError, RecursionError):
        args, kwargs = [payload], {}
    values["state"] = JobState(values["state"])
    values["result"] = _decoded(values["result"])
    values["progress"] = progress(values["progress"])
    values["parents"] = _listed(values["parents"])
    return Job(args=args, kwargs=kwargs, history=_listed(history), **values)


def _listed(value: Any) -> list[Any]:
    """A stored JSON list (text, or decoded by the driver); anything else, damaged text
    included, as a list of that one value (None: empty)."""
    if value is None:
        return []
    data = _decoded(value) if isinstance(value, str) else value
    return data if isinstance(data, list) else [data]


def _decoded(text: str | None) -> Any:
    """A stored JSON value (None stays None; text that is not JSON is shown as is)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def progress(text: str | None) -> Progress | None:
    """A job's stored progress (``ctx.progress``), or None if it never reported any."""
    data = _decoded(text)
    if not isinstance(data, dict):
        return None
    return Progress(data.get("done", 0), data.get("total"), data.get("note"), data.get("at", 0.0))


def task_info(names: Names, row: Row) -> TaskInfo:
    values = dict(zip(TASK_INFO, picker(names, TASK_INFO)(row), strict=True))
    values["keyed"] = bool(values["keyed"])  # SQLite gives the flag as 0/1
    return TaskInfo(**values)


def schedule_state(names: Names, row: Row) -> ScheduleState:
    return state_from_row(picker(names, SCHEDULE)(row))


def effect_record(key: str, names: Names, row: Row) -> EffectRecord:
    state, result_, error, attempts, mine = picker(names, EFFECT)(row)
    return EffectRecord(key, state, result_, error, attempts, bool(mine))
