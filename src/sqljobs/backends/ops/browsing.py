"""Finding and changing jobs by filter (:mod:`sqljobs.browse`), written once over each
engine's statements (``browse.sql``).

A filter becomes a WHERE clause joined from fixed fragments, one per field given, so only
the fields asked for constrain the plan (a catch-all ``(:x IS NULL OR col = :x)`` would
hide the index a field could use); every value is a parameter. Bulk actions walk the
matches newest first in batches, each its own transaction, so none holds a lock for long.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...jobs import COUNT_SCAN, ENDED, TEXT_SCAN, Job, JobCount, JobFilter, JobPage, WorkerStatus
from ..executor import Executor
from ..records import JobListing, JobSearch
from ..rows import job, result
from . import job_graph

BATCH = 500
"""Jobs one transaction of a bulk action changes."""
_FIELDS = ("state", "queue", "task", "key", "text", "since", "until", "ids", "skip_tasks")


@dataclass(frozen=True)
class _Range:
    """The ids a query may read, ``low <= id < high``: jobs are numbered as they are
    created, so time bounds, a page's cursor and a confirmed count's newest id are all
    ranges of ids, and a scan by id stops where they do."""

    low: int
    high: int

    def share(self, scan: int) -> _Range:
        """The newest ``scan`` ids of the range: what a bounded scan reads."""
        return _Range(max(self.high - scan, self.low), self.high)


def get_job(ex: Executor, job_id: int) -> Job | None:
    found = ex.query("get_job", {"id": job_id})
    return job(found.names, found.rows[0]) if found.rows else None


def list_jobs(ex: Executor, listing: JobListing) -> list[Job]:
    params = {"state": listing.state, "queue": listing.queue, "limit": listing.limit}
    found = ex.query("list_jobs", params)
    return [job(found.names, row) for row in found.rows]


def _where(ex: Executor, wanted: JobFilter) -> tuple[str, dict[str, Any]]:
    """The filter as a WHERE clause of the engine's fragments (and the range of ids,
    given as ``low`` and ``high``), and its parameters."""
    parts: list[str] = [ex.sql["where_range"]]
    params: dict[str, Any] = {}
    for name in _FIELDS:
        value = getattr(wanted, name)
        if value is None:
            continue
        fragment = f"where_{name}"
        if name == "state" and value in ENDED:
            fragment = "where_state_ended"  # the index on ended jobs serves it
        parts.append(ex.sql[fragment])
        if name in ("ids", "skip_tasks"):
            value = ex.array(value)
        params[name] = value
    return " AND ".join(parts), params


def _statement(ex: Executor, name: str, where: str) -> str:
    return ex.sql[name].replace("{where}", where)


def _range(ex: Executor, wanted: JobFilter, before: int | None = None) -> _Range:
    """The ids ``wanted`` (below ``before``) can match, read on one connection: the
    newest id, and each time bound found by a binary search over the primary key
    (about 20 one-row lookups)."""

    def work(conn: Any) -> _Range:
        newest = int(_result(conn, ex.sql["newest_id"], {}).rows[0][0])
        low, high = 1, newest + 1
        if wanted.since is not None or wanted.until is not None:
            oldest = int(_result(conn, ex.sql["oldest_id"], {}).rows[0][0])
            if wanted.since is not None:
                low = _first_id_at(ex, conn, wanted.since, oldest, high)
            if wanted.until is not None:
                high = _first_id_at(ex, conn, wanted.until, oldest, high)
        if before is not None:
            high = min(high, before)
        if wanted.up_to is not None:
            high = min(high, wanted.up_to + 1)
        return _Range(low, max(high, low))

    return ex.read(work)


def _first_id_at(ex: Executor, conn: Any, moment: float, low: int, high: int) -> int:
    """The id of the first job created at or after ``moment`` (``high`` if none).
    On PostgreSQL a job's time is its transaction's start: a job enqueued inside a
    long transaction of the caller's may be numbered after jobs created later, and
    fall outside a bound it is within by less than that transaction's length."""
    sql = ex.sql["first_job_from"]
    while low < high:
        middle = (low + high) // 2
        row = _result(conn, sql, {"id": middle}).first("id", "created_at")
        if row is None or row[1] >= moment:
            high = middle  # nothing from middle up to that row's id is older
        else:
            low = int(row[0]) + 1
    return low


def find_jobs(ex: Executor, search: JobSearch) -> JobPage:
    wanted, before, limit = search.wanted, search.before, search.limit
    where, params = _where(ex, wanted)
    whole = _range(ex, wanted, before)
    read = whole.share(TEXT_SCAN) if wanted.text is not None and wanted.ids is None else whole
    params.update(low=read.low, high=read.high, limit=limit)
    sql = _statement(ex, "find_jobs", where)
    found = ex.read(lambda conn: _result(conn, sql, params))
    jobs = [job(found.names, row) for row in found.rows]
    if len(jobs) == limit:
        return JobPage(jobs, jobs[-1].id)
    if read.low > whole.low:
        return JobPage(jobs, read.low)  # read its share: the next page searches on below
    return JobPage(jobs, None)


