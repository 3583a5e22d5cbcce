"""Tasks: registered functions (``@app.task``), a task bound to enqueue options, and a
signature (a task and its arguments, for ``app.group``)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import typing
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Literal, Protocol, cast, overload

from typing_extensions import ParamSpec, TypeVar

from .backends.records import JobGroup
from .context import JobContext
from .dependencies import AfterPolicy, Group, check_policy
from .enqueue import build_job, enqueue_options, insert, insert_async, is_async_connection
from .errors import ConfigurationError, PayloadError
from .handles import JobHandle
from .hooks import around_enqueue
from .jobs import EnqueueOptions, KeyScope, NewJob, TaskInfo
from .limits import Limit, arguments_by_name, define_limit
from .model_args import find_models
from .retention import KeyRetention, key_retention_of
from .retry import Retry
from .validate import check_priority, check_queue_name, check_seconds, check_text, seconds

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger("sqljobs")

P = ParamSpec("P", default=...)
"""The parameters a caller passes to ``enqueue`` (a context parameter left out)."""
R = TypeVar("R", covariant=True, default=Any)
"""What the task returns, awaited for an ``async def`` task: ``handle.result()``'s type."""
_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Unchecked:
    """Never instantiated. A function whose first parameter would accept it (annotated
    ``Any`` or ``object``, or not at all) cannot be told from one taking a context by its
    type, so the decorator types its enqueue loosely rather than wrongly."""


class TaskDecorator(Protocol):
    """What ``@app.task(...)`` and ``@app.periodic(...)`` return: a decorator that turns a
    function into a :class:`Task` typed by what callers pass and what it returns.

    The overloads are tried in order: a first parameter a type checker cannot judge
    (``Any``, ``object``, unannotated) gives a loosely typed task; a first parameter
    ``JobContext`` is left out of what ``enqueue`` takes; an ``async def`` task's result is
    what its coroutine returns."""

    @overload
    def __call__(
        self, fn: Callable[Concatenate[_Unchecked, ...], Coroutine[Any, Any, _R]], /
    ) -> Task[..., _R]: ...
    @overload
    def __call__(self, fn: Callable[Concatenate[_Unchecked, ...], _R], /) -> Task[..., _R]: ...
    @overload
    def __call__(
        self, fn: Callable[Concatenate[JobContext, _P], Coroutine[Any, Any, _R]], /
    ) -> Task[_P, _R]: ...
    @overload
    def __call__(self, fn: Callable[Concatenate[JobContext, _P], _R], /) -> Task[_P, _R]: ...
    @overload
    def __call__(self, fn: Callable[_P, Coroutine[Any, Any, _R]], /) -> Task[_P, _R]: ...
    @overload
    def __call__(self, fn: Callable[_P, _R], /) -> Task[_P, _R]: ...


