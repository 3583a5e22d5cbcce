"""Registering schedules and acting on them for an App: ``@app.periodic`` (a task and its
schedule, defined in code), ``app.schedule`` (one stored in the database at run time),
and running, pausing and resuming them. What a schedule is, and when it fires, is
:mod:`sqljobs.schedules`; the scheduler that fires it is
:mod:`sqljobs.maintenance.scheduler`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from . import payload
from .backends.base import Backend
from .enqueue import schedule_job, task_info
from .errors import ConfigurationError, ScheduleNotFound, SqljobsError
from .handles import JobHandle
from .jobs import TaskInfo
from .maintenance.scheduler import Scheduler
from .retry import Retry
from .schedules import (
    ScheduleState,
    check_arguments,
    check_policies,
    check_timing,
    define_schedule,
    tick_key,
)
from .tasks import Task, TaskDecorator
from .validate import check_queue_name, check_text

if TYPE_CHECKING:
    from .app import App


def define_periodic(
    app: App,
    expression: str | None = None,
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
    hard_timeout: float | timedelta | None = None,
) -> TaskDecorator:
    """``@app.periodic``: the decorator that registers a task and its schedule."""
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
        if task_name in app.periodic_schedules:
            raise ConfigurationError(f"a schedule named {task_name!r} is already defined")
        task = app.task(
            name=task_name,
            queue=queue,
            lease=lease,
            retry=retry,
            priority=priority,
            timeout=timeout,
            hard_timeout=hard_timeout,
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
            payload.encode(task.name, (), schedule.kwargs, limit=app.max_payload)
        except SqljobsError:
            del app.tasks[task.name]
            raise
        app.periodic_schedules[task.name] = schedule
        app._schedules_synced = False
        return task

    return cast(TaskDecorator, register)


def schedule(
    app: App,
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
    kwargs={"tenant": "acme"})``. Options as for ``App.periodic``. Updating keeps the
    schedule's next run (and its paused flag) unless the timing changed. A task name that
    neither this App nor a worker has registered is refused unless ``known=False`` (see
    ``App.enqueue``)."""
    if name in app.periodic_schedules:
        raise ConfigurationError(
            f"schedule {name!r} is defined in code with @app.periodic; change it there"
        )
    if queue is not None:
        check_queue_name(queue, "app.schedule(queue=...)")
    registered = app.tasks.get(task if isinstance(task, str) else task.name)
    info: Task | TaskInfo | None = registered
    if registered is None and isinstance(task, str) and task:
        info = task_info(app, task, known)
    schedule = define_schedule(
        name,
        task=task,
        kwargs=kwargs,
        cron=cron,
        every=every,
        tz=tz,
        overlap=overlap,
        misfire=misfire,
        queue=queue or (info.queue if info else app.default_queue),
        priority=(info.priority if info else 0) if priority is None else priority,
    )
    if registered is not None:
        check_arguments(registered, schedule)
    payload.encode(schedule.task, (), schedule.kwargs, limit=app.max_payload)
    return app.backend.save_schedule(schedule, schedule.first_after(app.clock()))


def unschedule(app: App, name: str) -> bool:
    """Delete a stored schedule; False if there was none. (One defined with
    ``@app.periodic`` comes back when a worker starts: remove it from the code.)"""
    return app.backend.delete_schedule(check_text(name, "schedule name"))


def sync_schedules(app: App) -> None:
    """Write this app's ``@app.periodic`` definitions to the database now (workers do it
    when they start; listing and the other schedule methods do it on first use)."""
    Scheduler(app, app.backend).sync()
    app._schedules_synced = True


def _synced_backend(app: App) -> Backend:
    if not app._schedules_synced:
        sync_schedules(app)
    return app.backend


def list_schedules(app: App) -> list[ScheduleState]:
    """Every stored schedule, by name."""
    return _synced_backend(app).list_schedules()


def get_schedule(app: App, name: str) -> ScheduleState | None:
    """The stored schedule ``name``, or None."""
    return _synced_backend(app).get_schedule(check_text(name, "schedule name"))


def pause_schedule(app: App, name: str) -> bool:
    """Stop a schedule from firing until resumed; False if there is no such schedule."""
    return _synced_backend(app).pause_schedule(check_text(name, "schedule name"))


def resume_schedule(app: App, name: str) -> bool:
    """Let a paused schedule fire again, from its next tick after now (ticks that fell
    while it was paused are not caught up); False if there is no such schedule."""
    state = get_schedule(app, name)
    if state is None:
        return False
    return app.backend.resume_schedule(name, state.schedule.first_after(app.clock()))


def run_schedule_now(app: App, name: str) -> JobHandle:
    """Enqueue one run of a schedule now, outside its timing. With ``overlap="skip"`` and
    a run pending or running, that run's handle comes back (``created`` False)."""
    state = get_schedule(app, name)
    if state is None:
        raise ScheduleNotFound(f"no schedule named {name!r}")
    now = app.clock()
    job = schedule_job(app, state.schedule, tick_key(name + ":now", now), now)
    result = app.backend.run_schedule_now(name, job)
    if result is None or result.job_id is None:
        raise ScheduleNotFound(f"no schedule named {name!r}")
    if result.created:
        app._wakeups.announce()
    return JobHandle(result.job_id, result.created, app)
