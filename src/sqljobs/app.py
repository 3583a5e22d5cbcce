"""App: the task registry, the enqueue path, and the entry to workers and stats."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Concatenate, TypeVar, cast, overload

from . import admin, enqueue, payload
from .backends import Backend, open_backend
from .context import JobContext
from .dependencies import AfterPolicy, Group, check_policy
from .errors import ConfigurationError, SqljobsError
from .handles import JobHandle
from .hooks import EventName, Hook, Hooks, Middleware, around_enqueue
from .humanize import redact_url
from .jobs import (
    Job,
    JobCount,
    JobFilter,
    JobPage,
    JobState,
    KeyScope,
    NewJob,
    QueueInfo,
    TaskInfo,
    WorkerStatus,
)
from .limits import (
    Limit,
    define_limit,
    define_queue_limit,
)
from .notifiers import LocalNotifier
from .payload import check_text
from .retention import (
    DEFAULT_RETENTION,
    KeyRetention,
    Retention,
    key_retention_of,
)
from .retry import Retry
from .rollup import MetricAmount, MinuteCounts
from .schedules import (
    Schedule,
    ScheduleNotFound,
    ScheduleState,
    check_arguments,
    check_policies,
    check_timing,
    define_schedule,
    schedule_job,
    tick_key,
)
from .stats import Stats, with_queues
from .tasks import _P, _R, Signature, Task, TaskDecorator, _Unchecked
from .url import check_sqlite_directory, parse_url, resolve_url
from .validate import (
    check_job_id,
    check_queue_name,
    check_queues,
    seconds,
)
from .waiting import JobWatcher

if TYPE_CHECKING:
    from .testing import Clock, DrainReport

log = logging.getLogger("sqljobs")

DEFAULT_QUEUE = "default"
DEFAULT_LEASE = 30.0
DEFAULT_MAX_PAYLOAD = 1024 * 1024

H = TypeVar("H", bound=Hook)


class App:
    """A queue on one database: ``App("sqlite:///jobs.db")`` or ``App("postgresql://...")``.

    With no URL, ``SQLJOBS_URL`` is used, else ``sqlite:///sqljobs.db``. The schema is
    migrated on first use unless ``migrate=False`` (then run ``sqljobs migrate``).
    ``retention`` is how long finished jobs are kept before the pruner deletes them: a
    :class:`~sqljobs.Retention` (by default done jobs 1 day, dead and cancelled jobs 7
    days, business keys 7 days past their jobs' rows), or one duration for every ended
    state (dead jobs kept at least 7 days); 0 or None keeps every job for ever.
    ``max_payload`` is the
    largest payload an enqueue accepts, in bytes of JSON: every claim reads the row, so
    bulk data belongs elsewhere, with a reference to it in the job.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        migrate: bool = True,
        retention: Retention | float | timedelta | None = DEFAULT_RETENTION,
        default_queue: str = DEFAULT_QUEUE,
        default_lease: float = DEFAULT_LEASE,
        default_retry: Retry | None = None,
        clock: Callable[[], float] = time.time,
        backend_options: Mapping[str, Any] | None = None,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
    ) -> None:
        self.url = resolve_url(url)
        parse_url(self.url)  # a malformed URL fails here, at definition time
        self.auto_migrate = migrate
        self.retention = Retention.of(retention)
        self.default_queue = check_queue_name(default_queue, "App(default_queue=...)")
        self.default_lease = seconds(default_lease, "default_lease")
        if self.default_lease <= 0:
            raise ConfigurationError(f"default_lease must be > 0 seconds, got {default_lease!r}")
        if isinstance(max_payload, bool) or not isinstance(max_payload, int) or max_payload < 1:
            raise ConfigurationError(
                f"max_payload must be a positive number of bytes, got {max_payload!r} "
                "(there is no unlimited setting: a queue row is no place for bulk data)"
            )
        self.max_payload = max_payload
        self.default_retry = default_retry or Retry()
        self.clock = clock
        self.backend_options = dict(backend_options or {})
        self.tasks: dict[str, Task] = {}
        self.queue_limits: dict[str, Limit] = {}
        """Limits on whole queues (``limit_queue``), by queue name."""
        self.periodic_schedules: dict[str, Schedule] = {}
        self._schedules_synced = False
        self._backend: Backend | None = None
        self._lock = threading.Lock()
        self._wakeups = LocalNotifier()
        """This process's workers, woken the moment one of its enqueues commits (or told
        the moment one of its cancels does)."""
        self._watcher: JobWatcher | None = None
        self.hooks = Hooks()
        """The hooks and middleware registered with :meth:`on`, :meth:`middleware` and
        :meth:`enqueue_middleware`."""

    def __repr__(self) -> str:
        try:  # show which SQLite file a relative path means from here
            file = parse_url(self.url).file
        except ConfigurationError:
            file = None
        url = redact_url(self.url)  # a repr ends up in logs and error messages
        where = url if file is None else f"{url} (file {file})"
        return f"<sqljobs.App {where} tasks={len(self.tasks)}>"

    # -- database ----------------------------------------------------------------------

    @property
    def backend(self) -> Backend:
        """The backend used for enqueueing and inspection, opened (and migrated) lazily."""
        if self._backend is None:
            with self._lock:
                if self._backend is None:
                    self._backend = self._open_backend()
        return self._backend

    def _open_backend(self, **options: Any) -> Backend:
        """A new backend instance on this app's database (workers take their own)."""
        check_sqlite_directory(self.url)
        backend = open_backend(self.url, **{"clock": self.clock, **self.backend_options, **options})
        if self.auto_migrate:
            backend.migrate()
        return backend

    def migrate(self) -> list[str]:
        """Apply pending schema migrations; return their names."""
        return self.backend.migrate()

    def close(self) -> None:
        with self._lock:
            watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.close()
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def _job_watcher(self) -> JobWatcher:
        """What wakes callers waiting on this app's jobs (one per app, made on first use)."""
        backend = self.backend
        with self._lock:
            if self._watcher is None:
                self._watcher = JobWatcher(backend)
            return self._watcher

    # -- tasks -------------------------------------------------------------------------

    # The bare decorator's overloads are TaskDecorator's (see there why in this order).
    @overload
    def task(
        self, fn: Callable[Concatenate[_Unchecked, ...], Coroutine[Any, Any, _R]], /
    ) -> Task[..., _R]: ...
    @overload
    def task(self, fn: Callable[Concatenate[_Unchecked, ...], _R], /) -> Task[..., _R]: ...
    @overload
    def task(
        self, fn: Callable[Concatenate[JobContext, _P], Coroutine[Any, Any, _R]], /
    ) -> Task[_P, _R]: ...
    @overload
    def task(self, fn: Callable[Concatenate[JobContext, _P], _R], /) -> Task[_P, _R]: ...
    @overload
    def task(self, fn: Callable[_P, Coroutine[Any, Any, _R]], /) -> Task[_P, _R]: ...
    @overload
    def task(self, fn: Callable[_P, _R], /) -> Task[_P, _R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        lease: float | timedelta | None = None,
        retry: Retry | None = None,
        priority: int = 0,
        timeout: float | timedelta | None = None,
        store_result: bool = True,
        concurrency: int | None = None,
        concurrency_key: Callable[..., Any] | None = None,
        rate: str | None = None,
        redact: Sequence[str] = (),
        key_retention: KeyRetention = "default",
    ) -> TaskDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        lease: float | timedelta | None = None,
        retry: Retry | None = None,
        priority: int = 0,
        timeout: float | timedelta | None = None,
        store_result: bool = True,
        concurrency: int | None = None,
        concurrency_key: Callable[..., Any] | None = None,
        rate: str | None = None,
        redact: Sequence[str] = (),
        key_retention: KeyRetention = "default",
    ) -> Task[..., Any] | TaskDecorator:
        """Register a task. ``lease`` (seconds) is how long a claim lasts without renewal;
        ``timeout`` how long one attempt may run before it is given up as timed out.
        The task's return value is stored with its job (it must be JSON) for
        ``handle.result()``, unless ``store_result=False``. ``concurrency=N`` lets at most
        N of its jobs run at once across every worker, per key if ``concurrency_key`` (a
        function of the job's arguments) is given; ``rate="14/s"`` (or ``/m``, ``/h``) lets
        at most 14 of them start in any second, per key likewise (see
        :mod:`sqljobs.limits`). ``redact=["card_number"]`` names parameters whose values
        the dashboard shows as ``***``. ``key_retention`` is how long a business key of its
        jobs outlives the job's row, refusing duplicates: seconds or a timedelta, None for
        ever (by default the App's ``Retention.keys``, 7 days; see docs/safe-to-repeat.md)."""
        kept = key_retention
        if not (isinstance(kept, str) and kept == "default"):
            kept = key_retention_of(kept, "@app.task(key_retention=...)")

        def register(func: Callable[..., Any]) -> Task:
            task_name = check_text(name or func.__name__, "task name")
            if task_name in self.tasks:
                raise ConfigurationError(f"a task named {task_name!r} is already registered")
            task = Task(
                self,
                func,
                name=task_name,
                queue=(
                    self.default_queue
                    if queue is None
                    else check_queue_name(queue, "@app.task(queue=...)")
                ),
                lease=self.default_lease if lease is None else seconds(lease, "lease"),
                retry=retry or self.default_retry,
                priority=priority,
                timeout=seconds(timeout, "timeout"),
                store_result=store_result,
                limit=define_limit(concurrency, concurrency_key, rate, task_name),
                redact=redact,
                key_retention=kept,
            )
            self.tasks[task_name] = task
            return task

        return register(fn) if fn is not None else cast(TaskDecorator, register)

    # -- enqueue -----------------------------------------------------------------------

    def enqueue(
        self,
        task: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        delay: float | timedelta | None = None,
        run_at: float | datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        connection: Any = None,
        key_scope: KeyScope = "retained",
        known: bool = True,
        concurrency_key: str | None = None,
        after: Iterable[JobHandle | int] | None = None,
        after_policy: AfterPolicy = "done",
        key_retention: KeyRetention = "default",
    ) -> JobHandle:
        """Enqueue by task name, e.g. from a service that does not import the task.

        A task registered here lends its queue, lease and retry policy, as does one a
        worker of this database has registered; a name neither knows is refused with
        :class:`UnknownTask` (a typo would otherwise fail in a worker hours later).
        ``known=False`` takes any name, for a task only another service registers; with
        no worker's record of it, the app's defaults apply. ``after``,
        ``after_policy`` and ``key_retention`` are as for ``Task.with_options`` (a task
        this App does not register: the pruning App's ``Retention.keys`` by default).
        """
        return enqueue.enqueue_named(
            self, task, args, kwargs, key=key, delay=delay, run_at=run_at, priority=priority,
            queue=queue, connection=connection, key_scope=key_scope, known=known,
            concurrency_key=concurrency_key, after=after, after_policy=after_policy,
            key_retention=key_retention,
        )  # fmt: skip

    def group(
        self,
        members: Iterable[Signature],
        then: Signature | None = None,
        *,
        after_policy: AfterPolicy = "done",
        connection: Any = None,
    ) -> Group:
        """Enqueue ``members`` (``task.s(...)`` signatures) and, given ``then``, a callback
        that runs once they have all ended, called with their results (a list, in the
        members' order) before its own arguments, all in one transaction (or in the
        caller's, on ``connection``). Under ``after_policy="done"`` a member that ends dead
        or cancelled cancels the callback; ``"always"`` runs it anyway, with None for that
        member's result."""
        if isinstance(members, Signature) or not isinstance(members, Iterable):
            raise ConfigurationError(
                f"group() takes a list of task signatures (task.s(...)), got {members!r}"
            )
        signatures = list(members)
        for i, sig in enumerate([*signatures, then] if then is not None else signatures):
            if not isinstance(sig, Signature):
                raise ConfigurationError(
                    f"group() takes task signatures (task.s(...)), got {sig!r} at {i}"
                )
        if not signatures:
            raise ConfigurationError("group() needs at least one member signature")
        now = self.clock()
        jobs = [sig.new_job(now) for sig in signatures]
        callback = None
        if then is not None:
            callback = replace(
                then.new_job(now, collect=True), after_policy=check_policy(after_policy)
            )

        def store(rows: Iterable[NewJob]) -> list[JobHandle]:
            given = list(rows)  # as built, or carrying the enqueue middleware's headers
            members, then_job = given[: len(jobs)], given[len(jobs)] if callback else None
            got, last = self.backend.enqueue_group(members, then_job, connection)
            return [JobHandle(r.id, r.created, self) for r in [*got, *([last] if last else [])]]

        everything = [*jobs, *([callback] if callback is not None else [])]
        if self.hooks.around_enqueue:
            made = around_enqueue(self.hooks, everything, connection is not None, store)
        else:
            made = store(everything)
        if connection is None:
            self._wakeups.announce()
        handles = made[: len(jobs)]
        then_handle = made[len(jobs)] if callback is not None else None
        log.info("group of %d enqueued%s", len(handles),
                 "" if then_handle is None else f", then job {then_handle.id}")  # fmt: skip
        return Group(handles, then_handle)

    # -- for asyncio callers (nothing here blocks the event loop) ----------------------

    async def enqueue_async(self, task: str, *args: Any, **kwargs: Any) -> JobHandle:
        """:meth:`enqueue`, awaitable; ``connection=`` may be a psycopg AsyncConnection,
        whose transaction the job joins."""
        return await enqueue.enqueue_named_async(self, task, *args, **kwargs)

    async def stats_async(self) -> Stats:
        return await asyncio.to_thread(self.stats)

    async def queues_async(self) -> list[QueueInfo]:
        return await asyncio.to_thread(self.queues)

    async def get_job_async(self, job_id: int) -> Job | None:
        return await asyncio.to_thread(self.get_job, job_id)

    async def cancel_async(self, job_id: int) -> bool:
        return await asyncio.to_thread(self.cancel, job_id)

    async def find_jobs_async(
        self, filter: JobFilter | None = None, *, before: int | None = None, limit: int = 50
    ) -> JobPage:
        return await asyncio.to_thread(self.find_jobs, filter, before=before, limit=limit)

    async def count_jobs_async(
        self, filter: JobFilter | None = None, *, cap: int = 10_000
    ) -> JobCount:
        return await asyncio.to_thread(self.count_jobs, filter, cap=cap)

    async def run_worker_async(
        self, concurrency: int = 8, queues: str | Sequence[str] | None = None, **options: Any
    ) -> None:
        """Run a worker inside a running event loop until the awaiting task is cancelled,
        then drain it as SIGTERM would and re-raise. It installs no signal handlers (they
        are the application's): for a service that serves and works in one process."""
        from .worker import WorkerConfig
        from .worker.embedded import run_worker_async

        config = WorkerConfig(
            concurrency=concurrency,
            queues=check_queues(queues, "run_worker_async(queues=...)"),
            install_signal_handlers=False,
            **options,
        )
        await run_worker_async(self, config)

    # -- hooks, middleware and tracing -------------------------------------------------

    @overload
    def on(self, event: EventName, fn: None = None, /) -> Callable[[H], H]: ...

    @overload
    def on(self, event: EventName, fn: H, /) -> H: ...

    def on(self, event: EventName, fn: H | None = None, /) -> H | Callable[[H], H]:
        """Register a hook: ``@app.on("job_failed")`` above a function of one argument
        (a :class:`~sqljobs.hooks.JobEvent`, or for ``worker_started`` and
        ``worker_stopped`` a :class:`~sqljobs.hooks.WorkerLifecycle`), or
        ``app.on("job_failed", fn)``. An unknown event is a ConfigurationError naming the
        known ones. What a hook raises is logged and ignored. See docs/hooks.md for when
        each event is told and on which thread."""
        if fn is not None:
            self.hooks.add_hook(event, fn)
            return fn

        def register(func: H) -> H:
            self.hooks.add_hook(event, func)
            return func

        self.hooks.check_event(event)  # a typo fails at the decorator, not at its use
        return register

    def middleware(self, fn: Middleware) -> Middleware:
        """Wrap every attempt in this app's workers with ``fn``, a generator function
        given an :class:`~sqljobs.hooks.AttemptInfo` that yields once: its code before
        the ``yield`` runs as the attempt begins, after it as the attempt ends (the
        ``yield`` gives the handler's return value, or raises what the handler raised).
        The first registered is outermost. Re-raise to let the attempt fail; catching the
        exception without raising makes the attempt succeed (its result None)."""
        self.hooks.add_middleware(fn)
        return fn

    def enqueue_middleware(self, fn: Middleware) -> Middleware:
        """Wrap every enqueue of this app with ``fn``, a generator function given an
        :class:`~sqljobs.hooks.EnqueueInfo` that yields once (the ``yield`` gives the
        list of handles). Headers it puts in ``info.headers`` before yielding are carried
        by every job of the enqueue, to attempt middleware."""
        self.hooks.add_middleware(fn, enqueue=True)
        return fn

    def enable_tracing(
        self, tracer_provider: Any = None, *, child_of_enqueue: bool = False
    ) -> None:
        """Trace enqueues and attempts with OpenTelemetry (``pip install sqljobs[otel]``):
        see :func:`sqljobs.tracing.enable_tracing`."""
        from .tracing import enable_tracing

        enable_tracing(self, tracer_provider, child_of_enqueue=child_of_enqueue)

    # -- inspection, browsing and admin (sqljobs.admin) --------------------------------

    def stats(self) -> Stats:
        """Counts by queue and state, and the age of the oldest due pending job. Every
        queue a task of this app uses is counted, with zeros while it has no jobs (as
        :meth:`queues` lists it), so ``counts["default"]["pending"]`` never raises."""
        return with_queues(self.backend.stats(), {t.queue for t in self.tasks.values()})

    def throughput(self, minutes: int = 60, queue: str | None = None) -> list[MinuteCounts]:
        """Attempts that ended done, failed and cancelled in each of the last ``minutes``
        minutes (the current one last), of one queue or all: one entry per minute, empty
        minutes included, oldest first. Workers add their counts at each heartbeat, so the
        newest minute may lag by one heartbeat (see :mod:`sqljobs.rollup`)."""
        return admin.throughput(self, minutes, queue)

    def metric_totals(self) -> list[MetricAmount]:
        """Every counted amount since the database began (by queue, task, outcome, series
        and bucket): what the Prometheus counters and histograms show."""
        return self.backend.metric_totals()

    def metric_label_sets(self) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
        """The ``(queue, task)`` pairs the metrics show before anything is counted: every
        task this app registers or workers have written to the catalogue, and those that
        schedules enqueue (this app's periodic tasks, and the schedules table's)."""
        return admin.metric_label_sets(self)

    def get_job(self, job_id: int) -> Job | None:
        """The job with this id, or None."""
        return admin.get_job(self, job_id)

    def list_jobs(
        self, state: str | None = None, queue: str | None = None, limit: int = 50
    ) -> list[Job]:
        """The newest ``limit`` jobs, of one state and queue or all. A state or queue that
        cannot be is refused, as :class:`JobFilter` refuses it."""
        return admin.list_jobs(self, state, queue, limit)

    def find_jobs(
        self, filter: JobFilter | None = None, *, before: int | None = None, limit: int = 50
    ) -> JobPage:
        """A page of the jobs matching ``filter``, newest first: pass the page's
        ``next_before`` as ``before`` for the next one (keyset paging, as cheap on page
        500 as on page 1). ``limit`` is 1 to 1000."""
        return admin.find_jobs(self, filter, before=before, limit=limit)

    def count_jobs(self, filter: JobFilter | None = None, *, cap: int = 10_000) -> JobCount:
        """How many jobs match ``filter``, counted up to ``cap``; ``capped`` says the true
        number may be larger. By state and queue alone it is the stats' count; with other
        fields, the newest :data:`~sqljobs.jobs.COUNT_SCAN` jobs are counted (a count
        over every job of a large table would read them all), and a count that did not
        reach the oldest job is capped too."""
        return admin.count_jobs(self, filter, cap=cap)

    def waiting_reason(self, job: Job) -> str | None:
        """Why a pending job is not running yet, if it is not simply next in line: no
        live worker has its task, or none that has it serves its queue, or its time has
        not come, or its queue is paused, or its limit is reached; or which parents a
        waiting job waits for."""
        return admin.waiting_reason(self, job)

    def workers(self) -> list[WorkerStatus]:
        """Every live worker (seen within its heartbeat) and the jobs it is running."""
        return self.backend.worker_statuses()

    def job_children(self, job_id: int, limit: int = 100) -> list[int]:
        """The ids of the jobs enqueued ``after`` this one (up to ``limit``, 1 to 1000),
        oldest first."""
        return admin.job_children(self, job_id, limit)

    def job(self, job_id: int) -> JobHandle:
        """A handle for any job id: ``refresh()``, ``result()``, ``cancel()``."""
        return JobHandle(check_job_id(job_id), False, self)

    @overload
    def cancel(self, which: int, /) -> bool: ...
    @overload
    def cancel(self, which: JobFilter, /) -> int: ...
    @overload
    def cancel(
        self, /, *, queue: str | None = None, task: str | None = None, state: str | None = None
    ) -> int: ...

    def cancel(
        self,
        which: int | JobFilter | None = None,
        /,
        *,
        queue: str | None = None,
        task: str | None = None,
        state: str | None = None,
    ) -> bool | int:
        """Cancel one job, or every job that matches.

        ``app.cancel(job_id)``: a pending or waiting job ends at once; a running one
        too, and its worker is told to stop (``ctx.cancelled``; an async task is
        cancelled) within a heartbeat, at once where the notifier pushes. The handler's
        outcome is discarded whatever it does; no attempt is charged. True if this call
        cancelled it; False if it had already ended (cancelling twice is harmless).
        Raises ``JobNotFound`` for an id that names no job.

        ``app.cancel(JobFilter(...))``, or ``app.cancel(queue=..., task=..., state=...)``
        (at least one; ``state`` one of pending, waiting, running): every pending,
        waiting or running job that matches, as one is cancelled, in bounded batches;
        returns how many. The aliases :meth:`cancel_job`, :meth:`cancel_jobs` and
        :meth:`cancel_many` are these three forms under their earlier names."""
        return admin.cancel(self, which, queue=queue, task=task, state=state)

    def cancel_job(self, job_id: int) -> bool:
        """``cancel(job_id)``, but False (not an error) for a job that does not exist."""
        return admin.cancel_job(self, job_id)

    def cancel_jobs(self, filter: JobFilter) -> int:
        """``cancel(filter)``: every pending, waiting or running job matching ``filter``."""
        return admin.cancel_matching(self, filter)

    def cancel_many(
        self, queue: str | None = None, task: str | None = None, state: str | None = None
    ) -> int:
        """``cancel(queue=..., task=..., state=...)``: every pending, waiting or running
        job matching all the filters given (at least one); returns how many."""
        return admin.cancel(self, queue=queue, task=task, state=state, where="cancel_many")

    def retry_job(self, job_id: int) -> bool:
        """Send a dead or cancelled job back to pending with fresh attempts. A job enqueued
        ``after`` others is refused while one of them is not done: it would run before
        them (retry those first)."""
        return admin.retry_job(self, job_id)

    def retry_jobs(self, filter: JobFilter) -> int:
        """Send every dead or cancelled job matching ``filter`` back to pending with fresh
        attempts, in batches; return how many. A cancelled job that runs after others is
        left alone while one of them is not done (:meth:`retry_job` says why)."""
        return admin.retry_jobs(self, filter)

    def retry_dead(self, queue: str | None = None) -> int:
        """Send every dead job (of ``queue``, or all) back to pending; return how many."""
        return admin.retry_jobs(self, JobFilter(state=JobState.DEAD.value, queue=queue))

    def delete_job(self, job_id: int) -> bool:
        """Delete one ended job; False if there is no such job. A job that has not ended
        is refused with ConfigurationError (cancel it first)."""
        return admin.delete_job(self, job_id)

    def delete_jobs(self, filter: JobFilter) -> int:
        """Delete every ended (done, dead or cancelled) job matching ``filter``, in
        batches; return how many. Jobs that have not ended are left alone: cancel them
        first."""
        return admin.delete_jobs(self, filter)

    # -- queues ------------------------------------------------------------------------

    def limit_queue(
        self, name: str, *, concurrency: int | None = None, rate: str | None = None
    ) -> None:
        """Let at most ``concurrency`` jobs of queue ``name`` run at once, and at most
        ``rate`` (``"14/s"``, ``/m``, ``/h``) start, across every worker on every host. It
        counts the queue's jobs whose task has no limit of its own (a job counts against
        one limit: its task's, else its queue's), enqueued after this call: define it where
        the tasks are defined, so producers and workers share it. Workers record it in
        the catalogue, where an enqueue by name from a service without it finds it."""
        check_queue_name(name, "limit_queue")
        self.queue_limits[name] = define_queue_limit(name, concurrency, rate)

    def pause_queue(self, name: str) -> bool:
        """Stop every worker, on every host, from claiming jobs of queue ``name``; jobs
        already running finish, enqueues and schedules still add to it. True if this
        call paused it (False: it was paused already)."""
        return admin.pause_queue(self, name)

    def resume_queue(self, name: str) -> bool:
        """Let workers claim from queue ``name`` again (woken at once); True if it was
        paused."""
        return admin.resume_queue(self, name)

    def paused_queues(self) -> dict[str, float | None]:
        """Each paused queue and when it was paused (Unix seconds; None if not known)."""
        return admin.paused_queues(self)

    def queues(self) -> list[QueueInfo]:
        """Every queue that has jobs, tasks of this app, or a pause: (name, paused,
        counts by state, age of the oldest due pending job in seconds or None), by name."""
        return admin.queues(self)

    # -- periodic schedules ------------------------------------------------------------

    def periodic(
        self,
        expression: str | None = None,
        /,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        tz: str = "UTC",
        overlap: str = "allow",
        misfire: str = "catch_up_once",
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        queue: str | None = None,
        priority: int = 0,
        retry: Retry | None = None,
        lease: float | timedelta | None = None,
        timeout: float | timedelta | None = None,
    ) -> TaskDecorator:
        """Register a task and run it on a schedule: a cron expression in ``tz``
        (``@app.periodic("0 3 * * *", tz="Europe/Berlin")``) or a fixed interval
        (``@app.periodic(every=0.2)``, seconds or a timedelta), with ``kwargs`` for the task.

        ``overlap="skip"`` starts no run while one is pending or running. ``misfire`` says
        what becomes of ticks missed while no worker ran: ``"catch_up_once"`` runs once
        for all of them, ``"skip"`` drops them. Every worker runs the scheduler and each
        tick gives one job however many run; workers write these definitions to the
        database when they start. A mistake in the definition fails here.
        """
        if expression is not None and cron is not None:
            raise ConfigurationError(
                "@app.periodic: give the cron expression once, positionally or as cron="
            )
        cron = expression if expression is not None else cron
        where = "@app.periodic" if name is None else f"@app.periodic(name={name!r})"
        check_timing(cron, every, tz, where)
        check_policies(overlap, misfire, where)
        if queue is not None:
            check_queue_name(queue, "@app.periodic(queue=...)")

        def register(fn: Callable[..., Any]) -> Task:
            task_name = name or fn.__name__
            if task_name in self.periodic_schedules:
                raise ConfigurationError(f"a schedule named {task_name!r} is already defined")
            task = self.task(
                name=task_name,
                queue=queue,
                lease=lease,
                retry=retry,
                priority=priority,
                timeout=timeout,
            )(fn)
            try:
                schedule = define_schedule(
                    task.name,
                    task=task,
                    kwargs=kwargs,
                    cron=cron,
                    every=every,
                    tz=tz,
                    overlap=overlap,
                    misfire=misfire,
                    queue=task.queue,
                    priority=task.priority,
                    source="code",
                )
                check_arguments(task, schedule)
                payload.encode(task.name, (), schedule.kwargs, limit=self.max_payload)
            except SqljobsError:
                del self.tasks[task.name]
                raise
            self.periodic_schedules[task.name] = schedule
            self._schedules_synced = False
            return task

        return cast(TaskDecorator, register)

    def schedule(
        self,
        name: str,
        *,
        task: str | Task,
        cron: str | None = None,
        every: float | timedelta | None = None,
        kwargs: Mapping[str, Any] | None = None,
        tz: str = "UTC",
        overlap: str = "allow",
        misfire: str = "catch_up_once",
        queue: str | None = None,
        priority: int | None = None,
        known: bool = True,
    ) -> ScheduleState:
        """Create or update a schedule stored in the database, e.g. one per tenant:
        ``app.schedule("daily-report:acme", cron="0 3 * * *", task="send_report",
        kwargs={"tenant": "acme"})``. Options as for :meth:`periodic`. Updating keeps the
        schedule's next run (and its paused flag) unless the timing changed. A task name
        that neither this App nor a worker has registered is refused unless ``known=False``
        (see :meth:`enqueue`)."""
        if name in self.periodic_schedules:
            raise ConfigurationError(
                f"schedule {name!r} is defined in code with @app.periodic; change it there"
            )
        if queue is not None:
            check_queue_name(queue, "app.schedule(queue=...)")
        registered = self.tasks.get(task if isinstance(task, str) else task.name)
        info: Task | TaskInfo | None = registered
        if registered is None and isinstance(task, str) and task:
            info = enqueue.task_info(self, task, known)
        schedule = define_schedule(
            name,
            task=task,
            kwargs=kwargs,
            cron=cron,
            every=every,
            tz=tz,
            overlap=overlap,
            misfire=misfire,
            queue=queue or (info.queue if info else self.default_queue),
            priority=(info.priority if info else 0) if priority is None else priority,
        )
        if registered is not None:
            check_arguments(registered, schedule)
        payload.encode(schedule.task, (), schedule.kwargs, limit=self.max_payload)
        return self.backend.save_schedule(schedule, schedule.first_after(self.clock()))

    def unschedule(self, name: str) -> bool:
        """Delete a stored schedule; False if there was none. (One defined with
        ``@app.periodic`` comes back when a worker starts: remove it from the code.)"""
        return self.backend.delete_schedule(check_text(name, "schedule name"))

    def sync_schedules(self) -> None:
        """Write this app's ``@app.periodic`` definitions to the database now (workers do
        it when they start; listing and the other schedule methods do it on first use)."""
        from .maintenance.scheduler import Scheduler

        Scheduler(self, self.backend).sync()
        self._schedules_synced = True

    def _synced_backend(self) -> Backend:
        if not self._schedules_synced:
            self.sync_schedules()
        return self.backend

    def list_schedules(self) -> list[ScheduleState]:
        """Every stored schedule, by name."""
        return self._synced_backend().list_schedules()

    def get_schedule(self, name: str) -> ScheduleState | None:
        return self._synced_backend().get_schedule(check_text(name, "schedule name"))

    def pause_schedule(self, name: str) -> bool:
        """Stop a schedule from firing until resumed; False if there is no such schedule."""
        return self._synced_backend().pause_schedule(check_text(name, "schedule name"))

    def resume_schedule(self, name: str) -> bool:
        """Let a paused schedule fire again, from its next tick after now (ticks that fell
        while it was paused are not caught up); False if there is no such schedule."""
        state = self.get_schedule(name)
        if state is None:
            return False
        return self.backend.resume_schedule(name, state.schedule.first_after(self.clock()))

    def run_schedule_now(self, name: str) -> JobHandle:
        """Enqueue one run of a schedule now, outside its timing. With ``overlap="skip"``
        and a run pending or running, that run's handle comes back (``created`` False)."""
        state = self.get_schedule(name)
        if state is None:
            raise ScheduleNotFound(f"no schedule named {name!r}")
        now = self.clock()
        job = schedule_job(self, state.schedule, tick_key(name + ":now", now), now)
        result = self.backend.run_schedule_now(name, job)
        if result is None or result.job_id is None:
            raise ScheduleNotFound(f"no schedule named {name!r}")
        if result.created:
            self._wakeups.announce()
        return JobHandle(result.job_id, result.created, self)

    # -- workers -----------------------------------------------------------------------

    def run_worker(
        self,
        concurrency: int = 8,
        queues: str | Sequence[str] | None = None,
        *,
        processes: int = 1,
        drain_timeout: float | None = None,
        **options: Any,
    ) -> None:
        """Run a worker until SIGTERM/SIGINT (graceful) or a second signal (at once).

        ``queues`` is one queue name or a list of them (default: every queue).
        ``processes`` > 1 forks that many worker processes under a supervisor that
        restarts a crashed one and hands its jobs back at once.
        """
        from .worker import Worker, WorkerConfig

        if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
            raise ConfigurationError(f"processes must be an int >= 1, got {processes!r}")
        config = WorkerConfig(
            concurrency=concurrency,
            queues=check_queues(queues, "run_worker(queues=...)"),
            drain_timeout=drain_timeout,
            **options,
        )
        if processes > 1:
            from .worker.supervisor import run_supervised  # (not in a worker's start-up)

            run_supervised(self, config, processes)
        else:
            Worker(self, config).run()

    def run_until_empty(
        self,
        *,
        clock: Clock | None = None,
        until: float | datetime | None = None,
        max_jobs: int = 1000,
        timeout: float = 10.0,
        queues: Sequence[str] | None = None,
        concurrency: int = 1,
    ) -> DrainReport:
        """Run this app's due jobs in this process through a real worker until none is
        left, moving a :class:`sqljobs.testing.Clock` (``clock``, or the App's) to jobs due
        later; returns a :class:`sqljobs.testing.DrainReport`. For tests: see
        :func:`sqljobs.testing.run_until_empty`."""
        from .testing import run_until_empty

        return run_until_empty(
            self, clock=clock, until=until, max_jobs=max_jobs, timeout=timeout,
            queues=queues, concurrency=concurrency,
        )  # fmt: skip
