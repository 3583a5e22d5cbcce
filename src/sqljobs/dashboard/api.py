"""What the JSON API reads and writes: request parameters checked before they reach the
database, and jobs and queues with their times as ISO 8601 UTC strings.

A parameter the database would choke on (``limit=-1`` is an error in PostgreSQL and "no
limit" in SQLite; ``limit`` past 64 bits overflows both; a NUL byte in ``queue`` is refused
by PostgreSQL) is a :class:`BadParameter` here, answered as a 400 that says what is allowed.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from starlette.datastructures import ImmutableMultiDict

from .. import validate
from ..errors import ConfigurationError
from ..humanize import iso_utc
from ..jobs import Job, JobFilter, JobState, QueueInfo, WorkerStatus, WorkflowStep
from ..schedules import ScheduleState
from ..validate import MAX_ID, check_queue_name, whole_number
from ..workflow_ops import WorkflowRun

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
"""The most jobs one ``/api/jobs`` call lists: enough to page through by ``state`` and
``queue``, small enough that one request cannot pull the whole table."""

FILTER_PARAMS = ("state", "queue", "task", "key", "text", "since", "until")
"""The query parameters that narrow jobs (``/jobs``, ``/api/jobs``, the bulk actions);
the bulk actions take ``ids`` too, a selection."""
MAX_NAME = 1000
"""The longest task name or key a filter takes (longer ones match nothing anyway)."""

_STATES = ", ".join(s.value for s in JobState)
_TIME_FIELDS = ("run_at", "created_at", "lease_until", "started_at", "finished_at", "deadline_at")
_HISTORY_TIME_FIELDS = ("started_at", "ended_at")
_RUN_TIME_FIELDS = ("wake_at", "created_at", "finished_at")
_STEP_DETAIL_TIMES = ("wake_at", "timeout_at", "retry_at", "emitted_at")


class BadParameter(ValueError):
    """A request parameter the dashboard will not use; the message names it and says what
    is allowed."""


def _digits(text: str, most: int) -> int | None:
    """``text`` as a number if it is 1 to ``most`` ASCII digits, else None: ``-1``,
    ``1_000``, `` 5`` and other digit scripts are refused rather than read some surprising
    way, and a thousand-digit string is refused before ``int`` is asked to parse it. The
    range is checked by :mod:`sqljobs.validate`, as for any caller."""
    if not (text.isascii() and text.isdigit()) or len(text) > most:
        return None
    return int(text)


def only(params: Mapping[str, str], allowed: tuple[str, ...], where: str) -> None:
    """Refuse parameters ``where`` does not take: a typo such as ``?queu=emails`` would
    otherwise be ignored, and ``POST /api/dead/retry`` would retry every queue's dead jobs."""
    for name in params:
        if name not in allowed:
            takes = ", ".join(allowed) if allowed else "no parameters"
            raise BadParameter(f"unknown parameter {name!r}: {where} takes {takes}")


def limit(params: Mapping[str, str]) -> int:
    """``limit``: how many jobs to list, 1..MAX_LIMIT (DEFAULT_LIMIT when absent)."""
    text = params.get("limit")
    if text is None:
        return DEFAULT_LIMIT
    try:
        return whole_number(_digits(text, len(str(MAX_LIMIT))), "limit", high=MAX_LIMIT)
    except ConfigurationError:
        raise BadParameter(
            f"limit must be a whole number from 1 to {MAX_LIMIT}, not {text!r}"
        ) from None


def state(params: Mapping[str, str]) -> str | None:
    """``state``: one of the job states, or None (every state) when absent."""
    text = params.get("state")
    if text is not None and text not in {s.value for s in JobState}:
        raise BadParameter(f"state must be one of {_STATES} (or left out), not {text!r}")
    return text


def queue(params: Mapping[str, str]) -> str | None:
    """``queue``: a queue name, or None (every queue) when absent."""
    text = params.get("queue")
    if text is None:
        return None
    if not text or any(unicodedata.category(c) == "Cc" for c in text):
        raise BadParameter(
            f"queue must be a queue name: not empty, no control characters "
            f"(leave it out for every queue), not {text!r}"
        )
    return text


def queue_name(text: str) -> str:
    """A queue name from the path (``/api/queues/NAME/pause``), as the app checks them."""
    try:
        return check_queue_name(text, "the path")
    except ConfigurationError as exc:
        raise BadParameter(str(exc)) from exc


