"""Times, durations and argument previews as people read them (CLI, dashboard, log lines).

Stored times are Unix seconds; what a person sees is ISO 8601 in their own zone with the
zone shown, so two columns or two hosts never disagree silently. Raw numbers stay in
``--json`` output for scripts.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, tzinfo
from typing import Any

__all__ = ["ago", "duration", "iso_local", "iso_utc", "preview", "redact_url"]


def iso_local(ts: float | None, zone: tzinfo | None = None) -> str:
    """``2026-12-03 09:14:05 CET`` in ``zone`` (default: this machine's local zone)."""
    if ts is None:
        return "-"
    moment = datetime.fromtimestamp(ts, UTC).astimezone(zone)
    name = moment.tzname() or moment.strftime("%z")
    return f"{moment:%Y-%m-%d %H:%M:%S} {name}"


def iso_utc(ts: float | None) -> str | None:
    """``2026-12-03T08:14:05.123+00:00``: an unambiguous time for JSON read by people."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def duration(seconds: float | None) -> str:
    """``850 ms``, ``12.5 s``, ``3 min 20 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if seconds is None:
        return "-"
    sign, s = ("-" if seconds < 0 else ""), abs(seconds)
    if s < 0.9995:
        text = f"{s * 1000:.0f} ms"
    elif s < 59.95:
        text = f"{s:.1f} s"
    elif s < 3600:
        text = f"{int(s // 60)} min {int(s % 60)} s"
    elif s < 86400:
        text = f"{int(s // 3600)} h {int(s % 3600 // 60)} min"
    else:
        text = f"{int(s // 86400)} d {int(s % 86400 // 3600)} h"
    return sign + text


def ago(ts: float | None, now: float) -> str:
    """``5.0 s ago`` or ``in 2 min 0 s``, relative to ``now``."""
    if ts is None:
        return "-"
    delta = now - ts
    return f"{duration(delta)} ago" if delta >= 0 else f"in {duration(-delta)}"


def preview(args: list[Any], kwargs: dict[str, Any], width: int = 40) -> str:
    """A call's arguments on one line, as JSON, cut to ``width`` characters:
    ``"acme", day="2026-12-01"``."""
    parts = [json.dumps(a, ensure_ascii=False, default=str) for a in args]
    parts += [f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***``, fit for logs and banners."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    credentials, _, host = rest.partition("@")
    user, colon, _password = credentials.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{host}"
