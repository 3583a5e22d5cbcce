"""``sqljobs.contrib.django.TaskBackend``: Django's ``django.tasks`` enqueue into sqljobs.

A ``TaskResult`` id is the sqljobs job id. Its status is read from the job: ``pending``
and ``waiting`` are READY, ``running`` RUNNING, ``done`` SUCCESSFUL, ``dead`` and
``cancelled`` FAILED; its errors are the job's failed attempts, each with the exception's
class path and traceback; its ``worker_ids`` one per attempt.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.db import connections
from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils.module_loading import import_string

from ...jobs import Job, JobState
from . import get_app

_STATUS = {
    JobState.PENDING: TaskResultStatus.READY,
    JobState.WAITING: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.DONE: TaskResultStatus.SUCCESSFUL,
    JobState.DEAD: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}


class TaskBackend(BaseTaskBackend):
    """Django tasks as durable sqljobs jobs: run by ``manage.py sqljobs worker``, with
    priorities, ``run_after``, queues, async tasks, and results any process can read."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Store a job; inside ``transaction.atomic()`` on the jobs' database it joins
        that transaction (it exists only if the transaction commits)."""
        self.validate_task(task)
        app = get_app()
        handle = app.enqueue(
            task.module_path,
            list(args),
            dict(kwargs),
            queue=task.queue_name,
            priority=task.priority,
            run_at=task.run_after,
            connection=self._callers_connection(),
        )
        return self._result(task, app.get_job(handle.id), str(handle.id))

    def _callers_connection(self) -> Any:
        """Django's own DB-API connection while it is in a transaction on the database the
        jobs live in (its rows and the job then commit together), else None."""
        from django.conf import settings

        options = getattr(settings, "SQLJOBS", {})
        if options.get("URL"):
            return None  # the jobs live elsewhere: no transaction to share
        connection = connections[options.get("DATABASE", "default")]
        if not connection.in_atomic_block:
            return None
        connection.ensure_connection()
        return connection.connection

    def get_result(self, result_id: str) -> TaskResult:
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        job = get_app().get_job(job_id)
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        try:
            task = import_string(job.task)
        except ImportError:
            raise TaskResultDoesNotExist(
                f"{result_id} (task {job.task} is not importable)"
            ) from None
        return self._result(task, job, result_id)

    def _result(self, task: Task, job: Job | None, result_id: str) -> TaskResult:
        """The ``TaskResult`` of ``job`` (None: committed in the caller's transaction, not
        visible yet: READY)."""
        if job is None:
            return TaskResult(
                task=task, id=result_id, status=TaskResultStatus.READY, enqueued_at=None,
                started_at=None, finished_at=None, last_attempted_at=None, args=[],
                kwargs={}, backend=self.alias, errors=[], worker_ids=[],
            )  # fmt: skip
        failed = [e for e in job.history if isinstance(e, dict) and e.get("traceback")]
        workers = [str(e.get("worker") or "?") for e in job.history if isinstance(e, dict)]
        if job.state in (JobState.RUNNING, JobState.DONE) and job.worker:
            workers.append(job.worker)
        result = TaskResult(
            task=task,
            id=result_id,
            status=_STATUS[job.state],
            enqueued_at=_when(job.created_at),
            started_at=_when(job.started_at),
            finished_at=_when(job.finished_at),
            last_attempted_at=_when(job.started_at),
            args=job.args,
            kwargs=job.kwargs,
            backend=self.alias,
            errors=[
                TaskError(
                    exception_class_path=str(e.get("exception") or "builtins.Exception"),
                    traceback=str(e["traceback"]),
                )
                for e in failed
            ],
            worker_ids=workers,
        )
        if job.state is JobState.DONE:
            object.__setattr__(result, "_return_value", job.result)
        return result


def _when(ts: float | None) -> datetime.datetime | None:
    return None if ts is None else datetime.datetime.fromtimestamp(ts, datetime.UTC)
