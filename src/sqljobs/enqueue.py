"""Building and storing jobs: an enqueue's options checked, the task's defaults filled in
(queue, lease, retry, limit key), the payload encoded, the rows stored, and this
process's workers woken.

The same path serves asyncio callers without blocking the event loop. sqljobs' core is
synchronous (the standard library's sqlite3 and psycopg's sync pool), so an awaitable
enqueue runs its synchronous twin in a worker thread (``asyncio.to_thread``, which carries
the caller's context variables along: a current trace span, say). The one exception is an
enqueue inside the caller's transaction on a ``psycopg.AsyncConnection``: that runs on the
caller's connection, awaited, so the job commits or rolls back with the caller's own rows.
SQLite has no async connection in the standard library: to enqueue in a SQLite
transaction from async code, run the synchronous enqueue with its ``sqlite3`` connection
in a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from . import payload
from .dependencies import AfterPolicy, check_policy, parent_ids
from .errors import ConfigurationError, PayloadError, UnknownTask
from .handles import JobHandle
from .hooks import around_enqueue, around_enqueue_async
from .jobs import EnqueueOptions, KeyScope, NewJob, TaskInfo
from .limits import QUEUE_KEY, Limit, arguments_by_name
from .retention import KeyRetention, check_key_retention, key_hold
from .validate import check_due, check_priority, check_queue_name, check_text, seconds, to_epoch

log = logging.getLogger("sqljobs")

if TYPE_CHECKING:
    from .app import App
    from .schedules import Schedule
    from .tasks import Task


def enqueue_options(
    *,
    key: str | None = None,
    delay: float | timedelta | None = None,
    run_at: float | datetime | None = None,
    priority: int | None = None,
    queue: str | None = None,
    connection: Any = None,
    key_scope: KeyScope = "retained",
    concurrency_key: str | None = None,
    after: Iterable[JobHandle | int] | None = None,
    after_policy: AfterPolicy = "done",
    key_retention: KeyRetention = "default",
    debounce: float | timedelta | None = None,
    where: str = "with_options",
) -> EnqueueOptions:
    """The options of one enqueue, checked (``where`` names the call in errors)."""
    if delay is not None and run_at is not None:
        raise ConfigurationError("give either delay or run_at, not both")
    if debounce is not None:
        _check_debounce(key, delay, run_at, after, where)
    return EnqueueOptions(
        key=key,
        delay=seconds(delay, "delay"),
        run_at=to_epoch(run_at, "run_at"),
        priority=priority,
        queue=None if queue is None else check_queue_name(queue, f"{where}(queue=...)"),
        connection=connection,
        key_hold=key_hold(key_scope),
        concurrency_key=concurrency_key,
        after=parent_ids(after),
        after_policy=check_policy(after_policy),
        key_retention=check_key_retention(key_retention, key_scope, f"{where}(key_retention=...)"),
        debounce=seconds(debounce, f"{where}(debounce=...)"),
    )


def _check_debounce(
    key: str | None,
    delay: object,
    run_at: object,
    after: Iterable[JobHandle | int] | None,
    where: str,
) -> None:
    """Refuse a debounce that has nothing to group by, or a start of its own."""
    if key is None:
        raise ConfigurationError(
            f"{where}(debounce=...) needs a key: the enqueues that share a key are the ones "
            f"debounced together (e.g. {where}(key='reindex:42', debounce=30))"
        )
    if delay is not None or run_at is not None:
        raise ConfigurationError(
            f"{where}(debounce=...) sets the start itself (that many seconds after the "
            "latest enqueue): leave out delay and run_at"
        )
    if after:
        raise ConfigurationError(
            f"{where}(debounce=...) cannot be combined with after=: a debounced job starts "
            "when its enqueues settle, not when other jobs end"
        )


def unknown_task(name: str, registered: Iterable[str]) -> UnknownTask:
    """The error for a task name nobody registered, with the close matches (typos)."""
    known = list(dict.fromkeys(registered))  # a task both here and in the catalogue once
    matches = tuple(difflib.get_close_matches(name, known, n=3))
    hint = f" (did you mean {' or '.join(map(repr, matches))}?)" if matches else ""
    return UnknownTask(
        f"unknown task {name!r}{hint}: neither this App nor a worker of its database has "
        "registered it; to enqueue a task that only another service registers, pass "
        "known=False (CLI: sqljobs enqueue --remote)",
        name,
        matches,
    )


def catalogued_task(app: App, name: str) -> TaskInfo | None:
    """The task ``name`` as a worker of ``app``'s database registered it (the catalogue
    every worker writes when it starts), or None."""
    return app.backend.task_info(name)


def task_info(app: App, name: str, known: bool) -> TaskInfo | None:
    """The defaults of a task ``app`` does not register, as a worker recorded them; with
    ``known``, a name no worker has registered either is refused."""
    info = catalogued_task(app, name)
    if info is None and known:
        raise unknown_task(name, [*app.tasks, *app.backend.task_names()])
    return info


def build_named_job(
    app: App,
    task: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    known: bool = True,
    **options: Any,
) -> NewJob:
    """The row ``app.enqueue`` inserts, checked and encoded but not inserted (what an
    async enqueue sends on an async connection). Arguments as for ``App.enqueue``."""
    check_text(task, "task name")
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise PayloadError(f"args for task {task!r} must be a list, got {type(args).__name__}")
    opts = enqueue_options(**options, where="app.enqueue")
    registered = app.tasks.get(task)
    now = app.clock()
    if registered is not None:
        return registered.new_job(args, kwargs or {}, opts, now)
    return build_job(app, task, args, kwargs or {}, opts, now, task=task_info(app, task, known))


def build_job(
    app: App,
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    opts: EnqueueOptions,
    now: float,
    task: Task | TaskInfo | None = None,
    names: Sequence[str] = (),
) -> NewJob:
    """The row for one enqueue, with the defaults of ``task`` filled in: a Task
    registered with ``app``, a TaskInfo (a task a worker registered), or none (the app's)."""
    if task is None:
        info = _default_info(app, name)
    else:
        info = task if isinstance(task, TaskInfo) else task.info
    delay = opts.debounce if opts.debounce is not None else opts.delay
    run_at = opts.run_at if opts.run_at is not None else now + (delay or 0.0)
    check_due(run_at, "run_at" if opts.run_at is not None else f"delay={delay!r}")
    if opts.priority is not None:
        check_priority(opts.priority, f"the enqueue of {name!r}")
    if opts.key is not None:
        check_text(opts.key, "key")
    limit_key = _limit_key(name, args, kwargs, opts, task, info)
    queue = opts.queue or info.queue
    limit_max, rate_max, rate_window = info.concurrency, info.rate_max, info.rate_window
    if limit_key is None and (by_queue := _queue_limit(app, queue, task)) is not None:
        limit_key = QUEUE_KEY.format(queue=queue)
        limit_max = by_queue.concurrency
        rate_max = None if by_queue.rate is None else by_queue.rate.count
        rate_window = None if by_queue.rate is None else by_queue.rate.window
    return NewJob(
        task=name,
        payload=payload.encode(name, args, kwargs, names, app.max_payload),
        queue=queue,
        priority=opts.priority if opts.priority is not None else info.priority,
        run_at=run_at,
        lease=info.lease,
        max_attempts=info.max_attempts,
        deadline_at=None if info.deadline is None else now + info.deadline,
        key=opts.key,
        key_hold=opts.key_hold,
        key_retention=_key_retention(opts, task),
        delay=(delay or 0.0) if opts.run_at is None else None,
        limit_key=limit_key,
        limit_max=None if limit_key is None else limit_max,
        rate_max=None if limit_key is None else rate_max,
        rate_window=None if limit_key is None else rate_window,
        after=opts.after,
        after_policy=opts.after_policy,
        debounce=opts.debounce,
    )


def _key_retention(opts: EnqueueOptions, task: Task | TaskInfo | None) -> float | None:
    """How long the key of a job built with ``opts`` outlives its row: the enqueue's
    setting, else its task's (``inf``: for ever), else None: the pruning App's
    ``Retention.keys``. None too for a key under a scope other than "retained", held as
    that scope says."""
    if opts.key is None or opts.key_hold is not None:
        return None
    kept = opts.key_retention
    if isinstance(kept, str) and task is not None and not isinstance(task, TaskInfo):
        kept = task.key_retention
    if isinstance(kept, str):
        return None
    return math.inf if kept is None else kept


def _queue_limit(app: App, queue: str, task: Task | TaskInfo | None) -> Limit | None:
    """The limit of ``queue``: the app's, or, for a task the app does not register (an
    enqueue by name), the one its workers recorded in the catalogue."""
    registered = task is not None and not isinstance(task, TaskInfo)
    if queue in app.queue_limits or registered:
        return app.queue_limits.get(queue)
    recorded = app.backend.queue_limit(queue)
    return None if recorded is None else recorded.limit()


def _default_info(app: App, name: str) -> TaskInfo:
    """The app's defaults, for a task nothing here or in the catalogue describes."""
    retry = app.default_retry
    return TaskInfo(
        name, app.default_queue, 0, app.default_lease, retry.max_attempts, retry.deadline
    )


def _limit_key(
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    opts: EnqueueOptions,
    task: Task | TaskInfo | None,
    info: TaskInfo,
) -> str | None:
    """The concurrency-limit key of a new job: from the task here (its key function, or
    the key given at enqueue), or, for a task only a worker elsewhere registered, from the
    catalogue (a key function lives in that service's code: the key must be given)."""
    if task is not None and not isinstance(task, TaskInfo):
        if task.limit is None:
            if opts.concurrency_key is not None:
                raise ConfigurationError(
                    f"task {name!r} has no concurrency limit: concurrency_key means nothing "
                    "without @app.task(concurrency=N) or rate='N/s'"
                )
            return None
        arguments = arguments_by_name(task.signature, list(args), kwargs)
        return task.limit.key_for(name, arguments, opts.concurrency_key)
    if info.concurrency is None and info.rate_max is None:
        if opts.concurrency_key is not None:
            raise ConfigurationError(
                f"task {name!r} has no concurrency limit that this app or a worker knows of: "
                "concurrency_key means nothing without one"
            )
        return None
    if info.keyed and opts.concurrency_key is None:
        raise ConfigurationError(
            f"task {name!r} limits its concurrency per key, by a function in the service that "
            "defines it: pass concurrency_key=... with this enqueue"
        )
    return Limit(info.concurrency).key_for(name, {}, opts.concurrency_key)


def schedule_job(app: App, schedule: Schedule, key: str, now: float) -> NewJob:
    """The job one run of ``schedule`` enqueues. A task registered in ``app`` lends its
    lease and retry policy and checks the arguments; otherwise the app's defaults apply,
    as for ``app.enqueue`` by name."""
    # a tick runs once because its claim moves the schedule row past it; the key guards
    # the claim while the job is kept, and a key kept past it would be one row a tick
    opts = EnqueueOptions(
        key=key, queue=schedule.queue, priority=schedule.priority, key_retention=0.0
    )
    task = app.tasks.get(schedule.task)
    if task is not None:
        return task.new_job((), schedule.kwargs, opts, now)
    remote = catalogued_task(app, schedule.task)  # lease and retry as its worker says
    return build_job(app, schedule.task, (), schedule.kwargs, opts, now, task=remote)


def insert(app: App, jobs: Iterable[NewJob], connection: Any = None) -> list[JobHandle]:
    """Insert built jobs in one transaction (the caller's, on ``connection``), through
    the enqueue middleware and hooks, and wake this process's workers."""
    if app.hooks.around_enqueue:
        store = functools.partial(_store, app, connection=connection)
        handles = around_enqueue(app.hooks, jobs, connection is not None, store)
    else:
        handles = _store(app, jobs, connection)
    if isinstance(jobs, Sequence):
        log_debounced(jobs, handles)
    return handles


def log_debounced(jobs: Sequence[NewJob], handles: Sequence[JobHandle]) -> None:
    """Say what each debounced enqueue did: a new window, or a pending job moved."""
    for job, handle in zip(jobs, handles, strict=False):
        if job.debounce is None:
            continue
        if handle.created:
            log.debug("job %d (%s) enqueued, debounced by key %r: starts %g s after the "
                      "latest enqueue with its key", handle.id, job.task, job.key,
                      job.debounce)  # fmt: skip
        else:
            log.debug("job %d (%s) debounced by key %r: new arguments, starts in %g s",
                      handle.id, job.task, job.key, job.debounce)  # fmt: skip


def _store(app: App, jobs: Iterable[NewJob], connection: Any) -> list[JobHandle]:
    results = app.backend.enqueue_jobs(jobs, connection)
    if connection is None:
        app._wakeups.announce()
    return [JobHandle(r.id, r.created, app) for r in results]


def enqueue_named(
    app: App,
    task: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> JobHandle:
    """``app.enqueue``: build the row of a task named ``task`` and store it."""
    job = build_named_job(app, task, args, kwargs, **options)
    return insert(app, [job], options.get("connection"))[0]


# -- for asyncio callers -------------------------------------------------------------------


def is_async_connection(connection: Any) -> bool:
    """Whether ``connection`` is one to await (psycopg's AsyncConnection), without
    importing psycopg where it is not installed."""
    module = type(connection).__module__
    return module.startswith("psycopg") and hasattr(connection, "__aenter__")


async def enqueue_named_async(app: App, task: str, *args: Any, **kwargs: Any) -> JobHandle:
    """``app.enqueue`` awaitable; on an AsyncConnection, in the caller's transaction."""
    connection = kwargs.get("connection")
    if connection is not None and is_async_connection(connection):
        # the build may read the task catalogue (a task this app does not register)
        job = await asyncio.to_thread(build_named_job, app, task, *args, **kwargs)
        return (await insert_async(app, [job], connection))[0]
    return await asyncio.to_thread(enqueue_named, app, task, *args, **kwargs)


async def insert_async(app: App, jobs: Sequence[NewJob], connection: Any) -> list[JobHandle]:
    """Insert built jobs on the caller's AsyncConnection, in its transaction (never
    committing it): the jobs are stored if and only if the caller commits."""
    if not is_async_connection(connection):
        raise ConfigurationError(
            f"an async enqueue on a connection needs a psycopg AsyncConnection, got "
            f"{type(connection).__name__}"
        )
    if not app.backend.async_connections:
        raise ConfigurationError(
            f"{type(app.backend).__name__} cannot enqueue on an async connection: on "
            "SQLite, run the enqueue with its sqlite3 connection in a thread "
            "(await asyncio.to_thread(task.with_options(connection=conn).enqueue, ...))"
        )

    async def store(rows: Sequence[NewJob]) -> list[JobHandle]:
        results = await app.backend.enqueue_jobs_async(rows, connection)
        return [JobHandle(r.id, r.created, app) for r in results]

    if app.hooks.around_enqueue:  # enqueue middleware (tracing) and job_enqueued hooks
        handles = await around_enqueue_async(app.hooks, jobs, store)
    else:
        handles = await store(jobs)
    log_debounced(jobs, handles)
    return handles
