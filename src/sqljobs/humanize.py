"""Times, durations, argument previews and shared sentences as people read them (CLI,
dashboard, log lines).

Stored times are Unix seconds; what a person sees is ISO 8601 in their own zone with the
zone shown, so two columns or two hosts never disagree silently. Raw numbers stay in
``--json`` output for scripts.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, tzinfo
from typing import Any
from urllib.parse import unquote

__all__ = [
    "RUNNING_CANCELLED",
    "ago",
    "duration",
    "iso_local",
    "iso_utc",
    "preview",
    "redact_url",
    "scrub_secrets",
    "url_secrets",
]

RUNNING_CANCELLED = (
    "its worker is told to stop within a heartbeat (the handler sees ctx.cancelled), "
    "and its outcome will be discarded"
)
"""What cancelling a running job means, as the CLI and the dashboard say it."""


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
    """The URL with any password replaced by ``***``, fit for logs and banners: the one
    after the user name (up to the last ``@`` of the URL before its query, so an
    unescaped ``/`` or ``@`` in it hides no tail) and a ``password=`` or
    ``sslpassword=`` query parameter."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    before_query, mark, query = rest.partition("?")
    at = before_query.rfind("@")
    if at >= 0:
        user, colon, _password = before_query[:at].partition(":")
        before_query = f"{user}{':***' if colon else ''}{before_query[at:]}"
    query = _PASSWORD_PARAM.sub(r"\1***", query)
    return f"{scheme}://{before_query}{mark}{query}"


def url_secrets(url: str) -> list[str]:
    """The passwords written in ``url`` (as written and percent-decoded), longest first:
    what :func:`scrub_secrets` takes out of a driver's message that quotes the URL."""
    _scheme, sep, rest = url.partition("://")
    if not sep:
        return []
    before_query, _, query = rest.partition("?")
    at = before_query.rfind("@")
    found = [before_query[:at].partition(":")[2]] if at >= 0 else []
    found += [m.group(2) for m in _PASSWORD_PARAM.finditer(query)]
    found += [unquote(f) for f in found]
    return sorted({f for f in found if f}, key=len, reverse=True)


def scrub_secrets(text: str, url: str) -> str:
    """``text`` with every password of ``url`` replaced by ``***``."""
    for secret in url_secrets(url):
        text = text.replace(secret, "***")
    return text


_PASSWORD_PARAM = re.compile(r"((?:^|&)(?:ssl)?password=)([^&#]*)", re.IGNORECASE)
