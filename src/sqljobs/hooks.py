"""Hooks and middleware: what an App lets its users run around enqueues and attempts.

``@app.on("job_failed")`` registers a hook: a function told that something happened,
which can neither change nor break it (what it raises is logged). ``@app.middleware``
registers a generator function that wraps every attempt (``@app.enqueue_middleware``:
every enqueue): the code before its one ``yield`` runs as the attempt begins, the code
after it as the attempt ends, on the thread (or event loop) that runs the handler, so
one shape serves plain and ``async def`` tasks alike. See docs/hooks.md.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args, overload

from .errors import ConfigurationError
from .jobs import NewJob
from .payload import with_headers

if TYPE_CHECKING:
    from .app import App
    from .context import JobContext
    from .handles import JobHandle

log = logging.getLogger("sqljobs.hooks")

EventName = Literal[
    "job_enqueued",
    "job_started",
    "job_done",
    "job_failed",
    "job_dead",
    "job_cancelled",
    "worker_started",
    "worker_stopped",
]
EVENTS: tuple[EventName, ...] = get_args(EventName)
WORKER_EVENTS = frozenset(EVENTS) - {"job_enqueued"}
"""The events a worker tells (in its own process); ``job_enqueued`` is told by the
process that enqueues."""


@dataclass(frozen=True)
class JobEvent:
    """What a job hook is told. ``attempt`` counts from 1 (0 for ``job_enqueued``).
    ``duration``: seconds the handler ran in this worker (None if it did not run here).
    ``error``: the text stored with the job; ``exception``: what the handler raised, when
    it raised in this process (None for a timeout, or a job that could not start).
    ``will_retry``: for ``job_failed``, whether the job goes back to pending for
    another attempt (False: ``job_dead`` follows). ``worker_id``: None for
    ``job_enqueued``."""

    event: EventName
    job_id: int
    task: str
    queue: str
    attempt: int
    worker_id: str | None = None
    duration: float | None = None
    error: str | None = None
    exception: BaseException | None = field(default=None, compare=False)
    will_retry: bool = False


@dataclass(frozen=True)
class WorkerLifecycle:
    """What ``worker_started`` and ``worker_stopped`` hooks are told. ``queues``: the
    queues it serves (None: all). ``counts``: for ``worker_stopped``, what the worker did
    in its life (``done``, ``retried``, ``dead``, ``released``, ...); empty at start."""

    event: EventName
    worker_id: str
    queues: tuple[str, ...] | None
    concurrency: int
    counts: dict[str, int] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class AttemptInfo:
    """What attempt middleware is given: the job, and the attempt's context.
    ``headers``: the string metadata its enqueue carried (see ``EnqueueInfo``)."""

    job_id: int
    task: str
    queue: str
    attempt: int
    max_attempts: int
    worker_id: str
    headers: dict[str, str]
    context: JobContext = field(repr=False, compare=False)
    _would_retry: Callable[[BaseException], bool] = field(repr=False, compare=False)

    def would_retry(self, exc: BaseException) -> bool:
        """True if this attempt failing with ``exc`` would send the job back for another
        attempt (attempts and deadline left, not ``Discard``); False if the job would end
        dead. Middleware that wraps everything else (tracing) knows the final fate."""
        return self._would_retry(exc)


@dataclass(frozen=True)
class EnqueueInfo:
    """What enqueue middleware is given. ``task`` and ``queue`` are those of the first
    job (``enqueue_many`` enqueues one task; a group, its members and callback); ``count``
    the number of jobs if known before they are inserted (``enqueue_many`` streams
    them: None). ``headers`` is filled by the middleware before its ``yield``: every job
    of this enqueue carries it in its payload, and attempt middleware reads it back.
    ``in_transaction``: the jobs were inserted on the caller's connection and commit
    with it."""

    task: str
    queue: str
    count: int | None
    in_transaction: bool
    headers: dict[str, str] = field(default_factory=dict)


Hook = Callable[[Any], object]
H = TypeVar("H", bound=Hook)
Middleware = Callable[[Any], Generator[None, Any, None]]
T = TypeVar("T")


class Hooks:
    """The hooks and middleware registered on one App. Register them before workers
    start: a worker takes the ones registered when it is created."""

    def __init__(self) -> None:
        self.by_event: dict[str, list[Hook]] = {name: [] for name in EVENTS}
        self.middleware: list[Middleware] = []
        self.enqueue_middleware: list[Middleware] = []
        self.around_enqueue = False
        """True when an enqueue has anything to do here: the enqueue path checks it."""
        self.traced = False
        """sqljobs.tracing's middleware is registered."""
        self.tracer: Any = None
        """Its OpenTelemetry tracer, for the spans of workflow steps."""

    def check_event(self, event: object) -> None:
        if event not in self.by_event:
            raise ConfigurationError(
                f"unknown hook event {event!r}: the events are {', '.join(EVENTS)}"
            )

    def add_hook(self, event: str, fn: Hook) -> None:
        self.check_event(event)
        if not callable(fn):
            raise ConfigurationError(f"a hook for {event!r} must be callable, got {fn!r}")
        self.by_event[event].append(fn)
        self._changed()
        log.debug("hook %s registered for %s", name_of(fn), event)

    def decorator(self, event: str) -> Callable[[H], H]:
        """``@app.on(event)``: registers the function below it (an unknown event fails
        here, at the decorator, not at its use)."""
        self.check_event(event)

        def register(fn: H) -> H:
            self.add_hook(event, fn)
            return fn

        return register

    def add_middleware(
        self, fn: Middleware, *, enqueue: bool = False, outermost: bool = False
    ) -> None:
        where = "enqueue_middleware" if enqueue else "middleware"
        if inspect.isasyncgenfunction(fn) or inspect.iscoroutinefunction(fn):
            raise ConfigurationError(
                f"@app.{where} {name_of(fn)} is async: middleware is a plain generator "
                "function (def ... yield), which wraps async tasks too, on their event loop"
            )
        if not inspect.isgeneratorfunction(fn):
            raise ConfigurationError(
                f"@app.{where} {name_of(fn)} must be a generator function that yields once "
                "(def mw(info): ...before...; yield; ...after...), got "
                f"{type(fn).__name__}"
            )
        chain = self.enqueue_middleware if enqueue else self.middleware
        if outermost:
            chain.insert(0, fn)
        else:
            chain.append(fn)
        self._changed()
        log.debug("%s %s registered", where, name_of(fn))

    def listens(self, event: str) -> bool:
        return bool(self.by_event[event])

    @property
    def for_workers(self) -> bool:
        """Anything a worker must run: middleware, or a hook of a worker event."""
        return bool(self.middleware) or any(self.by_event[e] for e in WORKER_EVENTS)

    def emit(self, event: str, data: object) -> None:
        """Call every hook of ``event`` with ``data``, here and now, in order; a hook that
        raises is logged and the next one still runs."""
        for fn in self.by_event[event]:
            call_hook(fn, event, data)

    def _changed(self) -> None:
        self.around_enqueue = bool(self.enqueue_middleware) or self.listens("job_enqueued")


