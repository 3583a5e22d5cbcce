"""OpenTelemetry tracing (sqljobs.tracing) on both backends: a PRODUCER span per enqueue,
a CONSUMER span per attempt linked to (or, if asked, a child of) the enqueue's span,
with the messaging attributes, also across processes: the context travels in the job."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import sqljobs
from sqljobs import App
from sqljobs.testing import stepped_worker
from tests.conftest import Spawn, wait_until


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    yield spans
    spans.shutdown()


def traced(app: App, exporter: InMemorySpanExporter, **options: Any) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app.enable_tracing(provider, **options)
    return provider


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def test_an_attempt_in_a_worker_process_links_to_the_enqueue_that_made_it(
    url: str, spawn: Spawn, exporter: InMemorySpanExporter, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    spans_file = tmp_path / "spans.jsonl"
    monkeypatch.setenv("SQLJOBS_TEST_SPANS", str(spans_file))
    app = App(url)
    provider = traced(app, exporter)
    with provider.get_tracer("tests").start_as_current_span("request") as request:
        handle = app.enqueue("traced_double", args=[21], known=False)
    spawn(app="tests.apps.traced:app")
    assert handle.result(timeout=20) == 42

    (enqueue,) = named(exporter, "sqljobs enqueue")
    assert enqueue.name == "sqljobs enqueue traced_double" and enqueue.kind is SpanKind.PRODUCER
    assert enqueue.parent is not None
    assert enqueue.parent.span_id == request.get_span_context().span_id  # the caller's span
    assert dict(enqueue.attributes or {}) == {
        "messaging.system": "sqljobs",
        "messaging.operation.type": "publish",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": "default",
        "messaging.message.id": str(handle.id),
        "sqljobs.task": "traced_double",
    }
    assert enqueue.context is not None
    trace_id, span_id = f"0x{enqueue.context.trace_id:032x}", f"0x{enqueue.context.span_id:016x}"

    def spans() -> list[dict[str, Any]]:
        return [json.loads(line) for line in spans_file.read_text().splitlines()]

    wait_until(lambda: len([s for s in spans() if s["name"].startswith("sqljobs run")]) == 2)
    runs = sorted((s for s in spans() if s["name"] == "sqljobs run traced_double"),
                  key=lambda s: s["attributes"]["sqljobs.attempt"])  # fmt: skip
    for attempt, run in enumerate(runs, start=1):
        assert run["kind"] == "SpanKind.CONSUMER" and run["parent_id"] is None
        assert [link["context"] for link in run["links"]] == [
            {"trace_id": trace_id, "span_id": span_id, "trace_state": "[]"}
        ]
        assert run["context"]["trace_id"] != trace_id  # linked, not a child: its own trace
        attributes = run["attributes"]
        assert attributes["messaging.message.id"] == str(handle.id)
        assert attributes["messaging.destination.name"] == "default"
        assert attributes["sqljobs.task"] == "traced_double"
        assert attributes["sqljobs.attempt"] == attempt
        (inside,) = [s for s in spans() if s["context"]["span_id"] != run["context"]["span_id"]
                     and s["parent_id"] == run["context"]["span_id"]]  # fmt: skip
        assert inside["name"] == "inside the handler"
    first, second = (run["attributes"] for run in runs)
    assert first["sqljobs.outcome"] == "retry" and first["error.type"] == "ValueError"
    assert runs[0]["status"]["status_code"] == "ERROR"
    assert [e["name"] for e in runs[0]["events"]] == ["exception"]
    assert second["sqljobs.outcome"] == "done" and "error.type" not in second
    assert runs[1]["status"]["status_code"] == "UNSET"


def test_attempts_join_the_enqueue_trace_when_asked_and_batches_get_one_span(
    app: App, exporter: InMemorySpanExporter
) -> None:
    provider = traced(app, exporter, child_of_enqueue=True)
    app.enable_tracing(provider)  # a second time changes nothing

    @app.task(retry=sqljobs.Retry(max_attempts=1))
    async def doomed(n: int) -> None:
        raise KeyError(n)

    @app.task
    def add(numbers: list[int | None]) -> int:
        return sum(n or 0 for n in numbers)

    handle = doomed.enqueue(1)
    batch = doomed.enqueue_many([(2,), (3,)])
    group = app.group([doomed.s(4)], then=add.s(), after_policy="always")
    with stepped_worker(app) as worker:
        for h in [handle, *batch]:
            with pytest.raises(sqljobs.JobFailed):
                worker.result(h)
        assert worker.result(group) == 0

    enqueues = named(exporter, "sqljobs enqueue")
    assert len(enqueues) == 3  # one enqueue, one enqueue_many, one group
    single, many, grouped = sorted(enqueues, key=lambda s: s.start_time or 0)
    assert (single.attributes or {})["messaging.message.id"] == str(handle.id)
    assert (many.attributes or {})["messaging.batch.message_count"] == 2
    assert (grouped.attributes or {})["messaging.batch.message_count"] == 2
    runs = named(exporter, "sqljobs run")
    assert len(runs) == 5
    by_job = {(r.attributes or {})["messaging.message.id"]: r for r in runs}
    for job_id, made_by in [(handle.id, single), (batch[1].id, many), (group.ids[0], grouped)]:
        run = by_job[str(job_id)]
        assert made_by.context is not None and run.parent is not None
        assert run.parent.span_id == made_by.context.span_id  # a child, and linked too
        assert run.links[0].context.span_id == made_by.context.span_id
        assert (run.attributes or {})["sqljobs.outcome"] == "dead"
        assert (run.attributes or {})["error.type"] == "KeyError"
        assert run.status.status_code is StatusCode.ERROR
    assert group.then is not None and grouped.context is not None
    callback = by_job[str(group.then.id)]  # its payload was rewritten: the headers stayed
    assert callback.parent is not None and callback.parent.span_id == grouped.context.span_id
    assert (callback.attributes or {})["sqljobs.outcome"] == "done"
    shown = app.get_job(group.then.id)
    assert shown is not None and shown.args == [[None]] and shown.kwargs == {}


def test_tracing_without_opentelemetry_says_what_to_install(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(sqljobs.ConfigurationError, match=r"pip install 'sqljobs\[otel\]'"):
        app.enable_tracing()
    assert not app.hooks.around_enqueue and not app.hooks.for_workers


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_async_enqueues_are_traced_in_the_callers_trace_and_transaction(
    app: App, exporter: InMemorySpanExporter
) -> None:
    import asyncio

    import psycopg

    provider = traced(app, exporter)
    enqueued: list[int] = []
    app.on("job_enqueued", lambda event: enqueued.append(event.job_id))

    @app.task
    def note(text: str) -> str:
        return text

    async def request() -> list[sqljobs.JobHandle]:
        with provider.get_tracer("tests").start_as_current_span("request"):
            async with (
                await psycopg.AsyncConnection.connect(app.url) as conn,
                conn.transaction(),
            ):
                on_conn = await note.with_options(connection=conn).enqueue_async("a")
            in_thread = await note.enqueue_async("b")  # the span goes along to the thread
        return [on_conn, in_thread]

    handles = asyncio.run(request())
    assert enqueued == [h.id for h in handles]
    with stepped_worker(app) as worker:
        assert [worker.result(h) for h in handles] == ["a", "b"]
    (request_span,) = named(exporter, "request")
    enqueues = named(exporter, "sqljobs enqueue note")
    assert len(enqueues) == 2 and request_span.context is not None
    for span in enqueues:
        assert span.parent is not None and span.parent.span_id == request_span.context.span_id
    made_by = {(s.attributes or {})["messaging.message.id"]: s for s in enqueues}
    for run in named(exporter, "sqljobs run note"):
        creation = made_by[(run.attributes or {})["messaging.message.id"]].context
        assert creation is not None and run.links[0].context.span_id == creation.span_id


def test_a_workflow_gets_a_span_per_step_run_and_a_parked_attempt_is_no_error(
    app: App, exporter: InMemorySpanExporter
) -> None:
    traced(app, exporter)
    clock = sqljobs.testing.Clock()
    app.clock = clock

    @app.workflow
    def flow(wf: sqljobs.Workflow) -> int:
        a = wf.step("a", lambda: 1)
        wf.sleep(60)
        return a + wf.step("b", lambda: 2)

    handle = flow.enqueue()
    app.run_until_empty(clock=clock)
    assert handle.result(timeout=1) == 3
    runs = sorted(named(exporter, "sqljobs run"), key=lambda s: s.start_time or 0)
    assert [(r.attributes or {})["sqljobs.outcome"] for r in runs] == ["parked", "done"]
    assert all(r.status.status_code is not StatusCode.ERROR for r in runs)
    steps = sorted(named(exporter, "sqljobs step"), key=lambda s: s.start_time or 0)
    assert [s.name for s in steps] == ["sqljobs step a", "sqljobs step b"], "a once, not replayed"
    for step, run in zip(steps, runs, strict=True):
        assert step.parent is not None and run.context is not None
        assert step.parent.span_id == run.context.span_id