def count_jobs(ex: Executor, wanted: JobFilter, cap: int) -> JobCount:
    where, params = _where(ex, wanted)
    whole = _range(ex, wanted)
    read = whole
    if wanted.ids is None and wanted.key is None:  # else an index finds the few
        read = whole.share(TEXT_SCAN if wanted.text is not None else COUNT_SCAN)
    params.update(low=read.low, high=read.high, cap=cap + 1)
    sql = _statement(ex, "count_jobs", where)
    n = int(ex.read(lambda conn: _result(conn, sql, params)).rows[0][0])
    return JobCount(min(n, cap), n > cap or read.low > whole.low)


def _each_batch(
    ex: Executor, wanted: JobFilter, states: Sequence[str],
    change: Callable[[Any, list[int]], int | list[int]],
    then: Callable[[Executor, list[int]], None] | None = None,
) -> int:  # fmt: skip
    """Run ``change`` on the matches in ``states``, a batch per transaction, newest
    first; return how many it changed. ``then`` is given the ids of each batch that
    ``change`` answered with, once the batch committed."""
    if not states:
        return 0
    where, params = _where(ex, wanted)
    whole = _range(ex, wanted)
    params.update(states=ex.array(states), limit=BATCH, low=whole.low, high=whole.high)
    sql = _statement(ex, "match_ids", where)
    before = whole.high
    total = 0
    while True:
        params["before"] = before

        def work(conn: Any) -> tuple[int | list[int], int | None]:
            ids = [int(i) for (i,) in _result(conn, sql, params).rows]
            return (change(conn, ids) if ids else 0), (min(ids) if len(ids) == BATCH else None)

        changed, lowest = ex.transaction(work)
        if isinstance(changed, list):
            if then is not None and changed:
                then(ex, changed)
            changed = len(changed)
        total += changed
        if lowest is None:
            return total
        before = lowest


def retry_jobs(ex: Executor, wanted: JobFilter, states: Sequence[str]) -> int:
    params: dict[str, Any] = {"now": ex.now()}

    def change(conn: Any, ids: list[int]) -> int:
        batch = {**params, "ids": ex.array(ids)}
        return int(conn.execute(ex.sql["retry_ids"], batch).rowcount)

    return _each_batch(ex, wanted, states, change)


def cancel_jobs_matching(ex: Executor, wanted: JobFilter, states: Sequence[str]) -> int:
    params: dict[str, Any] = {"now": ex.now(), "channel": ex._event_channel()}

    def change(conn: Any, ids: list[int]) -> list[int]:
        return job_graph.cancel(ex, conn, "cancel_ids", {**params, "ids": ex.array(ids)})

    return _each_batch(ex, wanted, states, change, job_graph.cancel_workflow_children)


def delete_jobs(ex: Executor, wanted: JobFilter, states: Sequence[str]) -> int:
    def change(conn: Any, ids: list[int]) -> int:
        return int(conn.execute(ex.sql["delete_ids"], {"ids": ex.array(ids)}).rowcount)

    return _each_batch(ex, wanted, states, change)


def worker_statuses(ex: Executor) -> list[WorkerStatus]:
    workers = ex.query("worker_statuses", {"now": ex.now()})
    rows = [dict(zip(workers.names, row, strict=True)) for row in workers.rows]
    running: dict[str, list[Job]] = {r["id"]: [] for r in rows}
    if rows:
        found = ex.query("running_of", {"workers": ex.array(running)})
        for row in found.rows:
            held = job(found.names, row)
            if held.worker in running:
                running[held.worker].append(held)
    return [
        WorkerStatus(
            id=r["id"],
            host=r["host"],
            pid=int(r["pid"]),
            queues=json.loads(r["queues"]),
            concurrency=int(r["concurrency"]),
            started_at=float(r["started_at"]),
            last_seen=float(r["last_seen"]),
            heartbeat_interval=float(r["heartbeat_interval"]),
            tasks=json.loads(r["tasks"]),
            running=running[r["id"]],
        )
        for r in rows
    ]


def job_children(ex: Executor, job_id: int, limit: int) -> list[int]:
    found = ex.query("job_children", {"id": job_id, "limit": limit})
    return [int(i) for (i,) in found.rows]


def _result(conn: Any, sql: str, params: dict[str, Any]) -> Any:
    return result(conn.execute(sql, params))
