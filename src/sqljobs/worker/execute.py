"""Run one job and map what happened to an Outcome; the thread pool and the async loop."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import queue
import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..context import JobContext
from ..errors import ConfigurationError, Discard, RetryLater
from ..jobs import ClaimedJob, JobState, Outcome
from ..payload import encode_result, storable
from ..tasks import Task
from .log_lines import raised_after_commit

if TYPE_CHECKING:
    from .hook_runner import WorkerHooks

log = logging.getLogger("sqljobs.worker")


@dataclass(eq=False)
class Running:
    """One job in this worker's hands. Only the coordinator thread sets ``closed``."""

    job: ClaimedJob
    task: Task
    ctx: JobContext
    args: list[Any]
    kwargs: dict[str, Any]
    started_wall: float
    started: float = field(default_factory=time.monotonic)
    begun: float | None = None  # when a thread or the loop actually started the handler
    deadline: float | None = None
    closed: bool = False
    abandoned: bool = False
    cancelled_at: float | None = None  # monotonic: when this worker learned of a cancel
    overdue: bool = False  # cancelled and still running past the grace: said once
    prefetched: bool = False  # claimed into the buffer; the database is told once it began
    future: LoopTask | None = None  # an async run's task, cancellable from any thread
    ended: float | None = None  # monotonic, when the handler returned or raised (hooks only)
    exception: BaseException | None = None  # what it raised (hooks only)
    worker: str | None = None  # this worker's id, for the attempt's history entry
    rng: random.Random | None = None  # the worker's generator, for the retry's jitter

    def call_args(self) -> list[Any]:
        return [self.ctx, *self.args] if self.task.takes_context else self.args


Report = Callable[[Running, Outcome], None]
Started = Callable[[Running], None]


def no_hook(_run: Running) -> None:
    """No one listens for handlers starting."""


Clock = Callable[[], float]
TRACEBACK_KEPT = 4000
"""Characters of a failed attempt's traceback kept in its history entry (the end: where
the error was raised); the job's last traceback is kept whole."""


def success(run: Running, value: Any = None) -> Outcome:
    """The attempt succeeded; its return value is stored unless the task opts out.
    Encoding it may raise PayloadError (not JSON, too big): the caller fails the attempt."""
    result = encoded_result(run.task, value)
    return Outcome(run.job.id, run.job.token, JobState.DONE, result=result)


def encoded_result(task: Task, value: Any) -> str | None:
    """``value`` as ``task``'s stored result (None: nothing to store), through its result
    model: what a returned value and ``ctx.set_result()`` both go through."""
    if value is None or not task.store_result:
        return None
    if task.result_model is not None:
        value = task.result_model.dump(value)
    return encode_result(task.name, value, task.app.max_payload)


def result_encoder(task: Task | None) -> Callable[[Any], str | None] | None:
    """What a job's context encodes ``ctx.set_result()``'s value with (None: the task
    stores no result)."""
    if task is None or not task.store_result:
        return None
    return functools.partial(encoded_result, task)


def finished(run: Running, value: Any, now: float) -> Outcome:
    """The handler returned ``value``. A value that cannot be stored (not JSON, too big, a
    ``result_model`` that refuses it) ends the job ``dead`` at once: the handler ran to
    its end, so a retry would repeat its effects and fail the same way. A value given to
    ``ctx.set_result()`` is the result instead. A handler that completed its job in
    ``ctx.transaction()`` is told by :func:`after_commit`."""
    if run.ctx.completed_in_transaction:
        return after_commit(run, now, value=value)
    if run.ctx.result_json is not None:
        return _with_set_result(run, value, now)
    try:
        return success(run, value)
    except Exception as exc:
        return unstorable(run, exc, now)


def _with_set_result(run: Running, value: Any, now: float) -> Outcome:
    """The job is done with the value ``ctx.set_result()`` was given; a different value
    returned as well is an error, recorded with the completion."""
    job = run.job
    done = Outcome(job.id, job.token, JobState.DONE, result=run.ctx.result_json)
    mismatch = _unlike_set_result(run, value)
    if mismatch is None:
        return done
    tb, entry = _attempt_entry(run, mismatch, now, "result_mismatch")
    raised_after_commit(run, entry["error"], tb)
    return replace(done, error=entry["error"], traceback=tb, history=entry)


