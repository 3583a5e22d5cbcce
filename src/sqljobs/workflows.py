"""Durable workflows: a job whose function runs from the top on every resume and replays
its checkpointed steps from the database instead of running them again.

Each call on the :class:`Workflow` takes the next position. A position's checkpoint is a
row of ``sqljobs_workflow_steps``, written fenced by the claim's token: a step that
finished is never run again; one interrupted mid-way runs again (at least once);
``wf.transaction()`` commits its writes and its checkpoint together (exactly once). A
replay that meets another step name at a position than its history holds raises
:class:`~sqljobs.WorkflowChanged`.

``sleep``, ``wait_for``, ``run`` and ``gather`` park the workflow when what they wait for
has not happened: the attempt ends (given back, not charged), the job is ``waiting``,
and no thread, slot or query is spent on it until its time, its event or its last
child's end makes it due again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random as _random
import uuid as _uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import (
    JobCancelled,
    JobFailed,
    LeaseLost,
    StepFailed,
    WorkflowChanged,
)
from .jobs import HeldJob, JobState, WorkflowStep
from .payload import encode_result, storable
from .retry import Retry
from .validate import check_text, seconds, to_epoch

if TYPE_CHECKING:
    from .backends.base import Backend
    from .context import JobContext
    from .tasks import Signature, Task

log = logging.getLogger("sqljobs.workflow")
T = TypeVar("T")

CHILD_KEY = "wf:{job}:{position}:{index}:{task}"
"""The key of a workflow's child job: a replay that enqueues it again finds it (and a
worker on other code that reached the same position first cannot pass its child off as
another task's)."""


class Suspended(BaseException):
    """The workflow parked: its attempt ends here, unwinding the workflow's function (a
    BaseException, so that ``except Exception`` in it does not swallow the suspension)."""


class _Replayed(Exception):
    """Rolls back a replayed ``wf.transaction()`` block: its writes committed once."""


