"""Dependencies and cancellation (the rules: :mod:`sqljobs.dependencies`): groups, a job
that waits for others inserted with its edges, the children of ended or cancelled
parents settled in the transaction that ended them, and cancelling a job.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

from ... import dependencies
from ...errors import BackendError
from ...jobs import EnqueueResult, NewJob
from ..executor import Executor
from ..records import JobGroup
from ..rows import result

log = logging.getLogger("sqljobs.dependencies")


def cancel_job(ex: Executor, job_id: int) -> bool:
    params = {"id": job_id, "now": ex.now(), "channel": ex._event_channel()}
    cancelled = ex.transaction(lambda conn: cancel(ex, conn, "cancel_job", params))
    cancel_workflow_children(ex, cancelled)
    return bool(cancelled)


def cancel(ex: Executor, conn: Any, statement: str, params: Mapping[str, Any]) -> list[int]:
    """Run a cancel statement and settle the children of the jobs it cancelled, in
    the caller's transaction; return the ids it cancelled."""
    cancelled = result(conn.execute(ex.sql[statement], params)).pick("id", "children")
    ex._made_events("cancel", [i for i, _ in cancelled])
    settle_children(ex, conn, [(i, "cancelled") for i, children in cancelled if children])
    return [int(i) for i, _ in cancelled]


def cancel_workflow_children(ex: Executor, cancelled: Sequence[int]) -> None:
    """After the cancel of ``cancelled`` committed: cancel the child jobs that the
    workflows among them wait for and that have not ended, and theirs, in transactions of
    up to a thousand (each child's cancel fenced as any cancel is)."""
    params: dict[str, Any] = {"now": ex.now(), "channel": ex._event_channel()}

    def cancel_batch(ids: Sequence[int]) -> list[int]:
        batch = {**params, "ids": ex.array(ids)}
        return ex.transaction(lambda conn: cancel(ex, conn, "cancel_ids", batch))

    workflows = list(cancelled)
    while workflows:
        found = ex.query("workflow_children", {"ids": ex.array(workflows)})
        children = sorted({int(c) for (detail,) in found.pick("detail")
                           for c in json.loads(detail or "{}").get("children", ())})  # fmt: skip
        done = [i for at in range(0, len(children), 1000)
                for i in cancel_batch(children[at : at + 1000])]  # fmt: skip
        if done:
            named = done if len(done) <= 10 else f"{len(done)} jobs"
            log.info("cancelled with their workflows: %s", named)
        workflows = done


def enqueue_group(
    ex: Executor, group: JobGroup, connection: Any | None = None
) -> tuple[list[EnqueueResult], EnqueueResult | None]:
    """Insert the members, then ``then`` to run after all of them, in one transaction
    (or in the caller's, never committing it)."""
    members, then = group.members, group.then

    def work(conn: Any) -> tuple[list[EnqueueResult], EnqueueResult | None]:
        got = ex._enqueue_on(conn, list(members))
        if then is None:
            return got, None
        after = tuple(r.id for r in got)
        return got, ex._enqueue_on(conn, [replace(then, after=after)])[0]

    if connection is not None:
        ex._check_connection(connection)
        return work(connection)
    return ex.transaction(work)


def insert_dependent(ex: Executor, conn: Any, job: NewJob) -> EnqueueResult:
    """Insert a job that waits for ``job.after``, in the caller's transaction: lock
    its parents, decide its first state, and record an edge from each open parent."""
    if job.key is not None:  # a key kept after its job was pruned answers first
        spent = result(conn.execute(ex.sql["spent_key"], {"key": job.key, "now": ex.now()}))
        if (kept := spent.first("job_id")) is not None:
            return EnqueueResult(int(kept[0]), False)
    parents = list(job.after)
    locked = result(conn.execute(ex.sql["lock_parents"], {"ids": ex.array(parents)}))
    found = {i: (state, res) for i, state, res in locked.pick("id", "state", "result")}
    begin = dependencies.start(parents, found, job.after_policy, job.collect)
    if begin.state == "pending" and begin.collected is not None:  # every parent ended
        payload = dependencies.with_results(job.task, job.payload, parents, begin.collected)
        job = replace(job, payload=payload)
    params = {
        **asdict(job),
        "delay": job.delay if ex.server_clock else None,
        "state": begin.state,
        "parents": ex.array(parents),
        "after_policy": job.after_policy,
        "waiting_on": len(begin.open_parents),
        "collected": None if begin.collected is None else json.dumps(begin.collected),
        "error": begin.reason,
        "now": ex.now(),
        "channel": ex._event_channel(),
    }
    for _ in range(3):
        made = result(conn.execute(ex.sql["insert_dependent"], params))
        if (inserted := made.first("id")) is not None:
            break
        # its key names a job that exists: that one is the answer, unless the pruner
        # removed it meanwhile, leaving the key spent (or free: then insert again)
        existing = result(conn.execute(ex.sql["dependent_by_key"], {"key": job.key}))
        if (found_row := existing.first("id")) is not None:
            return EnqueueResult(int(found_row[0]), False)
        spent = result(conn.execute(ex.sql["spent_key"], {"key": job.key, "now": ex.now()}))
        if (kept := spent.first("job_id")) is not None:
            return EnqueueResult(int(kept[0]), False)
    else:
        raise BackendError(
            f"could not enqueue the job keyed {job.key!r}: its key kept changing hands "
            "(pruned and reused meanwhile): retry the enqueue"
        )
    child = int(inserted[0])
    kept = made.first("kept") if "kept" in made.names else None  # PostgreSQL's race
    if kept is not None and kept[0] is not None:  # its key was kept meanwhile: undone
        conn.execute(ex.sql["undo_inserts"], {"ids": ex.array([child])})
        return EnqueueResult(int(kept[0]), False)
    if begin.open_parents:
        edges = {"ids": ex.array(begin.open_parents), "child": child}
        conn.execute(ex.sql["add_edges"], edges)
    log.debug("job %s enqueued %s after %s", child, begin.state, parents)
    return EnqueueResult(child, True)