def call_hook(fn: Hook, event: str, data: object) -> None:
    """Call one hook; what it raises is logged, with the event and the hook, and goes no
    further: a hook never changes a job's outcome nor stops a worker."""
    try:
        fn(data)
    except Exception:
        log.exception("hook %s for %s raised (ignored): %r", name_of(fn), event, data)


def name_of(fn: object) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or repr(fn)
    return f"{module}.{name}" if module else name


# -- an enqueue through middleware and hooks ---------------------------------------------


def around_enqueue(
    hooks: Hooks,
    jobs: Iterable[NewJob],
    in_transaction: bool,
    store: Callable[[Iterable[NewJob]], list[JobHandle]],
) -> list[JobHandle]:
    """``store(jobs)`` through the enqueue middleware, each job carrying the headers the
    middleware set, then ``job_enqueued`` told of each new job (one whose key named an
    existing job is not new), after ``store`` committed (or, ``in_transaction``, once it
    inserted). The jobs still stream to ``store`` (``enqueue_many`` builds them as the
    backend sends them)."""
    stream = iter(jobs)
    first = next(stream, None)
    if first is None:
        return store([])
    count = len(jobs) if isinstance(jobs, Sized) else None
    info = EnqueueInfo(first.task, first.queue, count, in_transaction)
    stored: list[NewJob] = []
    rows = _carrying(itertools.chain([first], stream), info, stored, hooks)
    failure: list[BaseException] = []
    handles = through(hooks.enqueue_middleware, info, lambda: _noting(failure, store, rows))
    return _enqueued(hooks, stored, handles, failure)


