"""The dashboard's one HTML page: backlog health first (queues, paused or not), then what
needs a hand (dead jobs), what runs (with its progress), and the latest jobs (with the
results of done ones).

Times are written on the server in its own zone (``iso_local``) inside
``<time datetime="…UTC…">``, and a few lines of script rewrite them in the reader's zone:
an operator elsewhere than the server does no arithmetic, and with scripts off the page
still says which zone it shows. Everything that comes from the database or the query
string is escaped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from ..humanize import duration, iso_local, iso_utc, preview
from ..jobs import Job, JobState, QueueInfo
from ..stats import COUNT_CAP, Stats, count_text

_STYLE = (
    "body{font:14px system-ui,sans-serif;margin:2em;color:#222}"
    "table{border-collapse:collapse;margin:0 0 1.5em}td,th{border:1px solid #ccc;padding:4px 8px}"
    "th{background:#f3f3f3;text-align:left}td.n{text-align:right}form{display:inline}"
    ".warn{color:#b00}.note{padding:6px 10px;border:1px solid #ccc;background:#fafafa}"
    "p.warn{border-color:#b00}"
)

# Same shape as iso_local ("2026-12-03 09:14:05 CET"), in the browser's zone.
_SCRIPT = """<script>
const pad = (n) => String(n).padStart(2, "0");
for (const t of document.querySelectorAll("time[datetime]")) {
  const d = new Date(t.dateTime);
  const zone = new Intl.DateTimeFormat(undefined, {timeZoneName: "short"})
    .formatToParts(d).find((p) => p.type === "timeZoneName").value;
  t.textContent = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} ${zone}`;
}
</script>"""
_JOB_COLUMNS = ("id", "queue", "task", "arguments", "state", "progress / result", "attempts")
_JOB_HEAD = "".join(
    f"<th>{c}</th>" for c in (*_JOB_COLUMNS, "created", "run at", "finished", "last error", "")
)
RESULT_PREVIEW = 80
"""Characters of a done job's result shown in a table; ``/api/jobs/ID`` has all of it."""


@dataclass(frozen=True)
class View:
    """What the page may offer and what it has to say: ``read_only`` is why there are no
    buttons (None: there are); ``csrf`` is this session's token, which every form carries;
    ``logged_in``: through the login page (so a logout button is shown); ``message`` and
    ``error`` come back from an action."""

    now: float
    read_only: str | None = None
    csrf: str = ""
    logged_in: bool = False
    message: str | None = None
    error: str | None = None


def _time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return f'<time datetime="{iso_utc(ts)}">{escape(iso_local(ts))}</time>'


def _action(path: str, label: str, view: View) -> str:
    """A button, or nothing when the dashboard would refuse it (the notice says why)."""
    if view.read_only is not None:
        return ""
    return (
        f'<form method="post" action="{escape(path)}">{_csrf_field(view.csrf)}'
        f'<button type="submit">{escape(label)}</button></form>'
    )


def _csrf_field(csrf: str) -> str:
    return f'<input type="hidden" name="csrf" value="{escape(csrf)}">'


def _buttons(job: Job, view: View) -> str:
    if job.state in (JobState.DEAD, JobState.CANCELLED):
        return _action(f"/api/jobs/{job.id}/retry", "retry", view)
    if job.state in (JobState.PENDING, JobState.RUNNING):
        return _action(f"/api/jobs/{job.id}/cancel", "cancel", view)
    return ""


def _outcome(job: Job) -> str:
    """A running job's last progress report (a bar when it has a total); a done job's
    result, previewed."""
    if job.state is JobState.RUNNING and job.progress is not None:
        p = job.progress
        bar = "" if not p.total else f'<progress value="{p.done:g}" max="{p.total:g}"></progress> '
        return f"{bar}{escape(str(p))}"
    if job.state is JobState.DONE and job.result is not None:
        text = json.dumps(job.result, ensure_ascii=False, default=str)
        if len(text) > RESULT_PREVIEW:
            text = text[: RESULT_PREVIEW - 1] + "…"
        return f"<code>{escape(text)}</code>"
    return ""


def _jobs_table(jobs: list[Job], view: View) -> str:
    if not jobs:
        return "<p>none</p>"
    rows = "".join(
        f"<tr><td class=n><a href='/api/jobs/{job.id}'>{job.id}</a></td>"
        f"<td>{escape(job.queue)}</td><td>{escape(job.task)}</td>"
        f"<td><code>{escape(preview(job.args, job.kwargs))}</code></td>"
        f"<td>{escape(job.state.value)}</td><td>{_outcome(job)}</td>"
        f"<td class=n>{job.attempts}/{job.max_attempts}</td>"
        f"<td>{_time(job.created_at)}</td><td>{_time(job.run_at)}</td>"
        f"<td>{_time(job.finished_at)}</td>"
        f"<td>{escape(job.last_error or '')}</td><td>{_buttons(job, view)}</td></tr>"
        for job in jobs
    )
    return f"<table><tr>{_JOB_HEAD}</tr>{rows}</table>"


def _notices(view: View) -> str:
    out = ""
    if view.read_only is not None:
        out += f"<p class=note>{escape(view.read_only)}</p>"
    if view.error:
        out += f"<p class='note warn' role=alert>{escape(view.error)}</p>"
    if view.message:
        out += f"<p class=note role=status>{escape(view.message)}</p>"
    return out


def _queues_table(
    queues: Sequence[QueueInfo], paused_at: Mapping[str, float | None], view: View
) -> str:
    """Counts and the oldest due age per queue; whether it is paused, since when, and the
    button that pauses or resumes it."""
    states = [s.value for s in JobState]
    head = "".join(f"<th>{s}</th>" for s in states)
    rows = ""
    for q in queues:
        name = escape(q.name)
        if q.paused:
            paused = f"<span class=warn>paused</span> since {_time(paused_at.get(q.name))}"
            button = _action(f"/api/queues/{q.name}/resume", "resume", view)
        else:
            paused, button = "-", _action(f"/api/queues/{q.name}/pause", "pause", view)
        rows += (
            f"<tr><td>{name}</td><td>{paused}</td>"
            + "".join(f"<td class=n>{_count(s, q.counts.get(s, 0))}</td>" for s in states)
            + f"<td class=n>{duration(q.oldest_due_age)}</td><td>{button}</td></tr>"
        )
    return (
        f"<table><tr><th>queue</th><th>paused</th>{head}<th>oldest due</th><th></th></tr>"
        f"{rows}</table>"
    )


@dataclass(frozen=True)
class Board:
    """What the page shows, read once per request: ``paused_at`` is when each paused queue
    was paused (Unix seconds)."""

    stats: Stats
    queues: Sequence[QueueInfo]
    paused_at: Mapping[str, float | None]
    dead: list[Job]
    running: list[Job]
    recent: list[Job]


def render(board: Board, view: View) -> str:
    """The page: queues (counts, oldest due age, paused), dead jobs, running jobs with
    their progress, the latest jobs."""
    stats = board.stats
    oldest = stats.oldest_pending_age
    retry_all = _action("/api/dead/retry", "retry every dead job", view) if board.dead else ""
    paused = (
        f" · <span class=warn>paused: {escape(', '.join(stats.paused))}</span>"
        if stats.paused
        else ""
    )
    return (
        "<!doctype html><html><head><meta charset=utf-8><title>sqljobs</title>"
        f"<style>{_STYLE}</style></head><body><h1>sqljobs</h1>{_notices(view)}"
        f"<p>{stats.workers} live worker(s); oldest due job waiting: "
        f"<b{' class=warn' if oldest and oldest > 60 else ''}>{duration(oldest)}</b>{paused} · "
        f"as of {_time(view.now)} · "
        "<a href='/metrics'>metrics</a> · <a href='/api/stats'>stats JSON</a> · "
        "<a href='/api/queues'>queues JSON</a>"
        f"{_logout(view)}</p>"
        f"{_queues_table(board.queues, board.paused_at, view)}"
        f"{_limits_table(stats)}"
        f"<h2>Dead jobs</h2>{retry_all}{_jobs_table(board.dead, view)}"
        f"<h2>Running jobs</h2>{_jobs_table(board.running, view)}"
        f"<h2>Latest jobs</h2>{_jobs_table(board.recent, view)}"
        f"{_SCRIPT}</body></html>"
    )


def _limits_table(stats: Stats) -> str:
    """The busiest concurrency and rate limit keys (nothing when no limit has work)."""
    if not stats.limits:
        return ""
    rows = "".join(
        f"<tr><td>{escape(u.key)}</td><td>{escape(u.queue)}</td>"
        f"<td class=n>{u.running}{'' if u.concurrency is None else f' / {u.concurrency}'}"
        f"{' <span class=warn>full</span>' if u.full else ''}</td>"
        f"<td class=n>{u.waiting:,}</td><td class=n>{escape(u.rate or '-')}</td></tr>"
        for u in stats.limits.values()
    )
    return (
        "<h2>Limits</h2><table><tr><th>limit key</th><th>queue</th><th>running</th>"
        f"<th>waiting</th><th>rate</th></tr>{rows}</table>"
    )


def _count(state: str, n: int) -> str:
    """A count with thousands separators; a capped done/cancelled count reads "10,000+",
    with the reason on hover."""
    if count_text(state, n).endswith("+"):
        return f'<span title="counted up to {COUNT_CAP:,} per queue">{n:,}+</span>'
    return f"{n:,}"


def _logout(view: View) -> str:
    if not view.logged_in:
        return ""
    return (
        f' · <form method="post" action="/logout">{_csrf_field(view.csrf)}'
        '<button type="submit">log out</button></form>'
    )


def _shell(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>sqljobs</h1>{body}</body></html>"
    )


def login(csrf: str, error: str | None = None) -> str:
    """The login page: the token, posted with this session's CSRF token."""
    said = "" if error is None else f"<p class='note warn' role=alert>{escape(error)}</p>"
    return _shell(
        "sqljobs: log in",
        f"{said}<form method=post action=/login>{_csrf_field(csrf)}"
        '<label>token <input name="token" type="password" autofocus required></label> '
        '<button type="submit">log in</button></form>',
    )


def refusal(message: str) -> str:
    """A refused action, for a person who posted a form: why, and the way back."""
    return _shell(
        "sqljobs: refused",
        f"<p class='note warn' role=alert>{escape(message)}</p><p><a href='/'>back</a></p>",
    )