class Task(Generic[P, R]):
    """A function registered with an App; ``enqueue`` stores a job that runs it.

    Generic over what callers pass (``P``) and what the function returns (``R``), so a type
    checker flags a wrong ``enqueue(...)`` and types ``handle.result()`` (see
    docs/typing.md). Parameters annotated with a pydantic model or a dataclass are dumped
    to JSON at enqueue and validated back in the worker (:mod:`sqljobs.model_args`)."""

    def __init__(
        self,
        app: App,
        fn: Callable[..., Any],
        *,
        name: str,
        queue: str,
        lease: float,
        retry: Retry,
        priority: int,
        timeout: float | None,
        store_result: bool = True,
        hard_timeout: float | None = None,
        limit: Limit | None = None,
        redact: Sequence[str] = (),
        key_retention: float | Literal["default"] | None = "default",
        workflow: bool = False,
    ) -> None:
        check_seconds(lease, f"task {name!r}: lease")
        if timeout is not None:
            check_seconds(timeout, f"task {name!r}: timeout")
        if hard_timeout is not None:
            check_seconds(hard_timeout, f"task {name!r}: hard_timeout")
            if timeout is not None and not hard_timeout > timeout:
                raise ConfigurationError(
                    f"task {name!r}: hard_timeout {hard_timeout:g} s must be longer than "
                    f"timeout {timeout:g} s (the handler is asked to stop at timeout, and "
                    "its process killed at hard_timeout)"
                )
        self.app = app
        self.fn = fn
        self.name = name
        self.queue = queue
        self.lease = float(lease)
        self.retry = retry
        self.priority = check_priority(priority, f"task {name!r}")
        self.timeout = timeout
        self.hard_timeout = hard_timeout
        """Seconds after which, under ``--processes``, the process running an attempt is
        killed and replaced (None: never)."""
        self.store_result = store_result
        self.limit = limit
        self.key_retention = key_retention
        """Seconds a key of its jobs outlives the job's row (None: for ever; "default": as
        the App that prunes it says, ``Retention.keys``)."""
        self.is_async = inspect.iscoroutinefunction(fn)
        self.is_workflow = workflow
        """A workflow (``@app.workflow``): ``fn`` takes a Workflow first, and the worker
        calls the runner that replays it."""
        self.takes_context = workflow or _first_param_is_context(fn)
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        self.signature = sig.replace(parameters=params[1:] if self.takes_context else params)
        self._positional_names = [
            p.name
            for p in self.signature.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        self.redact = _check_redact(name, redact, self.signature)
        """Parameters whose values the dashboard shows as ``***``."""
        self.model_args, self.result_model = find_models(name, fn, self.signature)
        """Its model parameters and model result, found once; None for a task without."""
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", name)
        if workflow:
            from .workflows import workflow_runner

            self.fn = workflow_runner(self, fn)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"

    @functools.cached_property
    def info(self) -> TaskInfo:
        """This task's defaults for an enqueue (what a worker records in the catalogue),
        built once: every enqueue reads them."""
        return TaskInfo(
            self.name,
            self.queue,
            self.priority,
            self.lease,
            self.retry.max_attempts,
            self.retry.deadline,
            None if self.limit is None else self.limit.concurrency,
            self.limit is not None and self.limit.key is not None,
            None if self.limit is None or self.limit.rate is None else self.limit.rate.count,
            None if self.limit is None or self.limit.rate is None else self.limit.rate.window,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly, in this process (no job is stored)."""
        if self.is_workflow:
            raise ConfigurationError(
                f"workflow {self.name!r} runs in a worker, which replays its steps: enqueue "
                f"it ({self.__name__}.enqueue(...)); in a test, app.run_until_empty() runs it"
            )
        return self.fn(*args, **kwargs)

    def with_options(
        self,
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
    ) -> BoundTask[P, R]:
        """Options for the next enqueue: a business ``key`` (a second enqueue with it
        returns the existing job), a ``delay`` or ``run_at``, a ``priority`` (higher runs
        first), a ``queue``, or a ``connection`` to enqueue inside the caller's transaction.
        ``key_scope`` says how long the key refuses duplicates (see :func:`key_hold`);
        ``key_retention`` how long a ``"retained"`` key outlives the job's row (seconds or
        a timedelta, None: for ever; by default the task's setting).
        ``concurrency_key`` names the key a task's concurrency limit counts this job by,
        instead of its ``concurrency_key`` function. ``after`` names jobs (handles or ids)
        this one waits for: it is ``waiting`` until they are all done, or, with
        ``after_policy="always"``, until they have all ended (see sqljobs.dependencies).
        ``debounce`` (seconds or a timedelta, with a ``key``): the job starts that long
        after the latest enqueue with its key; an enqueue while it is still pending
        replaces its arguments and moves its start (last write wins), and one after it
        was claimed starts a new job."""
        if concurrency_key is not None and self.limit is None:
            raise ConfigurationError(
                f"task {self.name!r} has no concurrency limit: concurrency_key means nothing "
                "without @app.task(concurrency=N) or rate='N/s'"
            )
        opts = enqueue_options(
            key=key,
            delay=delay,
            run_at=run_at,
            priority=priority,
            queue=queue,
            connection=connection,
            key_scope=key_scope,
            concurrency_key=concurrency_key,
            after=after,
            after_policy=after_policy,
            key_retention=key_retention,
            debounce=debounce,
        )
        return BoundTask(self, opts)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This task with these arguments, not enqueued: a member or the callback of
        ``app.group``."""
        return Signature(self, args, kwargs, EnqueueOptions())

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """Store a job that calls this task with these arguments."""
        return BoundTask(self, EnqueueOptions()).enqueue(*args, **kwargs)

    def enqueue_many(
        self, calls: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> list[JobHandle[R]]:
        """Store many jobs in one transaction. Each call is a tuple of positional
        arguments or a dict of keyword arguments."""
        return BoundTask(self, EnqueueOptions()).enqueue_many(calls)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """:meth:`enqueue` for asyncio callers (see :mod:`sqljobs.enqueue`)."""
        return await BoundTask(self, EnqueueOptions()).enqueue_async(*args, **kwargs)

    async def enqueue_many_async(
        self, calls: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> list[JobHandle[R]]:
        """:meth:`enqueue_many` for asyncio callers."""
        return await BoundTask(self, EnqueueOptions()).enqueue_many_async(calls)

    def new_job(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], opts: EnqueueOptions, now: float
    ) -> NewJob:
        """Check arguments against the signature and build the row to insert."""
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise PayloadError(
                f"arguments do not match task {self.name}{self.signature}: {exc}"
            ) from None
        if self.model_args is not None:
            args, kwargs = self.model_args.instances(args, kwargs)
            if self.limit is not None and self.limit.key is not None and not opts.concurrency_key:
                # its key function sees models, as the handler will, not their JSON
                arguments = arguments_by_name(self.signature, args, kwargs)
                key = self.limit.key_for(self.name, arguments).removeprefix(f"{self.name}:")
                opts = replace(opts, concurrency_key=key)
            args, kwargs = self.model_args.dump(args, kwargs)
        return build_job(
            self.app, self.name, args, kwargs, opts, now, task=self, names=self._positional_names
        )


class BoundTask(Generic[P, R]):
    """A task with enqueue options attached (see ``Task.with_options``)."""

    def __init__(self, task: Task[P, R], options: EnqueueOptions) -> None:
        self.task = task
        self.options = options

    def with_options(self, **changes: Any) -> BoundTask[P, R]:
        current = dict(self.options.__dict__)
        hold = current.pop("key_hold")
        current["key_scope"] = "retained" if hold is None else hold
        merged = self.task.with_options(**{**current, **changes})
        return BoundTask(self.task, merged.options)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This task with these options and arguments, not enqueued (see ``Task.s``)."""
        return Signature(self.task, args, kwargs, self.options)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        now = self.task.app.clock()
        job = self.task.new_job(args, kwargs, self.options, now)
        return insert(self.task.app, [job], self.options.connection)[0]

    def enqueue_many(
        self, calls: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> list[JobHandle[R]]:
        if self.options.key is not None:
            raise ConfigurationError(
                "enqueue_many cannot share one key among several jobs; enqueue keyed jobs "
                "one by one or give each its own key"
            )
        return insert(self.task.app, self._new_jobs(calls), self.options.connection)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """:meth:`enqueue` without blocking the event loop: in a thread, or, with a psycopg
        AsyncConnection as ``connection``, awaited in the caller's transaction."""
        connection = self.options.connection
        if connection is not None and is_async_connection(connection):
            job = self.task.new_job(args, kwargs, self.options, self.task.app.clock())
            return (await insert_async(self.task.app, [job], connection))[0]
        return await asyncio.to_thread(self.enqueue, *args, **kwargs)

    async def enqueue_many_async(
        self, calls: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> list[JobHandle[R]]:
        """:meth:`enqueue_many` without blocking the event loop (as :meth:`enqueue_async`)."""
        connection = self.options.connection
        if connection is not None and is_async_connection(connection):
            if self.options.key is not None:
                self.enqueue_many([])  # the same refusal as enqueue_many's
            return await insert_async(self.task.app, list(self._new_jobs(calls)), connection)
        return await asyncio.to_thread(self.enqueue_many, calls)

    def _new_jobs(self, calls: Iterable[Sequence[Any] | Mapping[str, Any]]) -> Iterator[NewJob]:
        """The rows, checked and encoded as the backend reads them (PostgreSQL sends one
        chunk while the next is built); a bad call raises there and nothing is stored."""
        now = self.task.app.clock()
        args: Sequence[Any]
        kwargs: Mapping[str, Any]
        for i, call in enumerate(calls):
            if isinstance(call, Mapping):
                args, kwargs = (), call
            elif isinstance(call, Sequence) and not isinstance(call, str | bytes):
                args, kwargs = call, {}
            else:
                raise PayloadError(
                    f"enqueue_many call {i} for task {self.task.name!r} must be a tuple of "
                    f"arguments or a dict of keyword arguments, got {type(call).__name__}"
                )
            try:
                job = self.task.new_job(args, kwargs, self.options, now)
            except PayloadError as exc:  # say which of possibly thousands of calls it was
                raise type(exc)(f"enqueue_many call {i}: {exc}") from exc
            yield job


@dataclass(frozen=True)
class Signature:
    """A task, its arguments and its enqueue options, to be enqueued later (by
    ``app.group``). A group's callback gets its members' results as a first argument
    before ``args``."""

    task: Task[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    options: EnqueueOptions

    def new_job(self, now: float, collect: bool = False) -> NewJob:
        """The row to insert; ``collect``: as a group's callback, which must take the
        results list first (checked now, not when the group ends)."""
        if not collect:
            return self.task.new_job(self.args, self.kwargs, self.options, now)
        try:
            self.task.signature.bind([], *self.args, **self.kwargs)
        except TypeError as exc:
            raise PayloadError(
                f"task {self.task.name}{self.task.signature} cannot be a group's callback "
                f"with these arguments: it is called with the list of results first ({exc})"
            ) from None
        args: Sequence[Any] = self.args
        kwargs: Mapping[str, Any] = self.kwargs
        model_args = self.task.model_args
        if model_args is not None:  # the results list comes first, in the worker
            args, kwargs = model_args.dump(*model_args.instances(args, kwargs, 1), offset=1)
        task = self.task
        job = build_job(task.app, task.name, args, kwargs, self.options, now, task=task)
        return replace(job, collect=True)


def define_task(
    app: App,
    fn: Callable[..., Any] | None,
    *,
    name: str | None = None,
    queue: str | None = None,
    lease: float | timedelta | None = None,
    retry: Retry | None = None,
    priority: int = 0,
    timeout: float | timedelta | None = None,
    hard_timeout: float | timedelta | None = None,
    store_result: bool = True,
    concurrency: int | None = None,
    concurrency_key: Callable[..., Any] | None = None,
    rate: str | None = None,
    redact: Sequence[str] = (),
    key_retention: KeyRetention = "default",
    workflow: bool = False,
) -> Task[..., Any] | TaskDecorator:
    """``@app.task``: register ``fn`` with ``app`` (or return the decorator that will),
    with the App's defaults for what is not given. Options as for ``App.task``;
    ``workflow``: ``@app.workflow``, whose ``fn`` takes a Workflow first."""
    kept = key_retention
    if not (isinstance(kept, str) and kept == "default"):
        kept = key_retention_of(kept, "@app.task(key_retention=...)")
    if queue is not None:
        check_queue_name(queue, "@app.task(queue=...)")

    def register(func: Callable[..., Any]) -> Task:
        task_name = check_text(name or func.__name__, "task name")
        if task_name in app.tasks:
            raise ConfigurationError(f"a task named {task_name!r} is already registered")
        if workflow:
            from .workflows import first_param_is_workflow

            if not first_param_is_workflow(func):
                raise ConfigurationError(
                    f"workflow {task_name!r}: its first parameter must be annotated "
                    "sqljobs.Workflow (def fn(wf: sqljobs.Workflow, ...))"
                )
        task = Task(
            app,
            func,
            name=task_name,
            queue=app.default_queue if queue is None else queue,
            lease=app.default_lease if lease is None else seconds(lease, "lease"),
            retry=retry or app.default_retry,
            priority=priority,
            timeout=seconds(timeout, "timeout"),
            hard_timeout=seconds(hard_timeout, "hard_timeout"),
            store_result=store_result,
            limit=define_limit(concurrency, concurrency_key, rate, task_name),
            redact=redact,
            key_retention=kept,
            workflow=workflow,
        )
        app.tasks[task_name] = task
        return task

    return register(fn) if fn is not None else cast(TaskDecorator, register)


def enqueue_group(
    app: App,
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
    if any(sig.options.debounce is not None for sig in [*signatures, *([then] if then else [])]):
        raise ConfigurationError(
            "group() members and callbacks cannot be debounced: enqueue a debounced job on "
            "its own (task.with_options(key=..., debounce=...).enqueue(...))"
        )
    now = app.clock()
    jobs = [sig.new_job(now) for sig in signatures]
    callback = None
    if then is not None:
        callback = replace(then.new_job(now, collect=True), after_policy=check_policy(after_policy))

    def store(rows: Iterable[NewJob]) -> list[JobHandle]:
        given = list(rows)  # as built, or carrying the enqueue middleware's headers
        members, then_job = given[: len(jobs)], given[len(jobs)] if callback else None
        got, last = app.backend.enqueue_group(JobGroup(members, then_job), connection)
        return [JobHandle(r.id, r.created, app) for r in [*got, *([last] if last else [])]]

    everything = [*jobs, *([callback] if callback is not None else [])]
    if app.hooks.around_enqueue:
        made = around_enqueue(app.hooks, everything, connection is not None, store)
    else:
        made = store(everything)
    if connection is None:
        app._wakeups.announce()
    handles = made[: len(jobs)]
    then_handle = made[len(jobs)] if callback is not None else None
    log.info("group of %d enqueued%s", len(handles),
             "" if then_handle is None else f", then job {then_handle.id}")  # fmt: skip
    return Group(handles, then_handle)


def _first_param_is_context(fn: Callable[..., Any]) -> bool:
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        return False
    annotation = params[0].annotation
    if annotation is JobContext:
        return True
    if isinstance(annotation, str):
        try:
            hints = typing.get_type_hints(fn)
            return hints.get(params[0].name) is JobContext
        except Exception:
            return annotation.split(".")[-1] == "JobContext"
    return False


__all__ = ["BoundTask", "Signature", "Task", "TaskDecorator", "define_task", "enqueue_group"]


def _check_redact(
    task: str, redact: Sequence[str], signature: inspect.Signature
) -> tuple[str, ...]:
    """``redact`` as a tuple of parameter names of ``signature``, or a ConfigurationError."""
    if isinstance(redact, str) or not all(isinstance(n, str) for n in redact):
        raise ConfigurationError(
            f"task {task!r}: redact must be a list of parameter names, got {redact!r}"
        )
    unknown = [n for n in redact if n not in signature.parameters]
    if unknown:
        raise ConfigurationError(
            f"task {task!r}: redact names {', '.join(map(repr, unknown))}, not parameters of "
            f"{task}{signature}"
        )
    return tuple(redact)
