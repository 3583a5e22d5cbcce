"""Django tasks as sqljobs tasks: each ``@django.tasks.task`` function becomes a sqljobs
task named by its module path (``shop.tasks.charge``), in its queue and priority, so
``sqljobs worker`` runs it and the dashboard, stats and metrics name it."""

from __future__ import annotations

import datetime
import inspect
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ...context import JobContext

if TYPE_CHECKING:
    from django.tasks import Task as DjangoTask

    from ...app import App

log = logging.getLogger("sqljobs.django")


def register_django_tasks(app: App, modules: Iterable[Any]) -> None:
    """Register every Django task defined in ``modules`` with ``app``."""
    from django.tasks import Task as DjangoTask

    seen = 0
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, DjangoTask) and value.module_path not in app.tasks:
                app.task(name=value.module_path, queue=value.queue_name)(runner(value))
                seen += 1
    log.debug("%d Django tasks registered with sqljobs", seen)


def runner(task: DjangoTask) -> Any:
    """A sqljobs handler that calls ``task``'s function: with a Django ``TaskContext``
    first when it takes one (its ``attempt`` is the sqljobs attempt), and an ``async``
    one for a coroutine function. Its signature is the function's, without ``context``,
    so an enqueue with the wrong arguments is refused at once."""
    params = list(inspect.signature(task.func).parameters.values())
    if task.takes_context:
        params = params[1:]
    ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_ONLY, annotation=JobContext)

    def arguments(job: JobContext, args: tuple[Any, ...]) -> tuple[Any, ...]:
        if not task.takes_context:
            return args
        from django.tasks import TaskContext

        return (TaskContext(task_result=running_result(task, job)), *args)

    if inspect.iscoroutinefunction(task.func):

        async def run_async(job: JobContext, *args: Any, **kwargs: Any) -> Any:
            return await task.func(*arguments(job, args), **kwargs)

        handler: Any = run_async
    else:

        def run(job: JobContext, *args: Any, **kwargs: Any) -> Any:
            return task.func(*arguments(job, args), **kwargs)

        handler = run
    handler.__signature__ = inspect.Signature([ctx, *params])
    handler.__name__ = handler.__qualname__ = task.name
    handler.__module__ = task.func.__module__
    return handler


def running_result(task: DjangoTask, job: JobContext) -> Any:
    """The ``TaskResult`` a task that takes context sees while it runs."""
    from django.tasks import TaskResult, TaskResultStatus

    now = datetime.datetime.now(datetime.UTC)
    return TaskResult(
        task=task,
        id=str(job.job_id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=[],
        kwargs={},
        backend=task.backend,
        errors=[],
        worker_ids=["sqljobs"] * job.attempt,  # its length is Django's attempt number
    )