async def around_enqueue_async(
    hooks: Hooks,
    jobs: Sequence[NewJob],
    store: Callable[[Sequence[NewJob]], Awaitable[list[JobHandle]]],
) -> list[JobHandle]:
    """:func:`around_enqueue` for an insert awaited on the caller's async connection (in
    its transaction): the middleware runs on the caller's event loop."""
    if not jobs:
        return await store(jobs)
    info = EnqueueInfo(jobs[0].task, jobs[0].queue, len(jobs), True)
    stored: list[NewJob] = []
    failure: list[BaseException] = []

    async def call() -> list[JobHandle]:
        try:
            return await store(list(_carrying(iter(jobs), info, stored, hooks)))
        except BaseException as exc:
            failure.append(exc)
            raise

    handles = await through_async(hooks.enqueue_middleware, info, call)
    return _enqueued(hooks, stored, handles, failure)


def _noting(
    failure: list[BaseException],
    store: Callable[[Iterable[NewJob]], list[JobHandle]],
    rows: Iterable[NewJob],
) -> list[JobHandle]:
    """``store(rows)``, keeping what it raised: a middleware must not swallow it."""
    try:
        return store(rows)
    except BaseException as exc:
        failure.append(exc)
        raise


def _enqueued(
    hooks: Hooks,
    stored: list[NewJob],
    handles: list[JobHandle] | None,
    failure: list[BaseException],
) -> list[JobHandle]:
    """The handles of an enqueue that went through, its hooks told; an enqueue that
    failed fails, even when an enqueue middleware swallowed the error (there is no job to
    hand back: only an attempt can be made to succeed by swallowing)."""
    if failure and handles is None:
        raise ConfigurationError(
            "an enqueue middleware swallowed the enqueue's error, but an enqueue that "
            f"failed cannot succeed: let it propagate ({failure[0]!r})"
        ) from failure[0]
    assert handles is not None
    _tell_enqueued(hooks, stored, handles)
    return handles


def _carrying(
    jobs: Iterator[NewJob], info: EnqueueInfo, stored: list[NewJob], hooks: Hooks
) -> Iterator[NewJob]:
    """The jobs with the headers in ``info`` (read once the middleware has set them),
    kept in ``stored`` when ``job_enqueued`` is listened for."""
    listening = hooks.listens("job_enqueued")
    for job in jobs:
        if info.headers:
            job = replace(job, payload=with_headers(job.payload, info.headers))
        if listening:
            stored.append(job)
        yield job


def _tell_enqueued(hooks: Hooks, stored: list[NewJob], handles: Sequence[JobHandle]) -> None:
    for job, handle in zip(stored, handles, strict=False):
        if handle.created:
            hooks.emit("job_enqueued", JobEvent("job_enqueued", handle.id, job.task, job.queue, 0))


# -- running a call through middleware --------------------------------------------------


def through(middleware: Sequence[Middleware], info: object, call: Callable[[], T]) -> T:
    """``call()`` wrapped by ``middleware`` (the first outermost)."""
    entered, failed = _enter(middleware, info)
    if failed is not None:  # a middleware's own code raised: the call never happens
        return _leave(entered, None, failed)  # type: ignore[return-value]
    try:
        value = call()
    except BaseException as exc:
        return _leave(entered, None, exc)  # type: ignore[return-value]
    return _leave(entered, value, None)  # type: ignore[return-value]


