"""SQLite backend: jobs in one file, shared by the processes of one host.

What is the same on PostgreSQL is in :mod:`..shared` and :mod:`..ops`; the
package holds what SQLite does its own way: connections and transactions
(:mod:`.connections`), the enqueue (:mod:`.enqueuer`), and here the claim (one ``UPDATE
... RETURNING``) and outcomes and leases written row by row in one transaction.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...errors import ConfigurationError
from ...jobs import FINISHED_STATES, ClaimedJob, HeldJob, JobState, Outcome
from ...notifiers.sqlite import SqliteNotifier
from ..ops.claims import LimitedScans
from ..records import Claim
from ..rows import claimed_jobs, columns, result
from .connections import SqliteConnections
from .enqueuer import SqliteEnqueuer
from .sql import MIGRATIONS, Q

RATE_OPENED_LATELY = 0.05
"""A rate's window that opened this recently still counts as the next opening (as now):
it may have opened between a worker's claim and its question of when to look again."""
LIMITED_KEYS = 256
"""At most this many limit keys are looked at per claim (starting where the last claim
left off, so every key gets its turn)."""


class SqliteBackend(SqliteConnections, SqliteEnqueuer):
    """Jobs in one SQLite file, shared by the processes of one host."""

    claim_lanes = 1  # one writer at a time: a second claim in flight would only wait
    one_writer = True
    async_connections = False  # the standard library has no async SQLite connection

    def __init__(
        self,
        path: str,
        *,
        url: str | None = None,
        synchronous: str = "FULL",
        busy_timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
        listen: bool = True,
    ) -> None:
        if path in ("", ":memory:") or path.startswith("file::memory:"):
            raise ConfigurationError(
                "an in-memory SQLite database cannot be shared between the enqueuer and the "
                "workers: use a file, e.g. sqlite:///jobs.db"
            )
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA", "OFF"):
            raise ConfigurationError(f"unknown SQLite synchronous level {synchronous!r}")
        self.path = path
        self.url = url or f"sqlite:///{path}"
        self.synchronous = synchronous.upper()
        self.busy_timeout = busy_timeout
        self.clock = clock
        self.sql = Q
        self.migrations = MIGRATIONS
        self._wakeups = SqliteNotifier(self._data_version, path, push=listen)
        self.notifier = self._wakeups
        self._local = threading.local()
        self._turn = (os.getpid(), threading.RLock())
        self._migrate_lock = threading.Lock()
        self._limit_cursor = ""  # where the next limited claim starts its key scan
        self._statements: dict[tuple[str, int, bool, str], str] = {}  # see _filled
        self._scans = LimitedScans()

    def filtered(
        self, name: str, queues: Sequence[str] | None, tasks: Collection[str] | None
    ) -> tuple[str, dict[str, Any]]:
        """One queue uses the (queue, ...) indexes directly; several go through json_each."""
        params: dict[str, Any] = {}
        if queues:
            params["queues"] = json.dumps(list(queues))  # (the levels read them so)
            if len(queues) == 1:
                params["queue"] = queues[0]
        if tasks is not None:
            params["tasks"] = json.dumps(list(tasks))
        return self._filled(name, len(queues or ()), tasks is not None), params

    def _claim_statement(self, name: str, claim: Claim) -> tuple[str, dict[str, Any]]:
        """As every backend's, but a worker that gives all its tasks one lease gets a claim
        that sets it as such, with no lookup a row (it claims only the tasks it leases)."""
        sql, params = super()._claim_statement(name, claim)
        leases = set(claim.leases.values()) if name == "claim" and claim.leases else ()
        if len(leases) == 1:
            (params["lease"],) = leases
            sql = self._filled(name, len(claim.queues or ()), True, "lease_of_all_tasks")
        return sql, params

    def _filled(
        self, name: str, queues: int, tasks: bool, lease: str = "lease_of_each_task"
    ) -> str:
        """Statement ``name`` for a worker of ``queues`` queues (0: all), of some tasks or
        all: its filter fragments put in (each variant made once, not on every claim)."""
        key = (name, min(queues, 2), tasks, lease)
        sql = self._statements.get(key)
        if sql is None:
            by_queue = ("", Q["filter_one_queue"], Q["filter_queues"])[min(queues, 2)]
            by_task = Q["filter_tasks"] if tasks else ""
            jobs = ("level_jobs_of_all", "level_jobs_of_queue", "level_jobs_of_queues")
            sql = (
                Q[name]
                .replace("{levels_of_keys}", Q["levels_of_keys"])
                .replace("{queue_filter}", f"{by_queue} {by_task}")
                .replace("{level_jobs}", Q[jobs[min(queues, 2)]])
                .replace("{levels}", Q["levels_of_queues" if queues else "levels_of_all"])
                .replace("{level_queue}", Q["level_of_queue" if queues else "level_of_any"])
                .replace("{level_tasks}", by_task)
                .replace("{lease}", Q[lease])
            )
            self._statements[key] = sql
        return sql

    def array(self, values: Iterable[Any]) -> Any:
        return json.dumps(list(values))

    def migrate(self) -> list[str]:
        with self._migrate_lock:
            return super().migrate()

    def _prune_batch(self, params: Mapping[str, Any]) -> int:
        """Delete one batch and keep its keys, in one write transaction (SQLite's DELETE
        cannot feed an INSERT in one statement, as PostgreSQL's does)."""

        def work(conn: sqlite3.Connection) -> int:
            gone = result(conn.execute(Q["prune_finished"], params))
            columns = ("key", "job_id", "task", "state", "expires_at")
            kept = [
                dict(zip(columns, row, strict=True), now=params["now"])
                for row in gone.pick(*columns)
                if row[0] is not None and row[4] > params["now"]
            ]
            if kept:
                conn.executemany(Q["spend_key"], kept)
            return len(gone.rows)

        return self.write(work)

    def _finish_and_claim(
        self, outcomes: Sequence[Outcome], claim: Claim
    ) -> tuple[list[int], list[ClaimedJob]]:
        """One write transaction: the outcomes row by row, then the claim, one statement
        (jobs under a concurrency limit first, by their own statements)."""
        wanted = min(claim.limit, claim.at_once + claim.limited_buffer)
        marker = self.change_marker() if claim.limited and wanted else None
        with self._writing() as conn:
            written = self._finish(conn, outcomes, claim.started)
            if claim.limited and written:  # slots may have come free for other processes
                self._made_work(claim.queues)
            jobs: list[ClaimedJob] = []
            if claim.limited and wanted:
                jobs = self._claim_limited(conn, outcomes, written, claim, marker)
            if 0 < claim.at_once < len(jobs):  # (all or none buffered: marked in the claim)
                buffered = json.dumps([j.id for j in jobs[claim.at_once :]])
                conn.execute(Q["mark_prefetched"], {"ids": buffered})
            if claim.limit > len(jobs):  # the claim marks its own buffered jobs
                rest = replace(claim, limit=claim.limit - len(jobs),
                               start_now=max(0, claim.at_once - len(jobs)))  # fmt: skip
                sql, params = self._claim_statement("claim", rest)
                cur = conn.execute(sql, params)
                jobs += claimed_jobs(columns(cur) or (), cur.fetchall())
        return written, jobs

    def _claim_limited(
        self,
        conn: sqlite3.Connection,
        outcomes: Sequence[Outcome],
        written: Sequence[int],
        claim: Claim,
        marker: int | None,
    ) -> list[ClaimedJob]:
        """Jobs under a concurrency limit, in the caller's write transaction, no more than
        start at once and may wait in the buffer: first the heirs of the limited jobs
        that just ended (each takes the slot its key's ended job held), then, unless every
        ended job handed its slot over and the last full claim found no free slot (see
        LimitedScans), for each key with pending jobs as many as it has free slots."""
        wanted = min(claim.limit, claim.at_once + claim.limited_buffer)
        jobs: list[ClaimedJob] = []
        if written:
            sql, params = self._claim_statement("hand_over", claim)
            params.update(ended=json.dumps(list(written)), limit=wanted)
            cur = conn.execute(sql, params)
            jobs = claimed_jobs(columns(cur) or (), cur.fetchall())
        # every outcome counts as limited here: one that was not, or left its slot free,
        # makes the next round trip the full claim
        self._scans.handed_over(len(outcomes), len(jobs))
        if wanted <= len(jobs) or self._scans.may_skip(outcomes, marker):
            return jobs
        left = replace(claim, limit=wanted - len(jobs),
                       start_now=max(0, claim.at_once - len(jobs)))  # fmt: skip
        scanned = self._scan_limited(conn, left)
        self._scans.scanned(len(scanned), left.limit, marker)
        return jobs + scanned

    def _scan_limited(self, conn: sqlite3.Connection, claim: Claim) -> list[ClaimedJob]:
        """For each key with pending jobs, as many as it has free slots (see
        sqljobs.limits), up to ``claim.limit`` in all."""
        keys = self._limited_keys(conn)
        if not keys:
            return []
        sql, params = self._claim_statement("limited_candidates", claim)
        params.update(most=claim.limit, keys=json.dumps(keys))
        now = params["now"]
        counted = {"keys": json.dumps(keys), "now": now}
        running = dict(conn.execute(Q["limit_running"], counted).fetchall())
        by_key: dict[str, list[Any]] = {}  # each key's rows in claim order: the first win
        for row in sorted(conn.execute(sql, params).fetchall(), key=_claim_order):
            by_key.setdefault(row[6], []).append(row)
        candidates, rated = [], dict[int, str]()
        for key, rows in by_key.items():
            _, _, _, limit_max, rate_max, window, _ = rows[0]
            free = len(rows)
            if limit_max is not None:
                free = min(free, limit_max - running.get(key, 0))
            if rate_max is not None and free > 0:
                since = {"key": key, "since": now - window}
                conn.execute(Q["drop_starts"], since)
                (recent,) = conn.execute(Q["count_starts"], since).fetchone()
                free = min(free, rate_max - recent)
                rated.update((row[0], key) for row in rows)
            candidates += rows[: max(0, free)]
        if not candidates:
            return []
        candidates.sort(key=_claim_order)
        params["ids"] = json.dumps([row[0] for row in candidates[: claim.limit]])
        cur = conn.execute(Q["claim_ids"], params)
        jobs = claimed_jobs(columns(cur) or (), cur.fetchall())
        starts = [{"key": rated[j.id], "now": now} for j in jobs if j.id in rated]
        if starts:
            conn.executemany(Q["add_start"], starts)
        return jobs

    def _next_rate_opening(
        self, queues: Sequence[str] | None, tasks: Collection[str] | None
    ) -> float | None:
        """In how many seconds the first rate-limited key with due jobs may start one."""
        sql, params = self.filtered("rate_keys", queues, tasks)
        now = params["now"] = self.now()

        def work(conn: Any) -> float | None:
            soonest = None
            for key, rate_max, window in conn.execute(sql, params).fetchall():
                nth = conn.execute(Q["window_start"], {"key": key, "nth": rate_max - 1})
                row = nth.fetchone()
                if row is None or row[0] + window <= now - RATE_OPENED_LATELY:
                    continue  # its rate is not what holds it back
                opens = max(0.0, row[0] + window - now)
                soonest = opens if soonest is None else min(soonest, opens)
            return soonest

        return self.read(work)

    def _limited_keys(self, conn: sqlite3.Connection) -> list[str]:
        """Up to LIMITED_KEYS keys with pending jobs, from where the last scan stopped."""
        scan = Q["limited_keys"]
        after = self._limit_cursor
        keys = [k for (k,) in conn.execute(scan, {"after": after, "max_keys": LIMITED_KEYS})]
        if len(keys) < LIMITED_KEYS and after:  # wrap around to the first keys
            more = conn.execute(scan, {"after": "", "max_keys": LIMITED_KEYS - len(keys)})
            keys += [k for (k,) in more if k <= after]
        self._limit_cursor = keys[-1] if len(keys) >= LIMITED_KEYS else ""
        return keys

    def _finish(
        self, conn: Any, outcomes: Sequence[Outcome], started: Sequence[HeldJob] = ()
    ) -> list[int]:
        """In the caller's transaction: the plain completions (most of them) in one
        statement, the rest row by row. A completion the plain statements leave alone
        (the job was fenced off, or others wait for it) goes through ``finish_job``, which
        tells which; the children of jobs that ended are settled last."""
        now = self.now()
        written = []
        parents: list[tuple[int, str]] = []
        plain = [_plain(o) for o in outcomes]
        completed: set[tuple[int, int]] = set()
        if any(plain):
            pairs = [[o.job_id, o.token] for o, p in zip(outcomes, plain, strict=True) if p]
            found = conn.execute(Q["complete_jobs"], {"pairs": json.dumps(pairs), "now": now})
            completed = set(found)
        complete_with, finish = Q["complete_job_with"], Q["finish_job"]
        for o, is_plain in zip(outcomes, plain, strict=True):
            if is_plain and (o.job_id, o.token) in completed:
                completed.discard((o.job_id, o.token))  # a twin in the batch is not written
                written.append(o.job_id)
                continue
            if o.plain and not is_plain:  # a completion that stores a result or progress
                params = {"id": o.job_id, "token": o.token, "now": now, "result": o.result,
                          "progress": o.progress}  # fmt: skip
                if conn.execute(complete_with, params).rowcount == 1:
                    written.append(o.job_id)
                    continue
            row = conn.execute(finish, _outcome_params(o, now)).fetchone()
            if row is not None:
                written.append(o.job_id)
                if row[0] and o.state in FINISHED_STATES:
                    parents.append((o.job_id, o.state.value))
        if parents:
            self.settle_children(conn, parents)
        if any(o.state is JobState.PENDING and not o.delay for o in outcomes):
            self._made_work(None)  # handed back (a drain, a reaped lease): others may run it
        if started:
            held = json.dumps([[h.id, h.token] for h in started])
            conn.execute(Q["mark_started"], {"held": held})
        return written

    def renew_leases(self, worker: str, held: Sequence[HeldJob]) -> set[int]:
        now = self.now()
        with self._writing() as conn:
            conn.execute(Q["touch_worker"], {"worker": worker, "now": now})
            if not held:
                return set()
            packed = json.dumps([[h.id, h.token] for h in held])
            renewed = result(conn.execute(Q["renew_leases"], {"held": packed, "now": now}))
        return {job_id for (job_id,) in renewed.pick("id")}

    def hold_slots(self, keep: Sequence[HeldJob], end: Sequence[HeldJob]) -> None:
        now = self.now()
        with self._writing() as conn:
            if keep:
                held = json.dumps([[h.id, h.token] for h in keep])
                conn.execute(Q["renew_holds"], {"held": held, "now": now})
            if end:
                held = json.dumps([[h.id, h.token] for h in end])
                freed = conn.execute(Q["end_holds"], {"held": held}).fetchall()
                if freed:  # slots came free: workers of those queues may claim
                    self._made_work(sorted({queue for (queue,) in freed}))

    def save_progress(self, reports: Sequence[tuple[HeldJob, str]]) -> set[int]:
        if not reports:
            return set()
        held = json.dumps([[h.id, h.token, progress] for h, progress in reports])
        written = self.change("save_progress", {"held": held})
        return {job_id for (job_id,) in written.pick("id")}


def _plain(outcome: Outcome) -> bool:
    """A plain completion with nothing to store but its end: the hot path's statement
    (one that stores a result or progress too costs more for every job, each paying for
    the few that store one)."""
    return outcome.plain and outcome.result is None and outcome.progress is None


def _claim_order(row: Sequence[Any]) -> tuple[int, float, int]:
    """A candidate row's place in claim order: priority (higher first), run_at, id."""
    return (-row[1], row[2], row[0])


def _outcome_params(o: Outcome, now: float) -> dict[str, Any]:
    return {
        "id": o.job_id,
        "token": o.token,
        "state": o.state.value,
        "delay": o.delay,
        "uncharge": 1 if o.uncharge else 0,
        "now": now,
        "error": o.error,
        "traceback": o.traceback,
        "errors": o.errors,
        "lease_expiries": o.lease_expiries,
        "crashes": o.crashes,
        "history": None if o.history is None else json.dumps(o.history),
        "result": o.result,
        "progress": o.progress,
        "hold": 1 if o.hold else 0,
    }
