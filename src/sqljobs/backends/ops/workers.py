"""Workers and the task catalogue: registration (its tasks and queue limits with it),
liveness by heartbeat, and what each live worker runs."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from ...jobs import TaskInfo
from ...stats import WorkerScope, worker_scope
from ..base import WorkerInfo
from ..executor import Executor
from ..rows import task_info as task_info_of


def register_worker(ex: Executor, info: WorkerInfo) -> None:
    now = ex.now()
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
        conn.execute(ex.sql["register_worker"], params)
        cursor = conn.cursor()
        cursor.executemany(ex.sql["save_task"], tasks)
        if limits:
            cursor.executemany(ex.sql["save_queue_limit"], limits)
        if unlimited:
            cursor.executemany(ex.sql["clear_queue_limit"], unlimited)
        cursor.close()

    ex.transaction(work)


def live_workers(ex: Executor) -> int:
    return len(ex.query("live_workers", {"now": ex.now()}).rows)


def unregister_worker(ex: Executor, worker: str) -> None:
    ex.change("unregister_worker", {"worker": worker})


def task_names(ex: Executor) -> list[str]:
    return [name for (name,) in ex.query("task_names").pick("name")]


def task_info(ex: Executor, name: str) -> TaskInfo | None:
    found = ex.query("task_info", {"name": name})
    return task_info_of(found.names, found.rows[0]) if found.rows else None


def served_tasks(ex: Executor) -> set[str]:
    live = ex.query("live_workers", {"now": ex.now()}).pick("tasks")
    return {name for (tasks,) in live for name in json.loads(tasks)}


def worker_scopes(ex: Executor) -> list[WorkerScope]:
    live = ex.query("live_workers", {"now": ex.now()}).pick("tasks", "queues")
    return [worker_scope(tasks, queues) for tasks, queues in live]