def job_id(text: str) -> int:
    """A job id from the path: a positive whole number."""
    try:
        return validate.job_id(_digits(text, len(str(MAX_ID))))
    except ConfigurationError:
        raise BadParameter(f"a job id is a whole number from 1 to {MAX_ID}, not {text!r}") from None


def job_json(job: Job) -> dict[str, Any]:
    """``job`` for the JSON API, its times (also inside ``history``) as ISO 8601 UTC strings:
    a person reading the JSON sees when, and every language parses them."""
    out = job.to_dict()
    for name in _TIME_FIELDS:
        out[name] = iso_utc(out[name])
    out["history"] = [_history_entry_json(entry) for entry in job.history]
    if job.progress is not None:
        out["progress"] = {**out["progress"], "updated_at": iso_utc(job.progress.updated_at)}
    return out


def queue_json(queue: QueueInfo, paused_at: float | None) -> dict[str, Any]:
    """One queue for ``/api/queues``: ``paused_at`` an ISO 8601 UTC string (or null), the
    oldest due age in float seconds like the ages of ``/api/stats``."""
    return {
        "name": queue.name,
        "paused": queue.paused,
        "paused_at": iso_utc(paused_at) if queue.paused else None,
        "counts": dict(queue.counts),
        "oldest_due_age": queue.oldest_due_age,
    }


def _history_entry_json(entry: Any) -> Any:
    if not isinstance(entry, dict):  # a damaged row's history, shown as it is
        return entry
    out = dict(entry)
    for name in _HISTORY_TIME_FIELDS:
        if isinstance(out.get(name), int | float):
            out[name] = iso_utc(out[name])
    return out


# -- filters -------------------------------------------------------------------------

_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_AGO = re.compile(r"(\d{1,9}(?:\.\d{1,6})?)\s*(s|m|min|h|d)")
_UNIX = re.compile(r"\d{1,11}(?:\.\d{1,17})?")
_TIME_FORMS = (
    "a time: '1h' or '15m' or '2d' (that long ago), an ISO 8601 time such as "
    "'2026-12-03T08:00:00+01:00' (UTC when it gives no zone), or Unix seconds"
)


