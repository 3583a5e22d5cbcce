"""Log lines as the command line writes them: text for people, JSON lines for collectors.

Standard :mod:`logging` only: an application that configures logging itself keeps
control, and ``configure_logging`` is what ``sqljobs`` (the command) calls.

Loggers, all under ``sqljobs`` (set that one's level to see or hide them all):

- ``sqljobs.worker``: the start-up banner, attempts that failed (WARNING with the next
  retry; ERROR with the traceback when the job is dead), leases lost, jobs released at
  shutdown, and the stop summary.
- ``sqljobs.supervisor``: ``worker --processes N``, its children's crashes and restarts.
- ``sqljobs.reaper``, ``sqljobs.scheduler``: the maintenance services run by workers:
  lease expiries, jobs whose worker crashed, poison jobs, missed schedule ticks.
- ``sqljobs.postgres``: the PostgreSQL backend (lost LISTEN connections, reconnects).
- ``sqljobs.dashboard``: kept for the dashboard, which logs nothing of its own yet
  (uvicorn logs its requests under ``uvicorn``).

Log lines about one job carry ``job_id``, ``task``, ``queue``, ``attempt`` and, where
known, ``worker`` as ``extra`` fields: the JSON format writes them as keys, so a collector
can filter by job without parsing messages.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, Literal

from .humanize import iso_utc

__all__ = ["JOB_FIELDS", "JsonFormatter", "configure_logging"]

JOB_FIELDS = ("job_id", "task", "queue", "attempt", "worker")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

LogFormat = Literal["text", "json"]


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (ISO 8601, UTC), ``level``, ``logger``,
    ``message``, the job fields present on the record, and ``exc`` (the traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": iso_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in JOB_FIELDS:
            if name in record.__dict__:
                out[name] = record.__dict__[name]
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """Ours, so a second call replaces it instead of doubling every line."""


def configure_logging(level: int, fmt: LogFormat) -> None:
    """Send log lines to stderr: ``sqljobs`` loggers from ``level``, other libraries'
    from WARNING (the PostgreSQL pool's INFO lines would drown a worker's own).

    Calling it again (``worker --log-format``) replaces the handler it installed.
    """
    handler = _Handler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(level, logging.WARNING))
    logging.getLogger("sqljobs").setLevel(level)
