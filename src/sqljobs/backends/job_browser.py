"""Finding and changing jobs by filter (:mod:`sqljobs.browse`), written once over each
dialect's statements (``browse.sql``).

A filter becomes a WHERE clause joined from fixed fragments, one per field given, so only
the fields asked for constrain the plan (a catch-all ``(:x IS NULL OR col = :x)`` would
hide the index a field could use); every value is a parameter. Bulk actions walk the
matches newest first in batches, each its own transaction, so none holds a lock for long.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ..browse import COUNT_SCAN, ENDED, TEXT_SCAN, JobCount, JobFilter, JobPage, WorkerStatus
from ..jobs import Job
from .core import BackendCore
from .rows import job, result

BATCH = 500
"""Jobs one transaction of a bulk action changes."""
_FIELDS = ("state", "queue", "task", "key", "text", "since", "until", "ids")


class JobBrowser(BackendCore):
    """The browsing and bulk-action methods of the Backend protocol."""

    def _where(self, wanted: JobFilter) -> tuple[str, dict[str, Any]]:
        """The filter as a WHERE clause of the dialect's fragments, and its parameters."""
        parts: list[str] = []
        params: dict[str, Any] = {}
        for name in _FIELDS:
            value = getattr(wanted, name)
            if value is None:
                continue
            fragment = f"where_{name}"
            if name == "state" and value in ENDED:
                fragment = "where_state_ended"  # the index on ended jobs serves it
            parts.append(self.sql[fragment])
            if name == "text":
                value = value.lower()
            elif name == "ids":
                value = self._array(value)
            params[name] = value
        return " AND ".join(parts) or "1 = 1", params

    def _filtered_statement(self, name: str, where: str, extra: Sequence[str] = ()) -> str:
        clause = " AND ".join([where, *(self.sql[f"where_{e}"] for e in extra)])
        return self.sql[name].replace("{where}", clause)

    def _first_id_at(self, moment: float) -> int:
        """The id of the first job created at or after ``moment`` (one past the newest if
        none): a binary search over the primary key, about 20 lookups of one row."""
        low, high = self._query("oldest_id").rows[0][0], self._newest_id() + 1
        while low < high:
            middle = (low + high) // 2
            row = self._query("first_job_from", {"id": middle}).first("id", "created_at")
            if row is None or row[1] >= moment:
                high = middle  # nothing from middle up to that row's id is older
            else:
                low = int(row[0]) + 1
        return int(low)

    def _time_bounds(self, wanted: JobFilter, params: dict[str, Any]) -> list[str]:
        """A creation time bound as a range of ids too, so that a scan by id stops where
        the time does instead of reading every older job. Jobs are numbered as they are
        created; on PostgreSQL a job's time is its transaction's start, so jobs enqueued
        at the same instant by concurrent transactions may be numbered out of time order
        by that transaction's length: those within it of a bound may fall outside."""
        extra = []
        if wanted.since is not None:
            params["since_id"] = self._first_id_at(wanted.since)
            extra.append("since_id")
        if wanted.until is not None:
            params["until_id"] = self._first_id_at(wanted.until)
            extra.append("until_id")
        return extra

    def find_jobs(self, wanted: JobFilter, before: int | None, limit: int) -> JobPage:
        where, params = self._where(wanted)
        extra = self._time_bounds(wanted, params)
        if before is not None:
            extra.append("before")
            params["before"] = before
        floor = None
        if wanted.text is not None and wanted.ids is None:
            top = before if before is not None else self._newest_id() + 1
            floor = max(top - TEXT_SCAN, 1)
            extra.append("floor")
            params["floor"] = floor
        params["limit"] = limit
        sql = self._filtered_statement("find_jobs", where, extra)
        found = self._read(lambda conn: _result(conn, sql, params))
        jobs = [job(found.names, row) for row in found.rows]
        if len(jobs) == limit:
            return JobPage(jobs, jobs[-1].id)
        if floor is not None and floor > 1:
            return JobPage(jobs, floor)  # read its share: the next page searches on below
        return JobPage(jobs, None)

    def _newest_id(self) -> int:
        return int(self._query("newest_id").rows[0][0])

    def count_jobs(self, wanted: JobFilter, cap: int) -> JobCount:
        where, params = self._where(wanted)
        params["cap"] = cap + 1
        extra = self._time_bounds(wanted, params)
        floor = 1
        if wanted.ids is None and wanted.key is None:  # else an index finds the few
            scan = TEXT_SCAN if wanted.text is not None else COUNT_SCAN
            floor = max(self._newest_id() + 1 - scan, 1)
            extra.append("floor")
            params["floor"] = floor
        sql = self._filtered_statement("count_jobs", where, extra)
        n = int(self._read(lambda conn: _result(conn, sql, params)).rows[0][0])
        return JobCount(min(n, cap), n > cap or floor > 1)

    def _each_batch(
        self, wanted: JobFilter, states: Sequence[str], change: Callable[[Any, list[int]], int]
    ) -> int:
        """Run ``change`` on the matches in ``states``, a batch per transaction, newest
        first; return how many it changed."""
        if not states:
            return 0
        where, params = self._where(wanted)
        params.update(states=self._array(states), limit=BATCH)
        sql = self._filtered_statement("match_ids", where, self._time_bounds(wanted, params))
        before = self._newest_id() + 1
        total = 0
        while True:
            params["before"] = before

            def work(conn: Any) -> tuple[int, int | None]:
                ids = [int(i) for (i,) in _result(conn, sql, params).rows]
                return (change(conn, ids) if ids else 0), (min(ids) if len(ids) == BATCH else None)

            changed, lowest = self._transaction(work)
            total += changed
            if lowest is None:
                return total
            before = lowest

    def retry_jobs(self, wanted: JobFilter, states: Sequence[str]) -> int:
        params: dict[str, Any] = {"now": self.now()}

        def change(conn: Any, ids: list[int]) -> int:
            batch = {**params, "ids": self._array(ids)}
            return int(conn.execute(self.sql["retry_ids"], batch).rowcount)

        return self._each_batch(wanted, states, change)

    def cancel_jobs_matching(self, wanted: JobFilter, states: Sequence[str]) -> int:
        params: dict[str, Any] = {"now": self.now(), "channel": self._event_channel()}

        def change(conn: Any, ids: list[int]) -> int:
            return self._cancel(conn, "cancel_ids", {**params, "ids": self._array(ids)})

        return self._each_batch(wanted, states, change)

    def delete_jobs(self, wanted: JobFilter, states: Sequence[str]) -> int:
        def change(conn: Any, ids: list[int]) -> int:
            return int(conn.execute(self.sql["delete_ids"], {"ids": self._array(ids)}).rowcount)

        return self._each_batch(wanted, states, change)

    def worker_statuses(self) -> list[WorkerStatus]:
        workers = self._query("worker_statuses", {"now": self.now()})
        rows = [dict(zip(workers.names, row, strict=True)) for row in workers.rows]
        running: dict[str, list[Job]] = {r["id"]: [] for r in rows}
        if rows:
            found = self._query("running_of", {"workers": self._array(running)})
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

    def job_children(self, job_id: int, limit: int) -> list[int]:
        found = self._query("job_children", {"id": job_id, "limit": limit})
        return [int(i) for (i,) in found.rows]


def _result(conn: Any, sql: str, params: dict[str, Any]) -> Any:
    return result(conn.execute(sql, params))
