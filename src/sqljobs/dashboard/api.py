"""What the JSON API reads and writes: request parameters checked before they reach the
database, and jobs and queues with their times as ISO 8601 UTC strings.

A parameter the database would choke on (``limit=-1`` is an error in PostgreSQL and "no
limit" in SQLite; ``limit`` past 64 bits overflows both; a NUL byte in ``queue`` is refused
by PostgreSQL) is a :class:`BadParameter` here, answered as a 400 that says what is allowed.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError
from ..humanize import iso_utc
from ..jobs import Job, JobState, QueueInfo
from ..tasks import check_queue_name

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
"""The most jobs one ``/api/jobs`` call lists: enough to page through by ``state`` and
``queue``, small enough that one request cannot pull the whole table."""

_MAX_ID = 2**63 - 1  # a job id is a signed 64-bit integer in both backends
_STATES = ", ".join(s.value for s in JobState)
_TIME_FIELDS = ("run_at", "created_at", "lease_until", "started_at", "finished_at", "deadline_at")
_HISTORY_TIME_FIELDS = ("started_at", "ended_at")


class BadParameter(ValueError):
    """A request parameter the dashboard will not use; the message names it and says what
    is allowed."""


def _whole_number(text: str, low: int, high: int) -> int | None:
    """``text`` as an integer in ``low..high``, or None. ASCII digits only, so ``-1``,
    ``1_000``, `` 5`` and other digit scripts are refused rather than read some surprising
    way, and a thousand-digit string is refused before ``int`` is asked to parse it."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(high)):
        return None
    value = int(text)
    return value if low <= value <= high else None


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
    value = _whole_number(text, 1, MAX_LIMIT)
    if value is None:
        raise BadParameter(f"limit must be a whole number from 1 to {MAX_LIMIT}, not {text!r}")
    return value


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
    value = _whole_number(text, 1, _MAX_ID)
    if value is None:
        raise BadParameter(f"a job id is a whole number from 1 to {_MAX_ID}, not {text!r}")
    return value


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


def _history_entry_json(entry: dict[str, Any]) -> dict[str, Any]:
    out = dict(entry)
    for name in _HISTORY_TIME_FIELDS:
        if isinstance(out.get(name), int | float):
            out[name] = iso_utc(out[name])
    return out