def settle_children(ex: Executor, conn: Any, ended: Sequence[tuple[int, str]]) -> None:
    """In the transaction that ended these parents (id, state): take their edges and
    release, or cancel, each child by its policy; a child cancelled here settles its
    own children in turn."""
    now, channel = ex.now(), ex._event_channel()
    while ended:
        states = dict(ended)
        taken = result(conn.execute(ex.sql["take_edges"], {"ids": ex.array(states)}))
        edges = taken.pick("parent_id", "child_id")
        if not edges:
            return
        children = sorted({child for _, child in edges})
        policies = _policies(ex, conn, children)
        plan = dependencies.settle(edges, states, policies)
        results = _results_for(ex, conn, plan.releases)
        ended = []
        for child in children:  # in id order: two settlers lock rows in one order
            if child in plan.cancels:
                params = {"id": child, "now": now, "reason": plan.cancels[child]}
                params["channel"] = channel
                found = result(conn.execute(ex.sql["cancel_child"], params))
                for _, grandchildren in found.pick("id", "children"):
                    log.info("job %s cancelled: %s", child, plan.cancels[child])
                    if grandchildren:
                        ended.append((child, "cancelled"))
            elif child in plan.releases:
                _release(ex, conn, child, plan.releases[child], results, now, channel)


def _policies(ex: Executor, conn: Any, children: Sequence[int]) -> dict[int, str | None]:
    found = result(conn.execute(ex.sql["child_policies"], {"ids": ex.array(children)}))
    return dict(found.pick("id", "after_policy"))


def _results_for(
    ex: Executor, conn: Any, releases: Mapping[int, Sequence[int]]
) -> dict[int, str | None]:
    """The results of the parents being settled (read once for every child: a child
    that does not collect them ignores them)."""
    parents = sorted({p for ps in releases.values() for p in ps})
    if not parents:
        return {}
    found = result(conn.execute(ex.sql["parent_results"], {"ids": ex.array(parents)}))
    return dict(found.pick("id", "result"))


def _release(
    ex: Executor,
    conn: Any,
    child: int,
    parents: Sequence[int],
    results: Mapping[int, str | None],
    now: float,
    channel: str | None,
) -> None:
    params = {"id": child, "n": len(parents), "now": now, "channel": channel}
    params["results"] = dependencies.results_of(parents, results)
    found = result(conn.execute(ex.sql["release_child"], params))
    row = found.first("state", "task", "payload", "parents", "collected")
    if row is None or row[0] != "pending":
        return  # still waiting for others, or no longer waiting (cancelled by hand)
    _, task, payload, all_parents, collected = row
    if collected is not None:  # a group's callback: its parents' results come first
        if isinstance(all_parents, str):
            all_parents = json.loads(all_parents)
        text = dependencies.with_results(task, payload, all_parents, collected)
        conn.execute(ex.sql["rewrite_payload"], {"id": child, "payload": text})
    ex._made_work(None)
    log.info("job %s released: its parents have ended", child)


def open_parents(ex: Executor, job_id: int, parents: Sequence[int]) -> list[int]:
    """Which of a waiting job's ``parents`` have not ended yet."""
    if not parents:
        return []
    params = {"ids": ex.array(parents), "child": job_id}
    found = {p for (p,) in ex.query("open_parents", params).pick("id")}
    return [p for p in parents if p in found]


def cancelled_among(ex: Executor, job_ids: Collection[int]) -> set[int]:
    if not job_ids:
        return set()
    found = ex.query("cancelled_among", {"ids": ex.array(job_ids)})
    return {job_id for (job_id,) in found.pick("id")}


def ended_among(ex: Executor, job_ids: Collection[int]) -> set[int]:
    if not job_ids:
        return set()
    found = ex.query("ended_among", {"ids": ex.array(job_ids)})
    return {job_id for (job_id,) in found.pick("id")}
