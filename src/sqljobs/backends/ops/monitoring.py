"""What the dashboard, the CLI and ``/metrics`` read: the queue's statistics, each from a
partial index and in one snapshot, and the per-minute metrics rollup."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...rollup import MetricAmount
from ...stats import (
    COUNT_CAP,
    LIMITS_SHOWN,
    Stats,
    capped_counts,
    limit_usages,
    oldest_due_ages,
    unserved_tasks,
    worker_scope,
)
from ..executor import Executor
from ..rows import Result, result


def stats(ex: Executor) -> Stats:
    """Counts, ages, workers and unserved tasks, each read through a partial index and
    none by a scan of the jobs table: this runs on every metrics scrape, and the table
    keeps every finished job until the pruner takes it. Done and cancelled jobs are
    counted up to ``COUNT_CAP`` per queue, and the counts that stopped there are named
    (``Stats.capped``); see :mod:`sqljobs.stats`."""
    now = ex.now()
    return ex.snapshot(lambda conn: stats_on(ex, conn, now))


def stats_on(ex: Executor, conn: Any, now: float) -> Stats:
    def query(name: str, params: Mapping[str, Any] | None = None) -> Result:
        return result(conn.execute(ex.sql[name], params or {}))

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
    running = query("limit_running_all", {"now": now}).pick("key", "queue", "running", *columns[3:])
    limits = limit_usages(waiting, running)
    return Stats(counts, oldest, ages, len(live), unserved, paused, capped, COUNT_CAP, limits)


def add_metric_amounts(ex: Executor, amounts: Sequence[MetricAmount]) -> None:
    minutes = [{**_amount_params(a), "minute": a.minute} for a in amounts if a.minute is not None]
    totals = [_amount_params(a) for a in amounts]
    add_minute, add_total = ex.sql["add_metric_minute"], ex.sql["add_metric_total"]

    def work(conn: Any) -> None:
        cursor = conn.cursor()
        if minutes:
            cursor.executemany(add_minute, minutes)
        cursor.executemany(add_total, totals)

    if amounts:
        ex.transaction(work)


def attempts_by_minute(
    ex: Executor, since: int, queue: str | None = None
) -> list[tuple[int, str, float]]:
    found = ex.query("attempts_by_minute", {"since": since, "queue": queue})
    return [(int(m), o, float(n)) for m, o, n in found.pick("minute", "outcome", "attempts")]


def metric_totals(ex: Executor) -> list[MetricAmount]:
    columns = ("queue", "task", "outcome", "series", "le", "amount")
    found = ex.query("metric_totals").pick(*columns)
    return [MetricAmount(q, t, o, s, float(le), float(n)) for q, t, o, s, le, n in found]


def metric_label_sets(ex: Executor) -> list[tuple[str, str, bool]]:
    found = ex.query("metric_label_sets").pick("queue", "task", "scheduled")
    return [(queue, task, bool(scheduled)) for queue, task, scheduled in found]


def _amount_params(amount: MetricAmount) -> dict[str, Any]:
    return {
        "queue": amount.queue,
        "task": amount.task,
        "outcome": amount.outcome,
        "series": amount.series,
        "le": amount.le,
        "amount": amount.amount,
    }