def moment(name: str, text: str, now: float) -> float:
    """``since`` or ``until`` as Unix seconds: a span ago (``1h``), an ISO 8601 time (UTC
    unless it names a zone: the server cannot know the reader's), or Unix seconds."""
    text = text.strip()
    if match := _AGO.fullmatch(text):
        return now - float(match[1]) * _UNITS[match[2]]
    if _UNIX.fullmatch(text):
        return float(text)
    try:
        when = datetime.fromisoformat(text) if text.isascii() and len(text) <= 40 else None
    except ValueError:
        when = None
    if when is None:
        raise BadParameter(f"{name} must be {_TIME_FORMS}; not {text!r}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _text(params: ImmutableMultiDict[str, Any], name: str) -> str | None:
    values = [str(v) for v in params.getlist(name)]
    if len(values) > 1:
        raise BadParameter(f"{name} is given {len(values)} times: give it once")
    return values[0] if values else None


def _name(params: ImmutableMultiDict[str, Any], name: str, what: str) -> str | None:
    """``task`` or ``key``: matched exactly, so any text but control characters."""
    text = _text(params, name)
    if text is None:
        return None
    if not text or len(text) > MAX_NAME or any(unicodedata.category(c) == "Cc" for c in text):
        raise BadParameter(
            f"{name} must be {what}: 1 to {MAX_NAME} characters, no control characters "
            f"(leave it out for any), not {text[:80]!r}"
        )
    return text


def ids(params: ImmutableMultiDict[str, Any]) -> tuple[int, ...] | None:
    """``ids``: a selection of job ids, repeated (``ids=1&ids=2``) or comma-separated."""
    values = params.getlist("ids")
    if not values:
        return None
    found: list[int] = []
    for value in values:
        for part in str(value).split(","):
            if part.strip():
                found.append(job_id(part.strip()))
    if not found:
        raise BadParameter("ids must name at least one job id (leave it out for no selection)")
    return tuple(dict.fromkeys(found))


def job_filter(
    params: ImmutableMultiDict[str, Any], now: float, *, selection: bool = False
) -> JobFilter:
    """The jobs a request names: every filter parameter given, and with ``selection``
    the ``ids`` too. Each bad value is a BadParameter that names it."""
    since, until = _text(params, "since"), _text(params, "until")
    text = _text(params, "text")
    if text is not None and (not text or "\x00" in text):
        raise BadParameter(
            f"text must be some text to find in the arguments (no NUL), not {text!r}"
        )
    try:
        return JobFilter(
            state=state(params),
            queue=queue(params),
            task=_name(params, "task", "a task name"),
            key=_name(params, "key", "a job key"),
            text=text,
            since=None if since is None else moment("since", since, now),
            until=None if until is None else moment("until", until, now),
            ids=ids(params) if selection else None,
            up_to=_up_to(params) if selection else None,
        )
    except ConfigurationError as exc:
        raise BadParameter(str(exc)) from exc


def _up_to(params: Mapping[str, str]) -> int | None:
    """``up_to``: the newest job id when a confirmation counted the jobs, so the action
    leaves out jobs enqueued since (they were not in the count the person confirmed)."""
    text = params.get("up_to")
    return None if text is None else job_id(text)


def workflow(params: ImmutableMultiDict[str, Any]) -> int | None:
    """``workflow``: the job id of a workflow, whose child jobs a list narrows to."""
    text = _text(params, "workflow")
    if text is None:
        return None
    try:
        return job_id(text)
    except BadParameter:
        raise BadParameter(
            f"workflow must be a workflow's job id, a whole number from 1 to {MAX_ID}, "
            f"not {text[:80]!r}"
        ) from None


def before(params: Mapping[str, str]) -> int | None:
    """``before``: the page's cursor, a job id (the previous page's ``next_before``)."""
    text = params.get("before")
    return None if text is None else job_id(text)


def filter_fields(filter: JobFilter) -> list[tuple[str, str]]:
    """``filter`` as query or form fields, which :func:`job_filter` reads back exactly
    (times as Unix seconds, so a relative ``1h`` is fixed at the moment it was read)."""
    fields: list[tuple[str, str]] = []
    for name in FILTER_PARAMS:
        value = getattr(filter, name)
        if value is not None:
            fields.append((name, repr(float(value)) if name in ("since", "until") else value))
    fields += [("ids", str(i)) for i in filter.ids or ()]
    if filter.up_to is not None:
        fields.append(("up_to", str(filter.up_to)))
    return fields


# -- workers and schedules -------------------------------------------------------------


def worker_json(worker: WorkerStatus, running: list[dict[str, Any]]) -> dict[str, Any]:
    """One live worker for ``/api/workers``: its times as ISO 8601 UTC strings, the
    jobs it runs (``running``, already redacted and converted) in full."""
    return {
        "id": worker.id,
        "host": worker.host,
        "pid": worker.pid,
        "queues": worker.queues,
        "concurrency": worker.concurrency,
        "started_at": iso_utc(worker.started_at),
        "last_seen": iso_utc(worker.last_seen),
        "tasks": list(worker.tasks),
        "running": running,
    }


def schedule_json(state: ScheduleState, kwargs: dict[str, Any], words: str) -> dict[str, Any]:
    """One schedule for ``/api/schedules``: as ``sqljobs schedules --json`` has it, its
    ``kwargs`` redacted, its times as ISO 8601 UTC strings, and its timing ``in_words``."""
    out = state.to_dict()
    out["kwargs"] = kwargs
    out["in_words"] = words
    for name in ("next_run_at", "last_run_at", "updated_at"):
        out[name] = iso_utc(out[name])
    return out


# -- workflows -------------------------------------------------------------------------


def run_json(run: WorkflowRun) -> dict[str, Any]:
    """One workflow for ``/api/workflows``: as ``sqljobs workflows list --json`` has it,
    its times (``created_at``, ``finished_at``, and ``wake_at``, when a waiting one is due
    again) as ISO 8601 UTC strings."""
    out = asdict(run)
    for name in _RUN_TIME_FIELDS:
        out[name] = iso_utc(out[name])
    return out


def step_json(step: WorkflowStep) -> dict[str, Any]:
    """One checkpointed step for ``/api/workflows/ID``: as ``sqljobs workflows show
    --json`` has it (``result`` the stored JSON text, ``value`` it decoded), its times and
    the times in its ``detail`` (``wake_at``, ``timeout_at``, ``retry_at``,
    ``emitted_at``) as ISO 8601 UTC strings, and ``duration`` in float seconds (null
    until it ended)."""
    out = step.to_dict()
    for name in _HISTORY_TIME_FIELDS:
        out[name] = iso_utc(out[name])
    out["detail"] = {
        key: iso_utc(value) if key in _STEP_DETAIL_TIMES and _is_time(value) else value
        for key, value in step.detail.items()
    }
    took = None
    if step.started_at is not None and step.ended_at is not None:
        took = max(0.0, step.ended_at - step.started_at)
    out["duration"] = took
    return out


def _is_time(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
