"""App: configuration, the task registry, and the entry to everything else.

Each operation hands over to the module that holds it: :mod:`sqljobs.tasks` registers
tasks and enqueues groups, :mod:`sqljobs.enqueue` builds and stores jobs,
:mod:`sqljobs.admin` finds, counts and acts on them, :mod:`sqljobs.periodic` registers
and runs schedules, :mod:`sqljobs.worker.run` runs workers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Concatenate, overload

from . import admin, enqueue, hooks, tracing, workflow_ops
from . import periodic as stored  # in the class body, "periodic" is App.periodic
from .backends import Backend, open_backend
from .context import JobContext
from .dependencies import AfterPolicy
from .errors import ConfigurationError
from .handles import JobHandle
from .hooks import Hooks
from .humanize import redact_url
from .jobs import KeyScope
from .limits import Limit, define_queue_limit
from .notifiers import LocalNotifier
from .retention import DEFAULT_RETENTION, KeyRetention, Retention
from .retry import Retry
from .schedules import Schedule
from .stats import Stats, with_queues
from .tasks import _P, _R, Task, TaskDecorator, _Unchecked, define_task, enqueue_group
from .testing.drain import run_until_empty
from .url import check_sqlite_directory, parse_url, resolve_url
from .validate import check_job_id, check_queue_name, check_seconds, is_whole
from .waiting import JobWatcher
from .worker.run import run_worker, run_worker_async

if TYPE_CHECKING:
    from .testing import Clock, DrainReport

DEFAULT_QUEUE = "default"
DEFAULT_LEASE = 30.0
DEFAULT_MAX_PAYLOAD = 1024 * 1024


class App:
    """A queue on one database: ``App("sqlite:///jobs.db")`` or ``App("postgresql://...")``.

    With no URL, ``SQLJOBS_URL`` is used, else ``sqlite:///sqljobs.db``. The schema is
    migrated on first use unless ``migrate=False`` (then run ``sqljobs migrate``).
    ``retention`` is how long finished jobs are kept before the pruner deletes them: a
    :class:`~sqljobs.Retention` (by default done jobs 1 day, dead and cancelled jobs 7
    days, business keys 7 days past their jobs' rows), or one duration for every ended
    state (dead jobs kept at least 7 days); 0 or None keeps every job for ever.
    ``max_payload`` is the largest payload an enqueue accepts, in bytes of JSON: every
    claim reads the row, so bulk data belongs elsewhere, with a reference to it in the job.
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
        self.default_lease = check_seconds(default_lease, "default_lease")
        if not is_whole(max_payload, 1):
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

    def _job_watcher(self) -> JobWatcher:
        """What wakes callers waiting on this app's jobs (one per app, made on first use)."""
        backend = self.backend
        with self._lock:
            if self._watcher is None:
                self._watcher = JobWatcher(backend)
            return self._watcher

    def migrate(self) -> list[str]:
        """Apply pending schema migrations; return their names."""
        return self.backend.migrate()

    def close(self) -> None:
        """Close this app's connections (using it again opens them again)."""
        with self._lock:
            watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.close()
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    # -- tasks and schedules in code ---------------------------------------------------

    # The bare decorator's overloads are TaskDecorator's (see there why in this order).
    # fmt: off
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
        self, fn: None = None, /, *, name: str | None = None, queue: str | None = None,
        lease: float | timedelta | None = None, retry: Retry | None = None, priority: int = 0,
        timeout: float | timedelta | None = None, store_result: bool = True,
        concurrency: int | None = None, concurrency_key: Callable[..., Any] | None = None,
        rate: str | None = None, redact: Sequence[str] = (),
        key_retention: KeyRetention = "default", hard_timeout: float | timedelta | None = None,
    ) -> TaskDecorator: ...

    def task(
        self, fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
        queue: str | None = None, lease: float | timedelta | None = None,
        retry: Retry | None = None, priority: int = 0, timeout: float | timedelta | None = None,
        store_result: bool = True, concurrency: int | None = None,
        concurrency_key: Callable[..., Any] | None = None, rate: str | None = None,
        redact: Sequence[str] = (), key_retention: KeyRetention = "default",
        hard_timeout: float | timedelta | None = None,
    ) -> Task[..., Any] | TaskDecorator:
        """Register a task. ``lease`` (seconds) is how long a claim lasts without renewal;
        ``timeout`` how long one attempt may run before it is given up as timed out;
        ``hard_timeout`` (longer) when, under ``--processes``, the process running it is
        killed and replaced, which stops even a handler stuck in a blocking call.
        The task's return value is stored with its job (it must be JSON) for
        ``handle.result()``, unless ``store_result=False``. ``concurrency=N`` lets at most
        N of its jobs run at once across every worker, per key if ``concurrency_key`` (a
        function of the job's arguments) is given; ``rate="14/s"`` (or ``/m``, ``/h``) lets
        at most 14 of them start in any second, per key likewise (see
        :mod:`sqljobs.limits`). ``redact=["card_number"]`` names parameters whose values
        the dashboard shows as ``***``. ``key_retention`` is how long a business key of its
        jobs outlives the job's row, refusing duplicates: seconds or a timedelta, None for
        ever (by default the App's ``Retention.keys``, 7 days; see docs/safe-to-repeat.md)."""
        return define_task(
            self, fn, name=name, queue=queue, lease=lease, retry=retry, priority=priority,
            timeout=timeout, store_result=store_result, concurrency=concurrency,
            concurrency_key=concurrency_key, rate=rate, redact=redact, key_retention=key_retention,
            hard_timeout=hard_timeout,
        )

    def periodic(
        self, expression: str | None = None, /, *, cron: str | None = None,
        every: float | timedelta | None = None, tz: str = "UTC", overlap: str = "allow",
        misfire: str = "catch_up_once", kwargs: Mapping[str, Any] | None = None,
        name: str | None = None, queue: str | None = None, priority: int = 0,
        retry: Retry | None = None, lease: float | timedelta | None = None,
        timeout: float | timedelta | None = None, hard_timeout: float | timedelta | None = None,
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
        return stored.define_periodic(
            self, expression, cron=cron, every=every, tz=tz, overlap=overlap, misfire=misfire,
            kwargs=kwargs, name=name, queue=queue, priority=priority, retry=retry, lease=lease,
            timeout=timeout, hard_timeout=hard_timeout,
        )

    # -- durable workflows (sqljobs.workflow_ops; the runtime is sqljobs.workflows) ----

    workflow = workflow_ops.define_workflow
    emit = workflow_ops.emit
    workflow_history = workflow_ops.workflow_history
    workflows = workflow_ops.list_workflows

    # -- enqueue (sqljobs.enqueue) -----------------------------------------------------

    def enqueue(
        self, task: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, *,
        key: str | None = None, delay: float | timedelta | None = None,
        run_at: float | datetime | None = None, priority: int | None = None,
        queue: str | None = None, connection: Any = None, key_scope: KeyScope = "retained",
        known: bool = True, concurrency_key: str | None = None,
        after: Iterable[JobHandle | int] | None = None, after_policy: AfterPolicy = "done",
        key_retention: KeyRetention = "default", debounce: float | timedelta | None = None,
    ) -> JobHandle:
        """Enqueue by task name, e.g. from a service that does not import the task.

        A task registered here lends its queue, lease and retry policy, as does one a
        worker of this database has registered; a name neither knows is refused with
        :class:`UnknownTask` (a typo would otherwise fail in a worker hours later).
        ``known=False`` takes any name, for a task only another service registers; with
        no worker's record of it, the app's defaults apply. The other options are as for
        ``Task.with_options`` (``key_retention`` of a task this App does not register:
        the pruning App's ``Retention.keys`` by default).
        """
        return enqueue.enqueue_named(
            self, task, args, kwargs, key=key, delay=delay, run_at=run_at, priority=priority,
            queue=queue, connection=connection, key_scope=key_scope, known=known,
            concurrency_key=concurrency_key, after=after, after_policy=after_policy,
            key_retention=key_retention, debounce=debounce,
        )
    # fmt: on

    group = enqueue_group

    async def enqueue_async(self, task: str, *args: Any, **kwargs: Any) -> JobHandle:
        """:meth:`enqueue`, awaitable; ``connection=`` may be a psycopg AsyncConnection,
        whose transaction the job joins."""
        return await enqueue.enqueue_named_async(self, task, *args, **kwargs)

    # -- hooks, middleware and tracing: the functions of sqljobs.hooks and .tracing ----

    on = hooks.on
    middleware = hooks.middleware
    enqueue_middleware = hooks.enqueue_middleware
    enable_tracing = tracing.enable_tracing

    # -- inspection and admin: the functions of sqljobs.admin, as methods ---------------

    def stats(self) -> Stats:
        """Counts by queue and state, and the age of the oldest due pending job. Every
        queue a task of this app uses is counted, with zeros while it has no jobs (as
        :meth:`queues` lists it), so ``counts["default"]["pending"]`` never raises."""
        return with_queues(self.backend.stats(), {t.queue for t in self.tasks.values()})

    def job(self, job_id: int) -> JobHandle:
        """A handle for any job id: ``refresh()``, ``result()``, ``cancel()``."""
        return JobHandle(check_job_id(job_id), False, self)

    get_job = admin.get_job
    list_jobs = admin.list_jobs
    find_jobs = admin.find_jobs
    count_jobs = admin.count_jobs
    waiting_reason = admin.waiting_reason
    job_children = admin.job_children
    workers = admin.workers
    throughput = admin.throughput
    metric_totals = admin.metric_totals
    metric_label_sets = admin.metric_label_sets
    cancel = admin.cancel
    cancel_job = admin.cancel_job
    cancel_jobs = admin.cancel_jobs
    cancel_many = admin.cancel_many
    retry_job = admin.retry_job
    retry_jobs = admin.retry_jobs
    retry_dead = admin.retry_dead
    delete_job = admin.delete_job
    delete_jobs = admin.delete_jobs
    pause_queue = admin.pause_queue
    resume_queue = admin.resume_queue
    paused_queues = admin.paused_queues
    queues = admin.queues
    stats_async = admin.stats_async
    queues_async = admin.queues_async
    get_job_async = admin.get_job_async
    cancel_async = admin.cancel_async
    find_jobs_async = admin.find_jobs_async
    count_jobs_async = admin.count_jobs_async

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

    # -- stored schedules: the functions of sqljobs.periodic, as methods ---------------

    schedule = stored.schedule
    unschedule = stored.unschedule
    sync_schedules = stored.sync_schedules
    list_schedules = stored.list_schedules
    get_schedule = stored.get_schedule
    pause_schedule = stored.pause_schedule
    resume_schedule = stored.resume_schedule
    run_schedule_now = stored.run_schedule_now

    # -- workers (sqljobs.worker.run) --------------------------------------------------

    def run_worker(
        self,
        concurrency: int = 8,
        queues: str | Sequence[str] | None = None,
        *,
        processes: int = 1,
        drain_timeout: float | None = None,
        max_tasks_per_process: int | None = None,
        max_memory_per_process: int | str | None = None,
        **options: Any,
    ) -> None:
        """Run a worker until SIGTERM/SIGINT (graceful) or a second signal (at once).

        ``queues`` is one queue name or a list of them (default: every queue).
        ``processes`` > 1 forks that many worker processes under a supervisor that
        restarts a crashed one and hands its jobs back at once. Under it,
        ``max_tasks_per_process`` and ``max_memory_per_process`` (bytes, or ``"512MB"``)
        recycle a process once it ran that many jobs or grew past that: it stops claiming,
        drains and is replaced, with no job lost or charged.
        """
        run_worker(self, concurrency, queues, processes=processes, drain_timeout=drain_timeout,
                   max_tasks_per_process=max_tasks_per_process,
                   max_memory_per_process=max_memory_per_process, **options)  # fmt: skip

    async def run_worker_async(
        self, concurrency: int = 8, queues: str | Sequence[str] | None = None, **options: Any
    ) -> None:
        """Run a worker inside a running event loop until the awaiting task is cancelled,
        then drain it as SIGTERM would and re-raise. It installs no signal handlers (they
        are the application's): for a service that serves and works in one process."""
        await run_worker_async(self, concurrency, queues, **options)

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
        return run_until_empty(
            self, clock=clock, until=until, max_jobs=max_jobs, timeout=timeout,
            queues=queues, concurrency=concurrency,
        )  # fmt: skip
