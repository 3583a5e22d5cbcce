"""OpenTelemetry traces for enqueues and attempts, built on the App's middleware.

One enqueue middleware opens a ``PRODUCER`` span, ``sqljobs enqueue <task>``, around the
insert and writes its context (W3C ``traceparent``/``tracestate``, through the globally
configured propagator) into the job's payload headers. One attempt middleware opens a
``CONSUMER`` span, ``sqljobs run <task>``, around the handler, which is current while
the handler runs (its own spans are children), and links it to that context: the
messaging semantic conventions say a process span SHOULD link to the message's creation
context. A job may run hours after its enqueue and many times over, so by default each
attempt starts its own trace; ``child_of_enqueue=True`` makes it a child as well, for
one trace from the request to its jobs.

``opentelemetry-api`` is imported here only, when tracing is enabled (``pip install
sqljobs[otel]``); without an SDK configured, its spans cost next to nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from importlib import metadata
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError, RetryLater
from .hooks import AttemptInfo, EnqueueInfo

if TYPE_CHECKING:
    from .app import App
    from .handles import JobHandle

log = logging.getLogger("sqljobs.tracing")

SYSTEM = "sqljobs"
"""``messaging.system`` of every span."""


def enable_tracing(
    app: App, tracer_provider: Any = None, *, child_of_enqueue: bool = False
) -> None:
    """Give ``app`` a span per enqueue and per attempt, from ``tracer_provider`` (default:
    the global one). The tracing middleware goes outermost, whenever it is enabled, so
    its spans cover any other middleware and see the attempt's final fate. Enabling it
    twice does nothing more. Raises ConfigurationError when ``opentelemetry-api`` is not
    installed."""
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise ConfigurationError(
            "tracing needs the OpenTelemetry API: pip install 'sqljobs[otel]' (and an "
            "SDK, opentelemetry-sdk, to export the spans)"
        ) from exc
    if app.hooks.traced:
        log.info("tracing is already enabled on %r", app)
        return
    try:
        version = metadata.version("sqljobs")
    except metadata.PackageNotFoundError:
        version = None
    tracer = trace.get_tracer("sqljobs", version, tracer_provider=tracer_provider)
    app.hooks.add_middleware(_producer(tracer), enqueue=True, outermost=True)
    app.hooks.add_middleware(_consumer(tracer, child_of_enqueue), outermost=True)
    app.hooks.traced = True
    app.hooks.tracer = tracer
    log.info("tracing enabled on %r (attempts %s the enqueue's trace)", app,
             "join" if child_of_enqueue else "link to")  # fmt: skip


def _producer(tracer: Any) -> Any:
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    def sqljobs_enqueue_span(info: EnqueueInfo) -> Generator[None, list[JobHandle], None]:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "publish",
            "messaging.operation.name": "enqueue",
            "messaging.destination.name": info.queue,
            "sqljobs.task": info.task,
        }
        if info.count is not None and info.count != 1:
            attributes["messaging.batch.message_count"] = info.count
        with tracer.start_as_current_span(
            f"sqljobs enqueue {info.task}", kind=SpanKind.PRODUCER, attributes=attributes
        ) as span:
            propagate.inject(info.headers)  # this span's context is the jobs' creation context
            handles = yield
            if len(handles) == 1:
                span.set_attribute("messaging.message.id", str(handles[0].id))
            elif info.count is None:
                span.set_attribute("messaging.batch.message_count", len(handles))

    return sqljobs_enqueue_span


def _consumer(tracer: Any, child_of_enqueue: bool) -> Any:
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode

    def sqljobs_attempt_span(info: AttemptInfo) -> Generator[None, Any, None]:
        parent, links = Context(), []  # an empty context: the attempt starts a trace
        if info.headers:
            creation = propagate.extract(info.headers)
            linked = trace.get_current_span(creation).get_span_context()
            if linked.is_valid:
                links.append(Link(linked))
                if child_of_enqueue:
                    parent = creation
        attributes = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "run",
            "messaging.destination.name": info.queue,
            "messaging.message.id": str(info.job_id),
            "messaging.client.id": info.worker_id,
            "sqljobs.task": info.task,
            "sqljobs.attempt": info.attempt,
        }
        with tracer.start_as_current_span(
            f"sqljobs run {info.task}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            except BaseException as exc:
                span.set_attribute("sqljobs.outcome", _fate(info, exc))
                if info.context.parked:  # a workflow's attempt that ended to wait
                    raise
                if not isinstance(exc, RetryLater):  # a retry asked for is no error
                    span.set_attribute("error.type", type(exc).__qualname__)
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                raise
            span.set_attribute("sqljobs.outcome", _fate(info, None))

    return sqljobs_attempt_span


def _fate(info: AttemptInfo, exc: BaseException | None) -> str:
    """What became of the attempt, as far as its worker knows when the handler returns:
    ``done``, ``retry``, ``dead``, ``parked`` (a workflow waits); or, when the worker had
    let go of the job first (its outcome is then discarded), ``cancelled``,
    ``timed_out``, ``released`` (shutdown) or ``lease_lost``."""
    ctx = info.context
    if ctx.parked:
        return "parked"
    if ctx.cancelled:
        return "cancelled"
    if ctx.timed_out:
        return "timed_out"
    if ctx.lease_lost:
        return "released" if ctx.shutting_down else "lease_lost"
    if exc is None:
        return "done"
    return "retry" if info.would_retry(exc) else "dead"


@contextmanager
def step_span(app: App, workflow_id: int, task: str, step: str, kind: str) -> Iterator[None]:
    """A span around one workflow step that runs (a replayed one runs nothing), a child of
    the attempt's span; nothing without tracing."""
    tracer = app.hooks.tracer
    if tracer is None:
        yield
        return
    from opentelemetry.trace import Status, StatusCode

    attributes = {
        "messaging.system": SYSTEM,
        "messaging.message.id": str(workflow_id),
        "sqljobs.task": task,
        "sqljobs.step": step,
        "sqljobs.step.kind": kind,
    }
    with tracer.start_as_current_span(
        f"sqljobs step {step}", attributes=attributes, record_exception=False,
        set_status_on_exception=False,
    ) as span:  # fmt: skip
        try:
            yield
        except Exception as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
