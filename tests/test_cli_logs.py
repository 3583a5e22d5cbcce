"""Log lines as ``sqljobs`` writes them: text for people, one JSON object per line for
collectors (the formatter is tested in-process; the worker's own lines in test_cli.py)."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from sqljobs.logs import TEXT_FORMAT, JsonFormatter, configure_logging


def record(message: str, level: int = logging.WARNING, **extra: object) -> logging.LogRecord:
    """A record as ``logger.log(level, message, extra=extra)`` makes it."""
    rec = logging.getLogger("sqljobs.worker").makeRecord(
        "sqljobs.worker", level, "worker.py", 1, message, (), None, extra=extra
    )
    rec.created = datetime(2026, 12, 3, 9, 14, 5, 125000, tzinfo=UTC).timestamp()
    rec.msecs = 125.0
    return rec


def test_a_json_line_carries_the_job_fields_present() -> None:
    rec = record("job 3 (send) attempt 2/5 failed", job_id=3, task="send", queue="mail",
                 attempt=2, worker="web-1:42", unrelated="not a job field")  # fmt: skip
    line = JsonFormatter().format(rec)
    assert "\n" not in line
    assert json.loads(line) == {
        "time": "2026-12-03T09:14:05.125+00:00",
        "level": "WARNING",
        "logger": "sqljobs.worker",
        "message": "job 3 (send) attempt 2/5 failed",
        "job_id": 3,
        "task": "send",
        "queue": "mail",
        "attempt": 2,
        "worker": "web-1:42",
    }
    plain = json.loads(JsonFormatter().format(record("worker w stopped", logging.INFO)))
    assert set(plain) == {"time", "level", "logger", "message"} and plain["level"] == "INFO"


def test_a_json_line_carries_the_traceback_and_odd_values() -> None:
    try:
        raise ValueError("no invoices\nfor acme")
    except ValueError:
        rec = record("job 3 is dead", logging.ERROR, job_id=3, task=object())
        rec.exc_info = sys.exc_info()
    out = json.loads(JsonFormatter().format(rec))
    assert out["exc"].startswith("Traceback (most recent call last):")
    assert out["exc"].rstrip().endswith("ValueError: no invoices\nfor acme")
    assert out["task"].startswith("<object object")  # not a crash of the log line


def test_a_text_line_reads_like_the_docs() -> None:
    rec = record("worker w started", logging.INFO)
    line = logging.Formatter(TEXT_FORMAT).format(rec)
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,125 INFO sqljobs\.worker: worker w started", line
    )


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root, ours = logging.getLogger(), logging.getLogger("sqljobs")
    handlers, levels = list(root.handlers), (root.level, ours.level)
    yield
    root.handlers[:] = handlers
    root.setLevel(levels[0])
    ours.setLevel(levels[1])


@pytest.mark.usefixtures("restore_logging")
def test_configure_logging_replaces_its_handler_and_sets_levels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging(logging.INFO, "text")
    configure_logging(logging.INFO, "json")  # worker --log-format json, after the global one
    logging.getLogger("sqljobs.worker").info("banner", extra={"worker": "w1"})
    logging.getLogger("sqljobs.worker").debug("not at INFO")
    logging.getLogger("psycopg.pool").info("pool chatter stays out")
    logging.getLogger("psycopg.pool").warning("a library's warning gets through")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(r["logger"], r["message"]) for r in lines] == [
        ("sqljobs.worker", "banner"),
        ("psycopg.pool", "a library's warning gets through"),
    ]
    assert lines[0]["worker"] == "w1"