async def through_async(
    middleware: Sequence[Middleware], info: object, call: Callable[[], Awaitable[T]]
) -> T:
    """As :func:`through`, for a coroutine: the middleware runs on the event loop."""
    entered, failed = _enter(middleware, info)
    if failed is not None:
        return _leave(entered, None, failed)  # type: ignore[return-value]
    try:
        value = await call()
    except BaseException as exc:
        return _leave(entered, None, exc)  # type: ignore[return-value]
    return _leave(entered, value, None)  # type: ignore[return-value]


Entered = list[tuple[Middleware, Generator[None, Any, None]]]


def _enter(middleware: Sequence[Middleware], info: object) -> tuple[Entered, BaseException | None]:
    """Run each middleware up to its ``yield``, outermost first; stop at one that raises
    (or never yields) and return what it raised: those already entered will see it."""
    entered: Entered = []
    for fn in middleware:
        try:
            gen = fn(info)
            next(gen)
        except StopIteration:
            return entered, RuntimeError(f"middleware {name_of(fn)} returned without yielding")
        except BaseException as exc:
            return entered, exc
        entered.append((fn, gen))
    return entered, None


def _leave(entered: Entered, value: object, exc: BaseException | None) -> object:
    """Finish the entered middleware, innermost first: each is sent the value, or has
    the exception raised at its ``yield``. One that catches it and returns makes the call
    succeed (value None); cancellation of an async task goes on whatever they do."""
    cancelled = isinstance(exc, asyncio.CancelledError)
    for fn, gen in reversed(entered):
        try:
            if exc is None:
                gen.send(value)
            else:
                gen.throw(exc)
        except StopIteration:
            if exc is not None:
                log.debug("middleware %s swallowed %r: the call succeeds", name_of(fn), exc)
                exc, value = None, None
            continue
        except BaseException as raised:
            exc = raised
            continue
        gen.close()
        exc = RuntimeError(f"middleware {name_of(fn)} yielded more than once")
    if cancelled and not isinstance(exc, asyncio.CancelledError):
        raise asyncio.CancelledError()
    if exc is not None:
        raise exc
    return value


# -- registering, for the App (``app.on``, ``app.middleware``, ``app.enqueue_middleware``)


@overload
def on(app: App, event: EventName, fn: None = None, /) -> Callable[[H], H]: ...
@overload
def on(app: App, event: EventName, fn: H, /) -> H: ...


def on(app: App, event: EventName, fn: H | None = None, /) -> H | Callable[[H], H]:
    """Register a hook: ``@app.on("job_failed")`` above a function of one argument
    (a :class:`~sqljobs.hooks.JobEvent`, or for ``worker_started`` and
    ``worker_stopped`` a :class:`~sqljobs.hooks.WorkerLifecycle`), or
    ``app.on("job_failed", fn)``. An unknown event is a ConfigurationError naming the
    known ones. What a hook raises is logged and ignored. See docs/hooks.md for when
    each event is told and on which thread."""
    if fn is None:
        return app.hooks.decorator(event)
    app.hooks.add_hook(event, fn)
    return fn


def middleware(app: App, fn: Middleware) -> Middleware:
    """Wrap every attempt in this app's workers with ``fn``, a generator function
    given an :class:`~sqljobs.hooks.AttemptInfo` that yields once: its code before
    the ``yield`` runs as the attempt begins, after it as the attempt ends (the
    ``yield`` gives the handler's return value, or raises what the handler raised).
    The first registered is outermost. Re-raise to let the attempt fail; catching the
    exception without raising makes the attempt succeed (its result None)."""
    app.hooks.add_middleware(fn)
    return fn


def enqueue_middleware(app: App, fn: Middleware) -> Middleware:
    """Wrap every enqueue of this app with ``fn``, a generator function given an
    :class:`~sqljobs.hooks.EnqueueInfo` that yields once (the ``yield`` gives the
    list of handles). Headers it puts in ``info.headers`` before yielding are carried
    by every job of the enqueue, to attempt middleware."""
    app.hooks.add_middleware(fn, enqueue=True)
    return fn
