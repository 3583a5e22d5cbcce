"""The Jinja2 environment the pages are rendered with, and the few filters they share.

Autoescape is on for every template, so whatever comes from the database or the query
string is escaped unless a filter here builds the markup itself (and escapes what it puts
inside). Undefined names fail loudly: a typo in a template is a test failure, not an empty
cell. One environment per dashboard (``create_app``), none at module level.

Times are written on the server in its own zone (``iso_local``) inside
``<time datetime="…UTC…">``; ``static/dashboard.js`` rewrites them in the reader's zone,
so an operator elsewhere than the server does no arithmetic, and with scripts off the page
still says which zone it shows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from ..humanize import duration, iso_local, iso_utc, preview
from ..jobs import ENDED, RETRYABLE, UNENDED
from ..stats import COUNT_CAP, count_text

RESULT_PREVIEW = 80
"""Characters of a done job's result shown in a table; the job's page has all of it."""


def when(ts: float | None) -> Markup:
    """A moment as ``<time>``: UTC for the script to convert, the server's zone for people."""
    if ts is None:
        return Markup("-")
    return Markup('<time datetime="{}">{}</time>').format(iso_utc(ts), iso_local(ts))


def count(n: int, state: str = "") -> Markup:
    """A count with thousands separators; a capped done/cancelled count reads "10,000+",
    with the reason on hover."""
    if state and count_text(state, n).endswith("+"):
        return Markup('<span title="counted up to {:,} per queue">{:,}+</span>').format(
            COUNT_CAP, n
        )
    return Markup("{:,}").format(n)


def pretty(value: Any) -> str:
    """JSON as a person reads it: indented, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, default=str, indent=2, sort_keys=False)


def short_json(value: Any, width: int = RESULT_PREVIEW) -> str:
    """JSON on one line, cut to ``width`` characters (a table cell's preview)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def arguments(args: list[Any], kwargs: Mapping[str, Any], width: int = 40) -> str:
    """A call's (already redacted) arguments on one line: ``"acme", day="2026-12-01"``."""
    return preview(list(args), dict(kwargs), width)


def environment() -> Environment:
    """The templates of ``sqljobs/dashboard/templates``, autoescaped, strict about names."""
    env = Environment(
        loader=PackageLoader("sqljobs.dashboard", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        when=when,
        duration=duration,
        count=count,
        pretty=pretty,
        short_json=short_json,
        arguments=arguments,
    )
    # which buttons a job's state offers: the states each action changes
    env.globals["action_states"] = {"retry": RETRYABLE, "cancel": UNENDED, "delete": ENDED}
    return env