class Workflow:
    """What a workflow function is given as its first argument: checkpointed steps,
    durable sleeps and waits, child jobs, and values that replay the same.

    ``id`` is the workflow's job id and ``ctx`` its :class:`~sqljobs.JobContext`.
    """

    def __init__(self, ctx: JobContext, task: Task[..., Any], history: Sequence[WorkflowStep]):
        self.ctx = ctx
        self._task = task
        self._app = task.app
        self._backend: Backend = ctx.backend
        self._history = {step.position: step for step in history}
        self._position = 0
        self._held = HeldJob(ctx.job_id, ctx.token)
        self._events_taken: dict[str, int] = {}

    @property
    def id(self) -> int:
        return self.ctx.job_id

    @property
    def replaying(self) -> bool:
        """True while the function is before the first position it has no checkpoint for."""
        return self._position in self._history

    # -- steps ------------------------------------------------------------------------

    def step(
        self, name: str, fn: Callable[..., T], /, *args: Any, retry: Retry | None = None,
        **kwargs: Any,
    ) -> T:  # fmt: skip
        """Run ``fn(*args, **kwargs)`` once and checkpoint its result (JSON); a replay
        returns the checkpointed result without calling it. Without ``retry`` an error
        fails the workflow's attempt (its own retry policy replays up to here); with it,
        the step is tried again after the policy's delay (a durable sleep), up to its
        ``max_attempts``, then :class:`~sqljobs.StepFailed` is raised."""
        position, found = self._take(name, "step")
        if found is not None and found.state == "done":
            return found.value  # type: ignore[no-any-return]
        failures, retry_at = self._earlier_failures(name, found)
        if retry_at is not None:
            self._park(wake_at=retry_at)
        try:
            with self._span(name, "step"):
                value = fn(*args, **kwargs)
        except Exception as exc:
            self._step_failed(position, name, exc, failures + 1, retry)
            raise
        replayed: T = self._done(position, name, "step", value)
        return replayed

    async def step_async(
        self, name: str, fn: Callable[..., Any], /, *args: Any, retry: Retry | None = None,
        **kwargs: Any,
    ) -> Any:  # fmt: skip
        """:meth:`step` for ``async def`` workflows: ``fn`` may be a coroutine function;
        the checkpoint is written off the event loop."""
        position, found = self._take(name, "step")
        if found is not None and found.state == "done":
            return found.value
        failures, retry_at = self._earlier_failures(name, found)
        if retry_at is not None:
            await asyncio.to_thread(self._park, wake_at=retry_at)
        try:
            with self._span(name, "step"):
                value = fn(*args, **kwargs)
                if asyncio.iscoroutine(value):
                    value = await value
        except Exception as exc:
            await asyncio.to_thread(self._step_failed, position, name, exc, failures + 1, retry)
            raise
        return await asyncio.to_thread(self._done, position, name, "step", value)

    def _earlier_failures(self, name: str, found: WorkflowStep | None) -> tuple[int, float | None]:
        """How often step ``name`` failed before, and the time of its next try if that has
        not come (None: run it now); a step out of tries raises StepFailed again."""
        if found is None:
            return 0, None
        failures = int(found.detail.get("failures", 0))
        if found.state == "failed":
            raise StepFailed(name, failures, found.error or "")
        retry_at = found.detail.get("retry_at")
        if retry_at is None or self._reached(float(retry_at)):
            return failures, None
        return failures, float(retry_at)

    def _step_failed(
        self, position: int, name: str, exc: Exception, failures: int, retry: Retry | None
    ) -> None:
        """Record a step's failure: with attempts left under ``retry``, park until its
        delay has passed; out of them, end the step ``failed`` and raise StepFailed."""
        if retry is None:
            return  # the workflow's attempt fails; its retry policy replays to here
        error = storable(f"{type(exc).__name__}: {exc}")
        if failures >= retry.max_attempts:
            step = WorkflowStep(position, name, "step", "failed", error=error,
                                detail={"failures": failures})  # fmt: skip
            self._save(step)
            raise StepFailed(name, failures, error) from exc
        retry_at = _instant(self._app.clock() + retry.delay(failures))
        detail = {"failures": failures, "retry_at": retry_at}
        self._save(WorkflowStep(position, name, "step", "waiting", error=error, detail=detail))
        log.info("workflow %s: step %r failed (%s); again in %.1f s", self.id, name, error,
                 retry_at - self._app.clock())  # fmt: skip
        self._park(wake_at=retry_at)

    @contextmanager
    def transaction(self, name: str) -> Iterator[Any]:
        """A DB-API connection on the queue's database in one transaction, whose writes
        and this step's checkpoint commit together, fenced by the claim's token: exactly
        once. A replay runs the block again in a transaction that is rolled back (its
        reads see what committed; its writes are undone), so keep other effects out of it.

        A value the block computes (a new row's id, a count it read) is computed afresh
        on a replay, from what has committed since, and may differ from the first run's:
        do not carry it past the block. Return it from :meth:`transaction_step` instead,
        which checkpoints it with the writes, or read it back by a stable key in a
        :meth:`step` after the block.
        """
        position, found = self._take(name, "transaction")
        if found is not None and found.state == "done":
            try:
                with self._backend.job_transaction() as conn:
                    yield conn
                    raise _Replayed
            except _Replayed:
                return
            except Exception as exc:  # run against what it committed: a duplicate, say
                log.debug("workflow %s: replayed step %r raised %s (rolled back, as every "
                          "replay is)", self.id, name, exc)  # fmt: skip
                return
        step = WorkflowStep(position, name, "transaction", "done")
        with self._span(name, "transaction"), self._backend.job_transaction() as conn:
            yield conn
            self._commit_step(step, conn)
        self._history[position] = step

    def transaction_step(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Call ``fn(connection, *args, **kwargs)`` with a DB-API connection on the queue's
        database in one transaction, whose writes, ``fn``'s result (JSON) and this step's
        checkpoint commit together, fenced by the claim's token: exactly once. A replay
        returns the checkpointed result without calling ``fn``, so a value it computed
        (a new row's id) is the first run's on every replay. An error in ``fn`` rolls its
        writes back and fails the workflow's attempt, as in :meth:`step`."""
        position, found = self._take(name, "transaction")
        if found is not None and found.state == "done":
            return found.value  # type: ignore[no-any-return]
        with self._span(name, "transaction"), self._backend.job_transaction() as conn:
            value = fn(conn, *args, **kwargs)
            encoded = None if value is None else encode_result(
                f"{self._task.name} step {name}", value, self._app.max_payload
            )  # fmt: skip
            step = WorkflowStep(position, name, "transaction", "done", encoded)
            self._commit_step(step, conn)
        self._history[position] = step
        replayed: T = step.value
        return replayed

    def _commit_step(self, step: WorkflowStep, conn: Any) -> None:
        """Write ``step``'s checkpoint in the transaction of ``conn``, fenced; a claim lost
        raises LeaseLost, which rolls the transaction back."""
        if not self._backend.save_step(self._checkpoint(step), conn):
            raise LeaseLost(
                f"workflow {self.id} is no longer held by this worker: the writes of "
                f"step {step.name!r} were rolled back"
            )

    # -- durable waits ----------------------------------------------------------------

    def sleep(self, duration: float | timedelta) -> None:
        """Wait ``duration`` (seconds or a timedelta) holding nothing: the workflow parks
        and is due again when it has passed."""
        wait = seconds(duration, "wf.sleep(duration)")
        assert wait is not None
        self._sleep("sleep", lambda: self._app.clock() + wait)

    def sleep_until(self, when: datetime | float) -> None:
        """Wait until ``when`` (an aware datetime, or Unix seconds), holding nothing."""
        at = to_epoch(when, "wf.sleep_until(when)")
        assert at is not None
        self._sleep("sleep_until", lambda: at)

    def _sleep(self, name: str, until: Callable[[], float]) -> None:
        position, found = self._take(name, "sleep")
        if found is not None and found.state == "done":
            return
        if found is None:
            wake_at = _instant(until())
            step = WorkflowStep(position, name, "sleep", "waiting", detail={"wake_at": wake_at})
            self._save(step)
        else:
            wake_at = float(found.detail["wake_at"])
        if self._reached(wake_at):
            self._save(WorkflowStep(position, name, "sleep", "done", detail={"wake_at": wake_at}))
            return
        self._park(wake_at=wake_at)

    def wait_for(self, event: str, timeout: float | timedelta | None = None) -> Any:
        """The payload of the next event named ``event`` (see ``app.emit``), or None when
        ``timeout`` passes first. Parks until then; an event emitted before the wait is
        found, and a workflow takes the events of one name in the order they committed."""
        check_text(event, "wf.wait_for(event)")
        limit = seconds(timeout, "wf.wait_for(timeout)")
        position, found = self._take(event, "wait")
        if found is not None and found.state == "done":
            taken = found.detail.get("event_id")
            if taken is not None:
                self._events_taken[event] = int(taken)
            return found.value
        after = self._events_taken.get(event, 0)
        now = self._app.clock()
        if found is not None:
            deadline = found.detail.get("timeout_at")
        else:
            deadline = None if limit is None else _instant(now + limit)
        arrived = self._backend.first_event(event, after)
        if arrived is not None and (deadline is None or arrived.emitted_at <= deadline):
            self._events_taken[event] = arrived.id
            detail = {"event_id": arrived.id, "emitted_at": arrived.emitted_at,
                      "timeout_at": deadline}  # fmt: skip
            step = WorkflowStep(position, event, "wait", "done", arrived.payload, detail=detail)
            self._save(step)
            return step.value
        if found is None:
            waiting: dict[str, Any] = {"timeout_at": deadline, "after": after}
            self._save(WorkflowStep(position, event, "wait", "waiting", detail=waiting))
        if deadline is not None and self._reached(deadline):  # (an event after it: too late)
            detail = {"timeout_at": deadline, "timed_out": True}
            self._save(WorkflowStep(position, event, "wait", "done", detail=detail))
            return None
        self._park(wake_at=deadline, event=event, after_event=after)
        raise AssertionError("unreachable: a park raises")  # pragma: no cover

    # -- child jobs -------------------------------------------------------------------

    def run(self, signature: Signature) -> Any:
        """Enqueue ``signature`` (``task.s(...)``) as a child job and return its result;
        the workflow parks until the child ends. A child that ended dead raises
        :class:`~sqljobs.JobFailed`, a cancelled one :class:`~sqljobs.JobCancelled`."""
        return self._children(f"run:{signature.task.name}", "run", [signature])[0]

    def gather(self, signatures: Sequence[Signature]) -> list[Any]:
        """Enqueue every signature as a child job and return their results, in order, once
        all have ended (fan out, fan in); the first that failed raises as :meth:`run`."""
        signatures = list(signatures)
        if not signatures:
            return []
        names = sorted({s.task.name for s in signatures})
        return self._children(f"gather:{','.join(names)}", "gather", signatures)

    def _children(self, name: str, kind: str, signatures: list[Signature]) -> list[Any]:
        position, found = self._take(name, kind)
        if found is not None and found.state in ("done", "failed"):
            return self._child_results(found)
        if found is None:
            now = self._app.clock()
            jobs = [
                replace(sig, options=replace(
                    sig.options, key=CHILD_KEY.format(job=self.id, position=position, index=i,
                                                      task=sig.task.name),
                    key_hold=None,  # retained: a replay after the child ended must find it
                )).new_job(now)
                for i, sig in enumerate(signatures)
            ]  # fmt: skip
            # the children and the checkpoint naming them commit together, on the
            # workflow's row held under the claim's token: a cancel or a lost claim
            # between them leaves no child running unknown to the workflow
            with self._backend.job_transaction() as conn:
                ids = [r.id for r in self._backend.enqueue_jobs(jobs, conn)]
                step = WorkflowStep(position, name, kind, "waiting", detail={"children": ids})
                if not self._backend.save_step(self._checkpoint(step), conn):
                    raise LeaseLost(
                        f"workflow {self.id} is no longer held by this worker (cancelled, or "
                        f"its claim lost): {name} was not started"
                    )
            self._history[position] = step
            self._app._wakeups.announce()
            log.info("workflow %s: %s started %s", self.id, name, ids)
        else:
            ids = [int(i) for i in found.detail["children"]]
        states = {c.id: c for c in self._backend.child_states(ids)}
        if all(c.state in ("done", "dead", "cancelled") for c in states.values()):
            outcome = [
                {"id": i, "state": states[i].state if i in states else "gone",
                 "result": None if i not in states or states[i].result is None
                 else json.loads(states[i].result or "null"),
                 "error": states[i].error if i in states else None}
                for i in ids
            ]  # fmt: skip
            failed = any(o["state"] != "done" for o in outcome)
            step = WorkflowStep(position, name, kind, "failed" if failed else "done",
                                json.dumps(outcome), detail={"children": ids})  # fmt: skip
            self._save(step)
            return self._child_results(step)
        self._park(children=ids)
        raise AssertionError("unreachable: a park raises")  # pragma: no cover

    def _child_results(self, step: WorkflowStep) -> list[Any]:
        outcome = step.value or []
        for child in outcome:
            if child["state"] == "cancelled":
                raise JobCancelled(child["id"], step.name)
            if child["state"] != "done":
                raise JobFailed(child["id"], step.name, child["state"], child["error"])
        return [child["result"] for child in outcome]

    # -- the same, awaitable: the database calls run off the event loop ---------------------

    async def sleep_async(self, duration: float | timedelta) -> None:
        """:meth:`sleep`, awaitable."""
        await asyncio.to_thread(self.sleep, duration)

    async def sleep_until_async(self, when: datetime | float) -> None:
        """:meth:`sleep_until`, awaitable."""
        await asyncio.to_thread(self.sleep_until, when)

    async def wait_for_async(self, event: str, timeout: float | timedelta | None = None) -> Any:
        """:meth:`wait_for`, awaitable."""
        return await asyncio.to_thread(self.wait_for, event, timeout)

    async def run_async(self, signature: Signature) -> Any:
        """:meth:`run`, awaitable."""
        return await asyncio.to_thread(self.run, signature)

    async def gather_async(self, signatures: Sequence[Signature]) -> list[Any]:
        """:meth:`gather`, awaitable."""
        return await asyncio.to_thread(self.gather, signatures)

    # -- values that replay the same ------------------------------------------------------

    def now(self) -> datetime:
        """The time (UTC) this position was first reached; the same on every replay."""
        value = self._value("now", lambda: self._app.clock())
        return datetime.fromtimestamp(value, UTC)

    def uuid(self) -> _uuid.UUID:
        """A random UUID, the same on every replay."""
        return _uuid.UUID(self._value("uuid", lambda: str(_uuid.uuid4())))

    def random(self) -> float:
        """A random float in [0, 1), the same on every replay."""
        return float(self._value("random", _random.random))

    def _value(self, kind: str, make: Callable[[], Any]) -> Any:
        position, found = self._take(kind, kind)
        if found is not None and found.state == "done":
            return found.value
        return self._done(position, kind, kind, make())

    # -- the positions and their checkpoints ----------------------------------------------

    def _reached(self, at: float) -> bool:
        """Whether the time ``at`` of a sleep, a wait's timeout or a step's retry has come:
        by this worker's clock, or because a wake-up made the workflow due at that very
        time (its ``run_at``), by a clock that had reached it: a worker whose clock runs
        behind the one that woke the workflow must not park it again for the same time."""
        return _reached(self._app.clock(), at) or abs(self.ctx.job.run_at - at) <= 1e-6

    def _take(self, name: str, kind: str) -> tuple[int, WorkflowStep | None]:
        check_text(name, f"workflow {kind} name")
        position = self._position
        self._position += 1
        found = self._history.get(position)
        if found is not None and (found.name, found.kind) != (name, kind):
            raise WorkflowChanged(self.id, position, f"{found.kind} {found.name}",
                                  f"{kind} {name}")  # fmt: skip
        return position, found

    def _span(self, name: str, kind: str) -> AbstractContextManager[None]:
        """The step's span where tracing is on (see sqljobs.tracing)."""
        if self._app.hooks.tracer is None:
            return nullcontext()
        from .tracing import step_span

        return step_span(self._app, self.id, self._task.name, name, kind)

    def _done(self, position: int, name: str, kind: str, value: Any) -> Any:
        """Checkpoint ``value`` as the step's result; return it as a replay will (decoded
        from its JSON: a tuple comes back a list, a dict's keys strings), so the code after
        the step sees the same value on the first run as on every replay."""
        encoded = None if value is None else encode_result(
            f"{self._task.name} step {name}", value, self._app.max_payload
        )  # fmt: skip
        step = WorkflowStep(position, name, kind, "done", encoded)
        self._save(step)
        return step.value

    def _checkpoint(self, step: WorkflowStep) -> Any:
        from .backends.records import Checkpoint

        return Checkpoint(self._held, step)

    def _save(self, step: WorkflowStep) -> None:
        if not self._backend.save_step(self._checkpoint(step)):
            raise LeaseLost(
                f"workflow {self.id} is no longer held by this worker (attempt "
                f"{self.ctx.attempt}): step {step.name!r} was not recorded"
            )
        self._history[step.position] = step

    def _park(
        self, *, wake_at: float | None = None, event: str | None = None, after_event: int = 0,
        children: Sequence[int] = (),
    ) -> None:  # fmt: skip
        """End this attempt and wait (given back, not charged); raises Suspended."""
        from .backends.records import Park

        self.ctx.completing = True  # the job leaves `running` by our hand: no lost lease
        park = Park(self._held, wake_at, event, after_event, tuple(children))
        state = self._backend.park_workflow(park)
        if state is None:
            self.ctx.completing = False
            raise LeaseLost(f"workflow {self.id} is no longer held by this worker: not parked")
        self.ctx.parked = True
        why = _reason(wake_at, event, children)
        log.info("workflow %s (%s) parked: %s%s", self.id, self._task.name, why,
                 "; due again at once" if state == JobState.PENDING else "")  # fmt: skip
        raise Suspended(why)


def _instant(at: float) -> float:
    """``at`` to the microsecond, as the database keeps a time: a wake-up compared with
    the clock on the next replay finds what was stored, not a float a hair later."""
    return round(at, 6)


def _reached(now: float, at: float) -> bool:
    """Whether ``now`` has reached ``at``, both to the microsecond."""
    return now >= at - 1e-6


def _reason(wake_at: float | None, event: str | None, children: Sequence[int]) -> str:
    if children:
        return f"waits for {len(children)} child job(s)"
    if event is not None:
        until = "" if wake_at is None else f" until {datetime.fromtimestamp(wake_at, UTC):%c}"
        return f"waits for event {event!r}{until}"
    assert wake_at is not None
    return f"sleeps until {datetime.fromtimestamp(wake_at, UTC).isoformat()}"


def workflow_runner(task: Task[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """The handler a worker calls for workflow ``task``: its history read, a
    :class:`Workflow` made, ``fn`` run from the top with it."""
    if asyncio.iscoroutinefunction(fn):

        async def run_async(ctx: JobContext, *args: Any, **kwargs: Any) -> Any:
            history = await asyncio.to_thread(_history, ctx)
            return await fn(Workflow(ctx, task, history), *args, **kwargs)

        return run_async

    def run(ctx: JobContext, *args: Any, **kwargs: Any) -> Any:
        return fn(Workflow(ctx, task, _history(ctx)), *args, **kwargs)

    return run


def _history(ctx: JobContext) -> list[WorkflowStep]:
    """The workflow's checkpoints; none to read on its first claim (a claim's token counts
    the job's claims, and only a holder's token writes a checkpoint)."""
    if ctx.token == 1:
        return []
    return ctx.backend.workflow_steps(ctx.job_id)


def first_param_is_workflow(fn: Callable[..., Any]) -> bool:
    """Whether ``fn``'s first parameter is annotated :class:`Workflow` (or named so)."""
    import inspect
    import typing

    params = list(inspect.signature(fn).parameters.values())
    if not params:
        return False
    annotation = params[0].annotation
    if annotation is Workflow:
        return True
    if isinstance(annotation, str):
        try:
            return typing.get_type_hints(fn).get(params[0].name) is Workflow
        except Exception:
            return annotation.split(".")[-1] == "Workflow"
    return False
