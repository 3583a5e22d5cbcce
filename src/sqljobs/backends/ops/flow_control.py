"""Flow control as stored: jobs waiting under a concurrency or rate limit, a limit key's
usage, the limits workers record for their queues, and paused queues."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ...limits import QueueLimit
from ..executor import Executor
from ..rows import result


def limited_pending(
    ex: Executor, queues: Sequence[str] | None, tasks: Collection[str] | None = None
) -> bool:
    sql, params = ex.filtered("limited_pending", queues, tasks)
    found = ex.read(lambda conn: result(conn.execute(sql, params))).first("waiting")
    return bool(found and found[0])


def limit_usage(ex: Executor, key: str, window: float) -> tuple[int, int]:
    now = ex.now()
    params = {"key": key, "window": window, "since": now - window, "now": now}
    found = ex.query("limit_usage", params).first("running", "starts")
    return (int(found[0]), int(found[1])) if found else (0, 0)


def queue_limit(ex: Executor, name: str) -> QueueLimit | None:
    found = ex.query("queue_limit", {"name": name}).first("concurrency", "rate_max", "rate_window")
    if found is None or (found[0] is None and found[1] is None):
        return None
    return QueueLimit(name, *found)


def pause_queue(ex: Executor, name: str) -> bool:
    changed = ex.change("pause_queue", {"name": name, "now": ex.now()}).first("changed")
    return bool(changed and changed[0])


def resume_queue(ex: Executor, name: str) -> bool:
    return ex.change("resume_queue", {"name": name, "now": ex.now()}).rowcount == 1


def queue_states(ex: Executor) -> dict[str, tuple[bool, float | None]]:
    found = ex.query("queue_states").pick("name", "paused", "paused_at")
    return {name: (bool(paused), paused_at) for name, paused, paused_at in found}
