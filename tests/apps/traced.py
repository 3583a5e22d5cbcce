"""An app with tracing on, for worker subprocesses in tests/test_tracing.py: every span
this process ends is appended, as one JSON line, to the file ``SQLJOBS_TEST_SPANS``."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import sqljobs


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(span.to_json(indent=None) + "\n" for span in spans)
        with self._lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["SQLJOBS_TEST_SPANS"])))
app = sqljobs.App(default_lease=float(os.environ.get("SQLJOBS_TEST_LEASE", "1.0")))
app.enable_tracing(provider)


@app.task(retry=sqljobs.Retry(max_attempts=2, base=0.01, cap=0.01))
def traced_double(ctx: sqljobs.JobContext, x: int) -> int:
    """Fails its first attempt; opens a span of its own, which the attempt's span holds."""
    with provider.get_tracer("tests").start_as_current_span("inside the handler"):
        if ctx.job.attempt == 1:
            raise ValueError("first attempt fails")
        return 2 * x
