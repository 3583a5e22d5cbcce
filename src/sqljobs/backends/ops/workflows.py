"""Durable workflows' storage, written once over an :class:`~..executor.Executor`: the
checkpointed steps, parking a workflow (for a time, an event, its children), waking the
ones whose time has come, and events (emitted, found, pruned)."""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Sequence
from typing import Any

from ...jobs import ENDED, WorkflowStep
from ..executor import Executor
from ..group_commit import GroupCommit
from ..records import Checkpoint, ChildState, Event, Park
from ..rows import Result, result


class _Stale(Exception):
    """The workflow is no longer held under the claim's token: roll back."""


def workflow_steps(ex: Executor, job_id: int) -> list[WorkflowStep]:
    found = ex.query("workflow_steps", {"id": job_id})
    names = ("position", "name", "kind", "state", "result", "error", "detail", "attempt",
             "started_at", "ended_at")  # fmt: skip
    return [
        WorkflowStep(pos, name, kind, state, res, error, json.loads(detail or "{}"),
                     attempt, None if s is None else float(s), None if e is None else float(e))
        for pos, name, kind, state, res, error, detail, attempt, s, e in found.pick(*names)
    ]  # fmt: skip


def save_step(ex: Executor, checkpoint: Checkpoint, connection: Any | None = None) -> bool:
    params = _step_params(ex, checkpoint)
    if connection is not None:  # in the caller's transaction (wf.transaction)
        return _write_step(ex, connection, params)
    if ex.one_writer:  # writes queue for the one lock anyway: share the commits
        return _step_writer(ex).submit(params)
    return ex.durable_write(lambda conn: _write_step(ex, conn, params))


def _step_params(ex: Executor, checkpoint: Checkpoint) -> dict[str, Any]:
    step = checkpoint.step
    return {
        "id": checkpoint.held.id,
        "token": checkpoint.held.token,
        "position": step.position,
        "name": step.name,
        "kind": step.kind,
        "state": step.state,
        "result": step.result,
        "error": step.error,
        "detail": json.dumps(step.detail),
        "ended": step.state in ("done", "failed"),
        "now": ex.now(),
    }


def _write_step(ex: Executor, conn: Any, params: dict[str, Any]) -> bool:
    """One checkpoint, fenced: whether it was written (the claim's token still holds)."""
    saved = bool(result(conn.execute(ex.sql["save_step"], params)).rows)
    progressed = ex.sql.get("step_progressed")  # (PostgreSQL's save_step does it too)
    if saved and progressed is not None:
        conn.execute(progressed, params)
    return saved


_writers_lock = threading.Lock()


def _step_writer(ex: Executor) -> GroupCommit[dict[str, Any], bool]:
    """The executor's group commit of checkpoints: the steps that the workflows running
    on its threads end at the same moment share one durable commit."""
    writer: GroupCommit[dict[str, Any], bool] | None = getattr(ex, "_step_writer", None)
    if writer is not None:
        return writer
    with _writers_lock:
        writer = getattr(ex, "_step_writer", None)
        if writer is None:

            def write_all(batch: Sequence[dict[str, Any]]) -> list[bool]:
                # rows locked in one order, whoever else writes checkpoints in a batch
                order = sorted(range(len(batch)), key=lambda i: batch[i]["id"])

                def work(conn: Any) -> list[bool]:
                    saved = [False] * len(batch)
                    for i in order:
                        saved[i] = _write_step(ex, conn, batch[i])
                    return saved

                return ex.durable_transaction(work)

            def write_one(params: dict[str, Any]) -> bool:
                return ex.durable_write(lambda conn: _write_step(ex, conn, params))

            writer = GroupCommit(write_all, write_one)
            ex._step_writer = writer  # type: ignore[attr-defined]
    return writer


