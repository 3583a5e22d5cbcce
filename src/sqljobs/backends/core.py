"""The Backend protocol's methods that are the same on every engine, written once.

Each runs a named statement of the dialect through one of the dialect's ways to run work
(:class:`~sqljobs.backends.dialect.Dialect`) and maps rows by name
(:mod:`~sqljobs.backends.rows`). What stays in ``sqlite.py`` and ``postgres.py`` is what
the engines really do differently: connections and transactions, the claim, the batch
writes of outcomes and leases, and the enqueue.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from typing import Any

from .. import dependencies
from ..jobs import (
    ClaimedJob,
    Due,
    EnqueueResult,
    HeldJob,
    Job,
    JobState,
    NewJob,
    Outcome,
    SpentKey,
    TaskInfo,
)
from ..limits import QueueLimit
from ..rollup import MetricAmount
from ..stats import (
    COUNT_CAP,
    LIMITS_SHOWN,
    Stats,
    WorkerScope,
    capped_counts,
    limit_usages,
    oldest_due_ages,
    unserved_tasks,
    worker_scope,
)
from .base import Decide, EffectRecord, WorkerInfo
from .dialect import Dialect
from .migrations import apply_migrations, up_to_date
from .records import Claim, EffectEnd, EffectIntent, JobGroup, JobListing, PruneFinished
from .rows import Result, claimed_jobs, effect_record, expired_job, job, result, task_info

_LENT: dict[int, BackendCore] = {}
log = logging.getLogger("sqljobs.dependencies")


@contextmanager
def lending(connection: Any, backend: BackendCore) -> Iterator[None]:
    """While a ``job_transaction()`` block runs, its connection is known to be this
    backend's, so ``sqljobs.idempotent(tx, ...)``, given only the connection, finds the
    backend (its statements, schema and clock)."""
    _LENT[id(connection)] = backend
    try:
        yield
    finally:
        _LENT.pop(id(connection), None)


def lender_of(connection: Any) -> BackendCore | None:
    """The backend whose ``job_transaction()`` handed out ``connection``, if one did."""
    return _LENT.get(id(connection))


def mark_idempotent(
    connection: Any, statement: str, key: str, ttl: float | None, now: float
) -> bool:
    """Insert the marker ``key`` with ``statement`` (the dialect's ``mark_idempotent``)
    in the caller's transaction; True if this call inserted it."""
    expires = None if ttl is None else now + ttl
    cursor = connection.execute(statement, {"key": key, "now": now, "expires": expires})
    return bool(cursor.rowcount == 1)


LIMITED_SCAN_PAUSE = 0.25
"""Seconds a worker whose limited jobs hand their slots over goes without the full limited
claim (key locks, counts), once one found no free slot and nothing announced a change
since (see :class:`LimitedScans`)."""


class LimitedScans:
    """When a worker's limited claim may skip the full one (the scan over keys, which counts
    each key's running jobs, and on PostgreSQL locks the keys) and only hand slots over:
    each completed limited job passes its slot to the next due job of its key in the
    completion's own statement, so the key's running count stays what it was and nothing
    needs counting. That is the drain's steady state: every slot taken, each freed one
    handed on. The full claim still runs when the round trip carries no completion (an
    idle worker), carries other outcomes, when a completion could not hand its slot over
    (no heir due: the slot is free for anyone, and announced), when the last full claim
    found free slots (there may be more), when the backend's change marker moved since
    the last full claim (an enqueue, a slot freed elsewhere, another connection's commit
    on SQLite), and at least every ``LIMITED_SCAN_PAUSE`` (what announces nothing: a
    delayed job falling due, a lease the reaper ended)."""

    def __init__(self) -> None:
        self._skip_until = 0.0
        self._marker: int | None = None

    def may_skip(self, outcomes: Sequence[Outcome], marker: int | None) -> bool:
        """Whether a round trip carrying ``outcomes`` may only hand slots over, the change
        marker reading ``marker`` before it."""
        if not outcomes or marker != self._marker or time.monotonic() >= self._skip_until:
            return False
        return all(o.state is JobState.DONE and o.history is None for o in outcomes)

    def scanned(self, claimed: int, wanted: int, marker: int | None) -> None:
        """A full claim, begun with the change marker at ``marker``, took ``claimed`` of
        the ``wanted`` limited jobs besides the heirs of its own completions: fewer, it
        saw every free slot, so skip it for a while."""
        self._marker = marker
        more = claimed >= wanted > 0
        self._skip_until = 0.0 if more else time.monotonic() + LIMITED_SCAN_PAUSE

    def handed_over(self, limited: int, handed: int) -> None:
        """``limited`` limited jobs ended and ``handed`` heirs took their slots: a slot left
        free makes the next round trip a full claim."""
        if handed < limited:
            self._skip_until = 0.0


class BackendCore(Dialect):
    """The engine-independent half of a backend."""

    server_clock = False
    """Whether a delay counts from the database server's clock (PostgreSQL's setting)."""

    _scans: LimitedScans
    """When this backend's limited claims may only hand slots over."""

    def migrate(self) -> list[str]:
        if up_to_date(self._read, self.sql, self.migrations):
            return []
        return apply_migrations(
            self._transaction, self._run_script, self.sql, self.migrations, self.now
        )

    # -- claims and outcomes ----------------------------------------------------------------

    def claim_jobs(self, claim: Claim) -> list[ClaimedJob]:
        return self.finish_and_claim([], claim)[1]

    def finish_and_claim(
        self, outcomes: Sequence[Outcome], claim: Claim
    ) -> tuple[list[int], list[ClaimedJob]]:
        if claim.limit <= 0:
            return self.finish_jobs(outcomes, claim.started), []
        return self._finish_and_claim(outcomes, claim)

    def claim_suspect(
        self, worker: str, queues: Sequence[str] | None, leases: Mapping[str, float] | None = None
    ) -> ClaimedJob | None:
        params = {
            "worker": worker,
            "now": self.now(),
            "leases": json.dumps(dict(leases or {})),
            "queues": self._array(queues) if queues else None,
            "tasks": None if leases is None else self._array(leases),
        }
        found = self._change("claim_suspect", params)
        jobs = claimed_jobs(found.names, found.rows)
        return jobs[0] if jobs else None

    def next_due(
        self,
        queues: Sequence[str] | None,
        tasks: Collection[str] | None = None,
        limited: bool = False,
    ) -> Due:
        sql, params = self._filtered("next_due", queues, tasks)
        params["now"] = self.now()
        due = self._read(lambda conn: result(conn.execute(sql, params)))
        first = due.first("wait", "suspects", "schedule_at")
        wait, suspects, schedule_at = first or (None, False, None)
        if limited:  # a delayed limited job: its slot may be free when it falls due
            sql, params = self._filtered("next_limited_due", queues, tasks)
            params["now"] = self.now()
            later = self._read(lambda conn: result(conn.execute(sql, params))).first("wait")
            if later and later[0] is not None:
                wait = later[0] if wait is None else min(wait, later[0])
            opening = self._next_rate_opening(queues, tasks)
            if opening is not None:
                wait = opening if wait is None else min(wait, opening)
        return Due(
            None if wait is None else float(wait),
            bool(suspects),
            None if schedule_at is None else float(schedule_at),
        )

    def finish_jobs(
        self, outcomes: Sequence[Outcome], started: Sequence[HeldJob] = ()
    ) -> list[int]:
        if not outcomes and not started:
            return []
        return self._write(lambda conn: self._finish(conn, outcomes, started))

    def finish_in_transaction(self, connection: Any, outcome: Outcome) -> bool:
        return bool(self._finish(connection, [outcome]))

    def amend_done_job(self, outcome: Outcome) -> bool:
        params = {
            "id": outcome.job_id,
            "token": outcome.token,
            "result": outcome.result,
            "error": outcome.error,
            "traceback": outcome.traceback,
            "history": None if outcome.history is None else json.dumps(outcome.history),
        }
        return bool(self._change("amend_done_job", params).rows)

    def rescue_jobs(
        self, decide: Decide, worker: str | None = None, limit: int = 500
    ) -> list[Outcome]:
        if worker is None and self.one_writer and not self._any_expired():
            return []

        def work(conn: Any) -> list[Outcome]:
            now = self.now()  # read once the write lock is held: SQLite may have waited
            if worker is None:
                params: dict[str, Any] = {"now": now, "limit": limit}
                found = result(conn.execute(self.sql["expired_jobs"], params))
            else:
                params = {"worker": worker, "limit": limit}
                found = result(conn.execute(self.sql["jobs_of_worker"], params))
            has_now = "now" in found.names  # PostgreSQL's: the server's clock, as claims
            clocks = [r[0] for r in found.pick("now")] if has_now else [now] * len(found.rows)
            outcomes = [
                decide(expired_job(found.names, row), at)
                for row, at in zip(found.rows, clocks, strict=True)
            ]
            written = set(self._finish(conn, outcomes))
            return [o for o in outcomes if o.job_id in written]

        return self._transaction(work)

    def _any_expired(self) -> bool:
        params = {"now": self.now()}
        found = self._read(lambda conn: result(conn.execute(self.sql["any_expired"], params)))
        return bool(found.rows)

    # -- workers and the task catalogue ---------------------------------------------------

    def register_worker(self, info: WorkerInfo) -> None:
        now = self.now()
        params = {
            "id": info.id,
            "host": info.host,
            "pid": info.pid,
            "queues": json.dumps(list(info.queues) if info.queues else None),
            "concurrency": info.concurrency,
            "heartbeat_interval": info.heartbeat_interval,
            "tasks": json.dumps([t.name for t in info.tasks]),
            "now": now,
        }
        tasks = [{**asdict(t), "now": now} for t in info.tasks]
        limits = [{**asdict(q), "now": now} for q in info.queue_limits if q.limit()]
        unlimited = [{"queue": q.queue} for q in info.queue_limits if not q.limit()]

        def work(conn: Any) -> None:
            conn.execute(self.sql["register_worker"], params)
            cursor = conn.cursor()
            cursor.executemany(self.sql["save_task"], tasks)
            if limits:
                cursor.executemany(self.sql["save_queue_limit"], limits)
            if unlimited:
                cursor.executemany(self.sql["clear_queue_limit"], unlimited)
            cursor.close()

        self._transaction(work)

    def live_workers(self) -> int:
        return len(self._query("live_workers", {"now": self.now()}).rows)

    def unregister_worker(self, worker: str) -> None:
        self._change("unregister_worker", {"worker": worker})

    def task_names(self) -> list[str]:
        return [name for (name,) in self._query("task_names").pick("name")]

    def task_info(self, name: str) -> TaskInfo | None:
        found = self._query("task_info", {"name": name})
        return task_info(found.names, found.rows[0]) if found.rows else None

    def served_tasks(self) -> set[str]:
        live = self._query("live_workers", {"now": self.now()}).pick("tasks")
        return {name for (tasks,) in live for name in json.loads(tasks)}

    def worker_scopes(self) -> list[WorkerScope]:
        live = self._query("live_workers", {"now": self.now()}).pick("tasks", "queues")
        return [worker_scope(tasks, queues) for tasks, queues in live]

    # -- inspection and admin -------------------------------------------------------------

    def stats(self) -> Stats:
        """Counts, ages, workers and unserved tasks, each read through a partial index and
        none by a scan of the jobs table: this runs on every metrics scrape, and the table
        keeps every finished job until the pruner takes it. Done and cancelled jobs are
        counted up to ``COUNT_CAP`` per queue, and the counts that stopped there are named
        (``Stats.capped``); see :mod:`sqljobs.stats`."""
        now = self.now()
        return self._snapshot(lambda conn: self._stats_on(conn, now))

    def _stats_on(self, conn: Any, now: float) -> Stats:
        def query(name: str, params: Mapping[str, Any] | None = None) -> Result:
            return result(conn.execute(self.sql[name], params or {}))

        counted = query("count_by_queue_state", {"cap": COUNT_CAP})
        pending = query("pending_by_queue", {"now": now}).pick("queue", "pending", "age")
        rows = counted.pick("queue", "state", "jobs") + [(q, "pending", n) for q, n, _ in pending]
        counts, capped = capped_counts(rows, COUNT_CAP)
        ages = oldest_due_ages((queue, age) for queue, _, age in pending)
        workers = query("live_workers", {"now": now}).pick("tasks", "queues")
        live = [worker_scope(tasks, queues) for tasks, queues in workers]

        def in_queue(queue: str) -> list[tuple[Any, ...]]:
            return query("pending_by_task_in_queue", {"queue": queue}).pick("task", "pending")

        by_task = query("pending_by_task").pick("task", "pending")
        unserved = unserved_tasks(by_task, live, [queue for queue, _, _ in pending], in_queue)
        states = query("queue_states").pick("name", "paused")
        paused = sorted(name for name, on in states if on)
        oldest = max(ages.values()) if ages else None
        columns = ("key", "queue", "waiting", "limit_max", "rate_max", "rate_window")
        waiting = query("limit_backlog", {"now": now, "most": LIMITS_SHOWN}).pick(*columns)
        running = query("limit_running_all", {"now": now}).pick(
            "key", "queue", "running", *columns[3:]
        )
        limits = limit_usages(waiting, running)
        return Stats(counts, oldest, ages, len(live), unserved, paused, capped, COUNT_CAP, limits)

    def get_job(self, job_id: int) -> Job | None:
        found = self._query("get_job", {"id": job_id})
        return job(found.names, found.rows[0]) if found.rows else None

    def list_jobs(self, listing: JobListing) -> list[Job]:
        params = {"state": listing.state, "queue": listing.queue, "limit": listing.limit}
        found = self._query("list_jobs", params)
        return [job(found.names, row) for row in found.rows]

    # -- control: cancel, pause, progress, waiting ---------------------------------------

    def cancel_job(self, job_id: int) -> bool:
        params = {"id": job_id, "now": self.now(), "channel": self._event_channel()}
        return bool(self._transaction(lambda conn: self._cancel(conn, "cancel_job", params)))

    def _cancel(self, conn: Any, statement: str, params: Mapping[str, Any]) -> int:
        """Run a cancel statement and settle the children of the jobs it cancelled, in
        the caller's transaction; return how many it cancelled."""
        cancelled = result(conn.execute(self.sql[statement], params)).pick("id", "children")
        self._made_events("cancel", [i for i, _ in cancelled])
        self.settle_children(conn, [(i, "cancelled") for i, children in cancelled if children])
        return len(cancelled)

    # -- dependencies (the rules: sqljobs.dependencies) -----------------------------------

    def enqueue_group(
        self, group: JobGroup, connection: Any | None = None
    ) -> tuple[list[EnqueueResult], EnqueueResult | None]:
        """Insert the members, then ``then`` to run after all of them, in one transaction
        (or in the caller's, never committing it)."""
        members, then = group.members, group.then

        def work(conn: Any) -> tuple[list[EnqueueResult], EnqueueResult | None]:
            got = self._enqueue_on(conn, list(members))
            if then is None:
                return got, None
            after = tuple(r.id for r in got)
            return got, self._enqueue_on(conn, [replace(then, after=after)])[0]

        if connection is not None:
            self._check_connection(connection)
            return work(connection)
        return self._transaction(work)

    def _insert_dependent(self, conn: Any, job: NewJob) -> EnqueueResult:
        """Insert a job that waits for ``job.after``, in the caller's transaction: lock
        its parents, decide its first state, and record an edge from each open parent."""
        if job.key is not None:  # a key kept after its job was pruned answers first
            spent = result(conn.execute(self.sql["spent_key"], {"key": job.key, "now": self.now()}))
            if (kept := spent.first("job_id")) is not None:
                return EnqueueResult(int(kept[0]), False)
        parents = list(job.after)
        locked = result(conn.execute(self.sql["lock_parents"], {"ids": self._array(parents)}))
        found = {i: (state, res) for i, state, res in locked.pick("id", "state", "result")}
        begin = dependencies.start(parents, found, job.after_policy, job.collect)
        if begin.state == "pending" and begin.collected is not None:  # every parent ended
            payload = dependencies.with_results(job.task, job.payload, parents, begin.collected)
            job = replace(job, payload=payload)
        params = {
            **asdict(job),
            "delay": job.delay if self.server_clock else None,
            "state": begin.state,
            "parents": self._array(parents),
            "after_policy": job.after_policy,
            "waiting_on": len(begin.open_parents),
            "collected": None if begin.collected is None else json.dumps(begin.collected),
            "error": begin.reason,
            "now": self.now(),
            "channel": self._event_channel(),
        }
        for _ in range(3):
            made = result(conn.execute(self.sql["insert_dependent"], params))
            if (inserted := made.first("id")) is not None:
                break
            # its key names a job that exists: that one is the answer, unless the pruner
            # removed it meanwhile, leaving the key spent (or free: then insert again)
            existing = result(conn.execute(self.sql["dependent_by_key"], {"key": job.key}))
            if (found_row := existing.first("id")) is not None:
                return EnqueueResult(int(found_row[0]), False)
            spent = result(conn.execute(self.sql["spent_key"], {"key": job.key, "now": self.now()}))
            if (kept := spent.first("job_id")) is not None:
                return EnqueueResult(int(kept[0]), False)
        else:
            raise RuntimeError(
                f"could not enqueue the job keyed {job.key!r}: its key kept changing"
            )
        child = int(inserted[0])
        kept = made.first("kept") if "kept" in made.names else None  # PostgreSQL's race
        if kept is not None and kept[0] is not None:  # its key was kept meanwhile: undone
            conn.execute(self.sql["undo_inserts"], {"ids": self._array([child])})
            return EnqueueResult(int(kept[0]), False)
        if begin.open_parents:
            edges = {"ids": self._array(begin.open_parents), "child": child}
            conn.execute(self.sql["add_edges"], edges)
        log.debug("job %s enqueued %s after %s", child, begin.state, parents)
        return EnqueueResult(child, True)

    def settle_children(self, conn: Any, ended: Sequence[tuple[int, str]]) -> None:
        """In the transaction that ended these parents (id, state): take their edges and
        release, or cancel, each child by its policy; a child cancelled here settles its
        own children in turn."""
        now, channel = self.now(), self._event_channel()
        while ended:
            states = dict(ended)
            taken = result(conn.execute(self.sql["take_edges"], {"ids": self._array(states)}))
            edges = taken.pick("parent_id", "child_id")
            if not edges:
                return
            children = sorted({child for _, child in edges})
            policies = self._policies(conn, children)
            plan = dependencies.settle(edges, states, policies)
            results = self._results_for(conn, plan.releases)
            ended = []
            for child in children:  # in id order: two settlers lock rows in one order
                if child in plan.cancels:
                    params = {"id": child, "now": now, "reason": plan.cancels[child]}
                    params["channel"] = channel
                    found = result(conn.execute(self.sql["cancel_child"], params))
                    for _, grandchildren in found.pick("id", "children"):
                        log.info("job %s cancelled: %s", child, plan.cancels[child])
                        if grandchildren:
                            ended.append((child, "cancelled"))
                elif child in plan.releases:
                    self._release(conn, child, plan.releases[child], results, now, channel)

    def _policies(self, conn: Any, children: Sequence[int]) -> dict[int, str | None]:
        found = result(conn.execute(self.sql["child_policies"], {"ids": self._array(children)}))
        return dict(found.pick("id", "after_policy"))

    def _results_for(
        self, conn: Any, releases: Mapping[int, Sequence[int]]
    ) -> dict[int, str | None]:
        """The results of the parents being settled (read once for every child: a child
        that does not collect them ignores them)."""
        parents = sorted({p for ps in releases.values() for p in ps})
        if not parents:
            return {}
        found = result(conn.execute(self.sql["parent_results"], {"ids": self._array(parents)}))
        return dict(found.pick("id", "result"))

    def _release(
        self,
        conn: Any,
        child: int,
        parents: Sequence[int],
        results: Mapping[int, str | None],
        now: float,
        channel: str | None,
    ) -> None:
        params = {"id": child, "n": len(parents), "now": now, "channel": channel}
        params["results"] = dependencies.results_of(parents, results)
        found = result(conn.execute(self.sql["release_child"], params))
        row = found.first("state", "task", "payload", "parents", "collected")
        if row is None or row[0] != "pending":
            return  # still waiting for others, or no longer waiting (cancelled by hand)
        _, task, payload, all_parents, collected = row
        if collected is not None:  # a group's callback: its parents' results come first
            if isinstance(all_parents, str):
                all_parents = json.loads(all_parents)
            text = dependencies.with_results(task, payload, all_parents, collected)
            conn.execute(self.sql["rewrite_payload"], {"id": child, "payload": text})
        self._made_work(None)
        log.info("job %s released: its parents have ended", child)

    def open_parents(self, job_id: int, parents: Sequence[int]) -> list[int]:
        """Which of a waiting job's ``parents`` have not ended yet."""
        if not parents:
            return []
        params = {"ids": self._array(parents), "child": job_id}
        found = {p for (p,) in self._query("open_parents", params).pick("id")}
        return [p for p in parents if p in found]

    def cancelled_among(self, job_ids: Collection[int]) -> set[int]:
        if not job_ids:
            return set()
        found = self._query("cancelled_among", {"ids": self._array(job_ids)})
        return {job_id for (job_id,) in found.pick("id")}

    def ended_among(self, job_ids: Collection[int]) -> set[int]:
        if not job_ids:
            return set()
        found = self._query("ended_among", {"ids": self._array(job_ids)})
        return {job_id for (job_id,) in found.pick("id")}

    def watch_job(self, job_id: int) -> None:
        if "watch_job" in self.sql:  # an engine that pushes a job's end to those waiting
            self._change("watch_job", {"id": job_id})

    def limited_pending(
        self, queues: Sequence[str] | None, tasks: Collection[str] | None = None
    ) -> bool:
        sql, params = self._filtered("limited_pending", queues, tasks)
        found = self._read(lambda conn: result(conn.execute(sql, params))).first("waiting")
        return bool(found and found[0])

    def limit_usage(self, key: str, window: float) -> tuple[int, int]:
        now = self.now()
        params = {"key": key, "window": window, "since": now - window, "now": now}
        found = self._query("limit_usage", params).first("running", "starts")
        return (int(found[0]), int(found[1])) if found else (0, 0)

    def queue_limit(self, name: str) -> QueueLimit | None:
        found = self._query("queue_limit", {"name": name}).first(
            "concurrency", "rate_max", "rate_window"
        )
        if found is None or (found[0] is None and found[1] is None):
            return None
        return QueueLimit(name, *found)

    def pause_queue(self, name: str) -> bool:
        changed = self._change("pause_queue", {"name": name, "now": self.now()}).first("changed")
        return bool(changed and changed[0])

    def resume_queue(self, name: str) -> bool:
        return self._change("resume_queue", {"name": name, "now": self.now()}).rowcount == 1

    def queue_states(self) -> dict[str, tuple[bool, float | None]]:
        found = self._query("queue_states").pick("name", "paused", "paused_at")
        return {name: (bool(paused), paused_at) for name, paused, paused_at in found}

    def prune_finished(self, prune: PruneFinished) -> int:
        """Up to ``limit`` in all, queue by queue (the one index on ended jobs is by state,
        queue and age), each queue a statement of its own."""
        queues = self._query("ended_queues", {"state": prune.state}).pick("queue")
        deleted = 0
        for (queue,) in queues:
            params = {
                "before": prune.before,
                "limit": prune.limit - deleted,
                "state": prune.state,
                "queue": queue,
                "now": self.now(),
                "key_retention": prune.key_retention,
            }
            deleted += self._prune_batch(params)
            if deleted >= prune.limit:
                break
        return deleted

    def _prune_batch(self, params: Mapping[str, Any]) -> int:
        """Delete one batch and keep its keys (one statement: see prune_finished's SQL)."""
        counted = self._change("prune_finished", params).first("n")
        return int(counted[0]) if counted else 0

    def prune_spent_keys(self, before: float, limit: int = 1000) -> int:
        return self._change("prune_spent_keys", {"before": before, "limit": limit}).rowcount

    def spent_key_of_job(self, job_id: int) -> SpentKey | None:
        found = self._query("spent_key_of_job", {"id": job_id})
        row = found.first("key", "task", "state", "spent_at", "expires_at")
        if row is None:
            return None
        key, task, state, spent_at, expires_at = row
        return SpentKey(key, job_id, task, state, float(spent_at), float(expires_at))

    def prune_starts(self, before: float, limit: int = 1000) -> int:
        return self._change("prune_starts", {"before": before, "limit": limit}).rowcount

    def prune_idempotency(self, before: float, limit: int = 1000) -> int:
        return self._change("prune_idempotency", {"before": before, "limit": limit}).rowcount

    # -- the metrics rollup (sqljobs.rollup) ---------------------------------------------

    def add_metric_amounts(self, amounts: Sequence[MetricAmount]) -> None:
        minutes = [
            {**_amount_params(a), "minute": a.minute} for a in amounts if a.minute is not None
        ]
        totals = [_amount_params(a) for a in amounts]
        add_minute, add_total = self.sql["add_metric_minute"], self.sql["add_metric_total"]

        def work(conn: Any) -> None:
            cursor = conn.cursor()
            if minutes:
                cursor.executemany(add_minute, minutes)
            cursor.executemany(add_total, totals)

        if amounts:
            self._transaction(work)

    def attempts_by_minute(
        self, since: int, queue: str | None = None
    ) -> list[tuple[int, str, float]]:
        found = self._query("attempts_by_minute", {"since": since, "queue": queue})
        return [(int(m), o, float(n)) for m, o, n in found.pick("minute", "outcome", "attempts")]

    def metric_totals(self) -> list[MetricAmount]:
        columns = ("queue", "task", "outcome", "series", "le", "amount")
        found = self._query("metric_totals").pick(*columns)
        return [MetricAmount(q, t, o, s, float(le), float(n)) for q, t, o, s, le, n in found]

    def metric_label_sets(self) -> list[tuple[str, str, bool]]:
        found = self._query("metric_label_sets").pick("queue", "task", "scheduled")
        return [(queue, task, bool(scheduled)) for queue, task, scheduled in found]

    def prune_metric_minutes(self, before: float, limit: int = 1000) -> int:
        params = {"before": before, "limit": limit}
        return self._change("prune_metric_minutes", params).rowcount

    # -- idempotency markers and external effects -----------------------------------------

    def mark_idempotent(self, connection: Any, key: str, ttl: float | None = None) -> bool:
        return mark_idempotent(connection, self.sql["mark_idempotent"], key, ttl, self.now())

    def effect_begin(self, intent: EffectIntent) -> EffectRecord:
        params = {**asdict(intent), "now": self.now()}
        sql = self.sql["effect_begin"]
        found = self._durable(lambda conn: result(conn.execute(sql, params)))
        return effect_record(intent.key, found.names, found.rows[0])

    def effect_set(self, end: EffectEnd) -> None:
        self._durable_change("effect_set", {**asdict(end), "now": self.now()})

    def effect_forget(self, key: str, holder: str) -> None:
        self._durable_change("effect_forget", {"key": key, "holder": holder})

    def _durable_change(self, name: str, params: Mapping[str, Any]) -> None:
        sql = self.sql[name]
        self._durable(lambda conn: conn.execute(sql, params))

    # -- wake-ups: guarantee 8 lives in sqljobs.notifiers ---------------------------------

    def subscribe(
        self, callback: Callable[[], None], queues: Collection[str] | None = None
    ) -> None:
        self.notifier.subscribe(callback, queues)

    @property
    def pushes_changes(self) -> bool:
        return self.notifier.pushes

    def change_marker(self) -> int | None:
        return self.notifier.change_marker()


def _amount_params(amount: MetricAmount) -> dict[str, Any]:
    return {
        "queue": amount.queue,
        "task": amount.task,
        "outcome": amount.outcome,
        "series": amount.series,
        "le": amount.le,
        "amount": amount.amount,
    }
