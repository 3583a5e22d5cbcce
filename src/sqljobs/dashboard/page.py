"""The dashboard's one HTML page: backlog health first, then what needs a hand."""

from __future__ import annotations

from html import escape

from ..jobs import Job, JobState
from ..stats import Stats

_STYLE = (
    "body{font:14px system-ui,sans-serif;margin:2em;color:#222}"
    "table{border-collapse:collapse;margin:0 0 1.5em}td,th{border:1px solid #ccc;padding:4px 8px}"
    "th{background:#f3f3f3;text-align:left}td.n{text-align:right}form{display:inline}"
    ".warn{color:#b00}"
)


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:,.1f} s"


def _action(path: str, label: str, needs_token: bool) -> str:
    token = (
        '<input name="token" type="password" placeholder="token" size="8">' if needs_token else ""
    )
    return (
        f'<form method="post" action="{escape(path)}">{token}'
        f'<button type="submit">{escape(label)}</button></form>'
    )


def _jobs_table(jobs: list[Job], actions: str, needs_token: bool) -> str:
    if not jobs:
        return "<p>none</p>"
    rows = []
    for job in jobs:
        buttons = ""
        if "retry" in actions and job.state in (JobState.DEAD, JobState.CANCELLED):
            buttons += _action(f"/api/jobs/{job.id}/retry", "retry", needs_token)
        if "cancel" in actions and job.state in (JobState.PENDING, JobState.RUNNING):
            buttons += _action(f"/api/jobs/{job.id}/cancel", "cancel", needs_token)
        rows.append(
            f"<tr><td class=n><a href='/api/jobs/{job.id}'>{job.id}</a></td>"
            f"<td>{escape(job.queue)}</td><td>{escape(job.task)}</td>"
            f"<td>{escape(job.state.value)}</td><td class=n>{job.attempts}/{job.max_attempts}</td>"
            f"<td>{escape(job.last_error or '')}</td><td>{buttons}</td></tr>"
        )
    head = "<tr><th>id</th><th>queue</th><th>task</th><th>state</th><th>attempts</th>"
    return f"<table>{head}<th>last error</th><th></th></tr>{''.join(rows)}</table>"


def render(stats: Stats, dead: list[Job], recent: list[Job], needs_token: bool) -> str:
    """The page: counts and oldest due age per queue, dead jobs, the latest jobs."""
    states = [s.value for s in JobState]
    head = "".join(f"<th>{s}</th>" for s in states)
    rows = "".join(
        f"<tr><td>{escape(q)}</td>"
        + "".join(f"<td class=n>{by_state.get(s, 0):,}</td>" for s in states)
        + f"<td class=n>{_age(stats.oldest_pending_age_by_queue.get(q))}</td></tr>"
        for q, by_state in sorted(stats.counts.items())
    )
    oldest = stats.oldest_pending_age
    retry_all = _action("/api/dead/retry", "retry every dead job", needs_token) if dead else ""
    return (
        "<!doctype html><html><head><meta charset=utf-8><title>sqljobs</title>"
        f"<style>{_STYLE}</style></head><body><h1>sqljobs</h1>"
        f"<p>{stats.workers} live worker(s); oldest due job waiting: "
        f"<b{' class=warn' if oldest and oldest > 60 else ''}>{_age(oldest)}</b> · "
        "<a href='/metrics'>metrics</a> · <a href='/api/stats'>stats JSON</a></p>"
        f"<table><tr><th>queue</th>{head}<th>oldest due</th></tr>{rows}</table>"
        f"<h2>Dead jobs</h2>{retry_all}{_jobs_table(dead, 'retry', needs_token)}"
        f"<h2>Latest jobs</h2>{_jobs_table(recent, 'retry cancel', needs_token)}"
        "</body></html>"
    )