def _unlike_set_result(run: Running, value: Any) -> Exception | None:
    """Why a returned ``value`` cannot stand beside the one ``ctx.set_result()`` was
    given (None: it is None, or the same JSON)."""
    given = run.ctx.result_json
    if given is None or value is None or not run.task.store_result:
        return None
    try:
        encoded = encoded_result(run.task, value)
    except Exception as exc:
        returned = f"a value that cannot be stored ({_describe(exc)})"
    else:
        if encoded is None or encoded == given or _same_json(encoded, given):
            return None
        returned = _clipped(encoded)
    return ConfigurationError(
        f"the handler returned {returned} after ctx.set_result() was given "
        f"{_clipped(given)}; the set value is kept as the job's result. Return None (or "
        "the same value) from a handler that calls ctx.set_result()"
    )


def _same_json(a: str, b: str) -> bool:
    """The same JSON value, keys in any order (1 and 1.0, 1 and true stay apart)."""
    return json.dumps(json.loads(a), sort_keys=True) == json.dumps(json.loads(b), sort_keys=True)


def _clipped(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def unstorable(run: Running, exc: Exception, now: float) -> Outcome:
    """The job is ``dead``: its handler succeeded but its return value cannot be stored."""
    job = run.job
    tb, entry = _attempt_entry(run, exc, now, "unstorable_result")
    error = storable(
        f"the handler returned a value that cannot be stored, so the job is dead and not "
        f"retried (a retry would run its effects again): {_describe(exc)}"
    )
    return Outcome(
        job.id, job.token, JobState.DEAD, error=error, traceback=tb, history=entry, errors=1
    )


def parked(run: Running) -> Outcome:
    """A workflow parked its job (written already, with the attempt given back): nothing
    more to write for this attempt."""
    return Outcome(run.job.id, run.job.token, JobState.WAITING, uncharge=True)


AFTER_COMMIT = "raised after its transaction committed"
"""How the history, the last error and the log name an exception a handler raised once
its ``ctx.transaction()`` had committed the job's completion."""


def after_commit(
    run: Running, now: float, value: Any = None, exc: BaseException | None = None
) -> Outcome:
    """The handler's ``ctx.transaction()`` committed the job as ``done`` with its writes;
    then it returned ``value`` or raised ``exc``. The job stays ``done`` (its effects and
    completion committed together: a retry would repeat them). A returned value is stored
    (unless ``ctx.set_result()`` committed one: then it must be None or the same), an
    exception (or a value that cannot be stored, or another) is logged as an error and recorded
    in the job's history and last error: written now, on this thread, fenced on the job
    still being ``done`` under this attempt's token. Never raises: a failed write is
    logged, and the job stays ``done`` as committed."""
    job = run.job
    done = Outcome(job.id, job.token, JobState.DONE)
    amend: Outcome | None = None
    why, outcome = AFTER_COMMIT, "raised_after_commit"
    if exc is None and run.ctx.result_json is not None:  # committed with the completion
        exc = _unlike_set_result(run, value)
        if exc is None:
            return done
        why, outcome = "returned a value after its transaction committed", "result_mismatch"
    elif exc is None:
        try:
            amend = success(run, value)
        except Exception as err:  # the value cannot be stored: said as an error would be
            exc, why = err, "returned a value that cannot be stored after its transaction committed"
        else:
            if amend.result is None:
                return done  # nothing to add: the committed completion says it all
    if exc is not None:
        tb, entry = _attempt_entry(run, exc, now, outcome)
        error = storable(f"{why} (the job stays done): {_describe(exc)}")
        entry["error"] = error
        amend = Outcome(job.id, job.token, JobState.DONE, error=error, traceback=tb, history=entry)
        raised_after_commit(run, error, tb)
    assert amend is not None
    try:
        written = run.ctx.backend.amend_done_job(amend)
    except Exception as err:  # the database is unreachable: the job is done all the same
        log.error(
            "job %s (%s): could not record what came after its committed transaction "
            "(%s); the job is done: %s",
            job.id, job.task, "an error" if exc is not None else "its result", err,
        )  # fmt: skip
        return done
    if not written:
        log.warning(
            "job %s (%s): what came after its committed transaction was not recorded: the "
            "job is no longer done under attempt %s (pruned, or sent back by an operator)",
            job.id, job.task, job.attempt,
        )  # fmt: skip
    return done


def failure(run: Running, exc: BaseException, now: float, outcome: str = "failed") -> Outcome:
    """An attempt failed: retry with backoff, or end ``dead`` when out of attempts or time."""
    job = run.job
    tb, entry = _attempt_entry(run, exc, now, outcome)
    if isinstance(exc, Discard):
        entry["outcome"] = "discarded"
        return Outcome(
            job.id,
            job.token,
            JobState.DEAD,
            error=storable(f"discarded: {exc.reason}"),
            traceback=tb,
            history=entry,
        )
    delay = exc.delay if isinstance(exc, RetryLater) else run.task.retry.delay(job.attempt, run.rng)
    if isinstance(exc, RetryLater):
        entry["outcome"] = "retry_requested"
    error = _describe(exc)
    if job.attempt >= job.max_attempts:
        error = f"failed {job.attempt} of {job.max_attempts} attempts; last: {error}"
        return Outcome(
            job.id, job.token, JobState.DEAD, error=error, traceback=tb, history=entry, errors=1
        )
    if job.deadline_at is not None and now + delay >= job.deadline_at:
        error = f"deadline passed after {job.attempt} attempts; last: {error}"
        return Outcome(
            job.id, job.token, JobState.DEAD, error=error, traceback=tb, history=entry, errors=1
        )
    entry["retry_in"] = delay
    return Outcome(
        job.id,
        job.token,
        JobState.PENDING,
        delay=delay,
        error=error,
        traceback=tb,
        history=entry,
        errors=1,
    )


def _attempt_entry(
    run: Running, exc: BaseException, now: float, outcome: str
) -> tuple[str, dict[str, Any]]:
    """The traceback of ``exc`` (as stored) and the history entry of an attempt that
    ended with it."""
    tb = storable("".join(traceback.format_exception(exc)))
    entry: dict[str, Any] = {
        "attempt": run.job.attempt,
        "outcome": outcome,
        "started_at": run.started_wall,
        "ended_at": now,
        "error": _describe(exc),
        "exception": storable(f"{type(exc).__module__}.{type(exc).__qualname__}"),
        "worker": run.worker,
        "traceback": tb[-TRACEBACK_KEPT:],  # each attempt's own, its end if it is long
    }
    return tb, entry


def _describe(exc: BaseException) -> str:
    """The error as stored (``storable``: a message may hold anything)."""
    try:
        text = str(exc)
    except Exception:  # a handler's own exception class may fail even at this
        text = "<str() of the exception failed>"
    return storable(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def run_sync(
    run: Running, clock: Clock, started: Started = no_hook, hooks: WorkerHooks | None = None
) -> Outcome:
    """Run the handler in this thread (through the App's middleware, if it has any).
    Anything it raises, ``SystemExit`` and ``KeyboardInterrupt`` included, is the
    attempt's failure: the thread lives on."""
    run.begun = time.monotonic()
    started(run)
    try:
        if run.task.model_args is not None:  # in this thread: the coordinator never waits
            run.task.model_args.load(run.args, run.kwargs)
        fn = run.task.fn
        value = fn(*run.call_args(), **run.kwargs) if hooks is None else hooks.call(run)
    except BaseException as exc:
        if run.ctx.parked:
            return parked(run)
        if run.ctx.completed_in_transaction:
            return after_commit(run, clock(), exc=exc)
        return failure(run, exc, clock())
    return finished(run, value, clock())


async def run_async(
    run: Running, clock: Clock, started: Started = no_hook, hooks: WorkerHooks | None = None
) -> Outcome:
    run.begun = time.monotonic()
    started(run)
    try:
        if run.task.model_args is not None:
            run.task.model_args.load(run.args, run.kwargs)
        if hooks is None:
            value = await run.task.fn(*run.call_args(), **run.kwargs)
        else:
            value = await hooks.call_async(run)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        if run.ctx.parked:
            return parked(run)
        if run.ctx.completed_in_transaction:  # its record is a write: off the loop
            return await asyncio.to_thread(after_commit, run, clock(), exc=exc)
        return failure(run, exc, clock())
    if run.ctx.completed_in_transaction and value is not None and run.task.store_result:
        return await asyncio.to_thread(after_commit, run, clock(), value=value)
    return finished(run, value, clock())


class ThreadPool:
    """Up to ``size`` threads fed from one queue, started as jobs need them (one at once:
    starting all of them up front delays a worker's first job). A handler that is given
    up keeps its thread until it returns (a thread cannot be killed), so no more than
    ``size`` run."""

    def __init__(
        self,
        size: int,
        report: Report,
        clock: Clock,
        name: str,
        started: Started = no_hook,
        hooks: WorkerHooks | None = None,
    ) -> None:
        self._queue: queue.SimpleQueue[Running | None] = queue.SimpleQueue()
        self._report = report
        self._on_start = started
        self._hooks = hooks
        self._clock = clock
        self._name = name
        self._size = size
        self._lock = threading.Lock()
        self._started = 0
        self._waiting = 0  # threads blocked on the queue, ready for a job
        self.add_thread()

    def add_thread(self) -> None:
        with self._lock:
            self._started += 1
            number = self._started
        thread = threading.Thread(target=self._loop, name=f"{self._name}-{number}", daemon=True)
        thread.start()

    def submit(self, run: Running) -> None:
        self._queue.put(run)
        with self._lock:
            more = self._started < self._size and self._queue.qsize() > self._waiting
        if more:
            self.add_thread()

    def take_queued(self) -> list[Running]:
        """Remove and return the jobs no thread has started yet."""
        taken: list[Running] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return taken
            if item is None:  # a stop sentinel: put it back for a thread
                self._queue.put(None)
                return taken
            taken.append(item)

    def _loop(self) -> None:
        while True:
            with self._lock:
                self._waiting += 1
            run = self._queue.get()
            with self._lock:
                self._waiting -= 1
            if run is None:
                return
            if run.closed:  # given up before it started (lease lost, timed out): skip it
                self._report(run, success(run))  # discarded by the coordinator; frees the slot
                continue
            self._report(run, run_sync(run, self._clock, self._on_start, self._hooks))

    def stop(self) -> None:
        with self._lock:
            started = self._started
        for _ in range(started):
            self._queue.put(None)


class LoopTask:
    """A run's asyncio task as the coordinator's thread sees it: cancelled from there, the
    task itself created on the loop (later, with the runs queued meanwhile). A cancel
    sent after :meth:`AsyncRunner.start_queued` is served after the task's creation: the
    loop runs its callbacks in order. One sent before it finds no task; the run is then
    closed, and the loop skips it (see ``AsyncRunner._start_queued``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.task: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs any more
            self._loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()


class AsyncRunner:
    """One event loop on its own thread for ``async def`` tasks."""

    def __init__(
        self,
        report: Report,
        clock: Clock,
        started: Started = no_hook,
        hooks: WorkerHooks | None = None,
    ) -> None:
        self._report = report
        self._clock = clock
        self._on_start = started
        self._hooks = hooks
        self._lock = threading.Lock()
        self._queued: list[Running] = []
        self._woken = False  # a wake-up of the loop is on its way for the queued runs
        self._loop = asyncio.new_event_loop()
        # Python 3.12+: a job's coroutine runs as its task is made, up to its first real
        # wait; one that never waits needs no scheduling at all
        eager = getattr(asyncio, "eager_task_factory", None)
        if eager is not None:
            self._loop.set_task_factory(eager)
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="sqljobs-async", daemon=True
        )
        self._thread.start()

    def submit(self, run: Running) -> None:
        """Queue ``run`` for the loop; :meth:`start_queued` starts it."""
        run.future = LoopTask(self._loop)
        with self._lock:
            self._queued.append(run)

    def start_queued(self) -> None:
        """Wake the loop once for every run queued so far (the coordinator calls it once a
        claim's jobs are all dispatched): a wake-up per job costs the loop's thread a
        hand-off each, and one per first job lets the loop start that job alone (the
        wake-up's write lets go of the GIL), so its result comes back alone and the next
        claim asks for one job."""
        with self._lock:
            if not self._queued or self._woken:
                return
            self._woken = True
        self._loop.call_soon_threadsafe(self._start_queued)

    def _start_queued(self) -> None:
        """On the loop: a task for each queued run."""
        with self._lock:
            runs, self._queued = self._queued, []
            self._woken = False
        for run in runs:
            if run.closed:  # given up before it started: skip it, as the threads do
                self._report(run, success(run))  # discarded by the coordinator; frees the slot
                continue
            assert isinstance(run.future, LoopTask)
            run.future.task = self._loop.create_task(self._run(run))

    async def _run(self, run: Running) -> None:
        try:
            outcome = await run_async(run, self._clock, self._on_start, self._hooks)
        except asyncio.CancelledError as exc:
            if run.closed:
                return  # the coordinator cancelled it and already decided this job's fate
            # the handler raised it itself (or let a cancellation from its own code out):
            # a failed attempt like any other, or the job would stay running for ever
            if run.ctx.completed_in_transaction:
                outcome = await asyncio.to_thread(after_commit, run, self._clock(), exc=exc)
            else:
                outcome = failure(run, exc, self._clock())
        self._report(run, outcome)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=1.0)
        if not self._thread.is_alive():
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            self._loop.close()