def park_workflow(ex: Executor, park: Park) -> str | None:
    def work(conn: Any) -> str:
        if park.event is not None:
            conn.execute(ex.sql["lock_event"], {"name": park.event})
        still_open: list[int] = []
        if park.children:  # each child that has not ended counts the workflow as its own
            # the workflow's row before its children's, as a cancel of them all takes them
            fence = {"id": park.held.id, "token": park.held.token}
            if result(conn.execute(ex.sql["lock_workflow"], fence)).first("id") is None:
                raise _Stale
            ids = {"ids": ex.array(park.children)}
            locked = result(conn.execute(ex.sql["lock_parents"], ids))
            still_open = [i for i, state in locked.pick("id", "state") if state not in ENDED]
            if still_open:
                edges = {"ids": ex.array(still_open), "child": park.held.id}
                conn.execute(ex.sql["add_edges"], edges)
        params = {
            "id": park.held.id,
            "token": park.held.token,
            "now": ex.now(),
            "wake_at": park.wake_at,
            "event": park.event,
            "after": park.after_event,
            "children": bool(park.children),
            "open": len(still_open),
            "channel": ex._event_channel(),
        }
        row = result(conn.execute(ex.sql["park_workflow"], params)).first("state", "queue")
        if row is None:
            raise _Stale
        if row[0] == "pending":
            ex._made_work([row[1]])
        return str(row[0])

    try:
        return ex.transaction(work)
    except _Stale:
        return None


def next_wake(ex: Executor) -> float | None:
    row = ex.query("next_wake").first("at")
    return None if row is None or row[0] is None else float(row[0])


def wake_workflows(ex: Executor, now: float, limit: int = 500) -> int:
    at = next_wake(ex)  # read first: usually nothing is due, and this takes no lock
    if at is None or at > now + 1e-6:  # (kept to the microsecond: as the statement compares)
        return 0
    params = {"now": now, "limit": limit, "channel": ex._event_channel()}
    return ex.write(lambda conn: _woken(ex, result(conn.execute(ex.sql["wake_workflows"], params))))


def emit_event(ex: Executor, name: str, payload: str | None, connection: Any = None) -> int:
    def work(conn: Any) -> int:
        conn.execute(ex.sql["lock_event"], {"name": name})
        params = {"name": name, "payload": payload, "now": ex.now()}
        row = result(conn.execute(ex.sql["insert_event"], params)).first("id")
        assert row is not None
        woken = {"name": name, "now": ex.now(), "channel": ex._event_channel()}
        _woken(ex, result(conn.execute(ex.sql["wake_waiters"], woken)))
        return int(row[0])

    if connection is not None:
        ex._check_connection(connection)
        return work(connection)
    return ex.durable_transaction(work)


def _woken(ex: Executor, found: Result) -> int:
    """How many workflows a wake-up made due; an engine whose statement does not NOTIFY
    returns their queues, announced after the commit."""
    if "n" in found.names:
        row = found.first("n")
        return 0 if row is None else int(row[0])
    queues = {q for (q,) in found.pick("queue")}
    if queues:
        ex._made_work(queues)
    return len(found.rows)


def first_event(ex: Executor, name: str, after: int) -> Event | None:
    row = ex.query("first_event", {"name": name, "after": after}).first(
        "id", "payload", "emitted_at"
    )
    return None if row is None else Event(int(row[0]), row[1], float(row[2]))


def child_states(ex: Executor, job_ids: Collection[int]) -> list[ChildState]:
    if not job_ids:
        return []
    found = ex.query("child_states", {"ids": ex.array(sorted(job_ids))})
    return [ChildState(*row) for row in found.pick("id", "state", "result", "last_error")]


def workflow_jobs(
    ex: Executor, tasks: Sequence[str], state: str | None, limit: int
) -> list[dict[str, Any]]:
    params = {"tasks": ex.array(tasks), "state": state, "limit": limit}
    found = ex.query("workflow_jobs", params)
    return [dict(zip(found.names, row, strict=True)) for row in found.rows]


def prune_events(ex: Executor, before: float, limit: int = 1000) -> int:
    return ex.change("prune_events", {"before": before, "limit": limit}).rowcount
