"""How the command line lays out jobs, queues, schedules and stats for a person.

Tables fit the terminal (80 columns when it is not one): names stay whole, free text
(arguments, errors) is cut with an ellipsis, and when even that does not fit the least
useful columns are left out and named below the table. Times are ISO 8601 in this
machine's zone with the zone shown; raw numbers are for ``--json``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import click
from rich import box
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from ..humanize import ago, duration, iso_local, preview
from ..jobs import Job, JobState, QueueInfo, WorkerStatus
from ..schedules import ScheduleState
from ..stats import LimitUsage, Stats, count_text

FLEX_MIN = 10  # the narrowest a cut column may get and still say something
GAP = 2  # characters between two columns (padding and divider)


@dataclass(eq=False)  # a column is itself, whatever its cells
class Column:
    """One column: ``keep`` ranks it (0 is never left out; higher goes first when the
    terminal is narrow); a ``flex`` column is cut to the room left, others stay whole."""

    header: str
    cells: list[str]
    keep: int
    flex: bool = False
    justify: Literal["left", "right"] = "left"

    @property
    def natural(self) -> int:
        return max([cell_len(self.header), *(cell_len(c) for c in self.cells)])

    @property
    def least(self) -> int:
        return min(self.natural, FLEX_MIN) if self.flex else self.natural


def fit_table(columns: Sequence[Column], width: int) -> tuple[Table, list[str]]:
    """A table no wider than ``width``, and the headers of the columns left out."""
    kept = list(columns)
    while len(kept) > 1 and sum(c.least for c in kept) + GAP * (len(kept) - 1) > width:
        droppable = [c for c in kept if c.keep > 0]
        if not droppable:
            break  # rich squeezes what is left
        kept.remove(max(droppable, key=lambda c: c.keep))
    room = width - GAP * (len(kept) - 1) - sum(c.natural for c in kept if not c.flex)
    widths = _share(room, [c for c in kept if c.flex])
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for c in kept:
        table.add_column(
            c.header,
            justify=c.justify,
            no_wrap=True,
            overflow="ellipsis",
            width=widths.get(id(c)),
            min_width=None if c.flex else c.natural,
        )
    for row in zip(*(c.cells for c in kept), strict=True):
        table.add_row(*(Text(cell) for cell in row))
    return table, [c.header for c in columns if c not in kept]


def _share(room: int, flex: list[Column]) -> dict[int, int]:
    """Share ``room`` among the cut columns: narrow ones get what they need, the rest
    split what is left evenly."""
    out: dict[int, int] = {}
    for i, c in enumerate(sorted(flex, key=lambda c: c.natural)):
        fair = room // (len(flex) - i)
        out[id(c)] = max(c.least, min(c.natural, fair))
        room -= out[id(c)]
    return out


def table_parts(columns: Sequence[Column], width: int, empty: str) -> list[RenderableType]:
    """The fitted table (or ``empty`` when there are no rows) and what it left out."""
    if not columns or not columns[0].cells:
        return [Text(empty)]
    table, hidden = fit_table(columns, width)
    if not hidden:
        return [table]
    return [table, Text(f"not shown at this width: {', '.join(hidden)} (see --json)")]


def show(*parts: RenderableType) -> None:
    """Print to stdout as wide as the terminal (``COLUMNS``, or 80 when piped), without
    the trailing blanks rich pads lines with."""
    console = Console(highlight=False)
    with console.capture() as captured:
        for part in parts:
            console.print(part)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def width() -> int:
    return Console().width


def one_line(text: str | None) -> str:
    """Free text (an error, a worker id) on one line, for a table cell."""
    return " ".join((text or "").split()) or "-"


# -- jobs ------------------------------------------------------------------------------


def jobs_columns(jobs: Sequence[Job]) -> list[Column]:
    """The jobs table; a progress column only when a running job has reported some (a
    finished job's last report says little a state does not)."""
    columns = [
        Column("id", [str(j.id) for j in jobs], 0, justify="right"),
        Column("task", [j.task for j in jobs], 0),
        Column("queue", [j.queue for j in jobs], 5),
        Column("state", [j.state.value for j in jobs], 1),
    ]
    progress = [str(j.progress) if _running_progress(j) else "-" for j in jobs]
    if any(cell != "-" for cell in progress):
        columns.append(Column("progress", progress, 3, flex=True))
    columns += [
        Column("attempts", [f"{j.attempts}/{j.max_attempts}" for j in jobs], 4),
        Column("run at", [iso_local(j.run_at) for j in jobs], 3),
        Column("args", [preview(j.args, j.kwargs, 200) or "-" for j in jobs], 2, flex=True),
        Column("last error", [one_line(j.last_error) for j in jobs], 6, flex=True),
    ]
    return columns


def _running_progress(job: Job) -> bool:
    return job.state is JobState.RUNNING and job.progress is not None


def job_parts(
    job: Job,
    width: int,
    note: str | None = None,
    stores_result: bool = True,
    children: Sequence[int] = (),
) -> list[RenderableType]:
    """``jobs show``: the job's fields, its attempt history, and its last traceback.
    ``note`` says why a pending job is not running yet, when the app knows;
    ``stores_result`` is False when the task is known not to store its return value;
    ``children`` are the jobs enqueued after it."""
    now = time.time()
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold", no_wrap=True)
    fields.add_column(overflow="fold")
    rows = _fields(job, now, note, stores_result)
    if children:
        rows.append(("then", ", ".join(map(str, children))))
    for label, value in rows:
        fields.add_row(label, Text(value))
    parts: list[RenderableType] = [fields]
    if job.history:
        parts.append(Text("\nattempt history", style="bold"))
        parts += table_parts(history_columns(job.history), width, "")
    if job.last_traceback:
        parts.append(Text("\nlast traceback", style="bold"))
        parts.append(Text(job.last_traceback.rstrip()))
    return parts


def history_columns(history: Sequence[Any]) -> list[Column]:
    rows = [_history_row(entry) for entry in history]
    headers = ("attempt", "outcome", "started", "duration", "worker", "error")
    keeps, flex = (0, 0, 1, 3, 4, 2), (False, False, False, False, True, True)
    return [
        Column(h, [r[i] for r in rows], keeps[i], flex[i], "right" if i == 0 else "left")
        for i, h in enumerate(headers)
    ]


def _fields(job: Job, now: float, note: str | None, stores_result: bool) -> list[tuple[str, str]]:
    state = job.state.value
    if job.state is JobState.RUNNING and job.lease_until is not None:
        state += f" (lease until {iso_local(job.lease_until)})"
    if note:  # "waiting for 2 parents ..." names the state itself
        state = note if note.startswith(f"{state} ") else f"{state}: {note}"
    counts = [
        f"{label} {n}"
        for label, n in (
            ("errors", job.errors),
            ("lease expiries", job.lease_expiries),
            ("crashes", job.crashes),
        )
        if n
    ]
    attempts = f"{job.attempts}/{job.max_attempts}" + (f" ({', '.join(counts)})" if counts else "")
    rows = [
        ("id", str(job.id)),
        ("task", job.task),
        ("queue", job.queue),
        ("state", state),
        ("attempts", attempts),
    ]
    if job.progress is not None:
        rows.append(("progress", f"{job.progress}; reported {_when(job.progress.updated_at, now)}"))
    if job.parents:
        ids = ", ".join(map(str, job.parents))
        rows.append(("after", f"{ids} (policy {job.after_policy})"))
    rows += [
        ("key", f"{job.key} (scope: {job.key_scope})" if job.key else _released(job)),
    ]
    if job.debounced:
        times = f"{job.debounced} time{'' if job.debounced == 1 else 's'}"
        rows.append(("debounced", f"{times} (arguments replaced, start moved)"))
    rows += [
        ("priority", str(job.priority)),
        ("run at", _when(job.run_at, now)),
        ("created", _when(job.created_at, now)),
        ("started", _when(job.started_at, now)),
        ("finished", _when(job.finished_at, now)),
    ]
    if job.deadline_at is not None:
        rows.append(("deadline", _when(job.deadline_at, now)))
    rows += [
        ("worker", job.worker or "-"),
        ("args", _pretty(job.args)),
        ("kwargs", _pretty(job.kwargs)),
        ("result", _result(job, stores_result)),
        ("last error", job.last_error or "-"),
    ]
    return rows


def _result(job: Job, stores_result: bool) -> str:
    """The stored return value; for a done job without one, why there may be none (the
    task returned None, or does not store results)."""
    if job.result is not None:
        return _pretty(job.result)
    if job.state is not JobState.DONE:
        return "-"
    return "(none)" if stores_result else "(not stored: the task has store_result=False)"


def _when(ts: float | None, now: float) -> str:
    return "-" if ts is None else f"{iso_local(ts)} ({ago(ts, now)})"


def _pretty(value: Any) -> str:
    """JSON on one line when short, indented when not."""
    flat = json.dumps(value, ensure_ascii=False, default=str)
    return flat if len(flat) <= 60 else json.dumps(value, ensure_ascii=False, default=str, indent=2)


KNOWN_HISTORY_KEYS = {"attempt", "outcome", "started_at", "ended_at", "worker", "error"}


def _history_row(entry: Any) -> list[str]:
    """attempt, outcome, started, duration, worker, error: whatever the entry holds, any
    key not known here is added to the error cell as ``key=value``."""
    if not isinstance(entry, dict):
        return ["-", "-", "-", "-", "-", one_line(str(entry))]
    started, ended = _number(entry.get("started_at")), _number(entry.get("ended_at"))
    took = ended - started if started is not None and ended is not None else None
    extra = [
        "retry in " + duration(_number(value)) if key == "retry_in" else f"{key}={value}"
        for key, value in entry.items()
        if key not in KNOWN_HISTORY_KEYS
    ]
    error = "; ".join(t for t in (entry.get("error"), *extra) if t)
    return [
        str(entry.get("attempt", "-")),
        str(entry.get("outcome", "-")),
        iso_local(started),
        duration(took),
        one_line(entry.get("worker")),
        one_line(error),
    ]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


# -- schedules and stats -----------------------------------------------------------------


def schedules_columns(rows: Sequence[ScheduleState]) -> list[Column]:
    """Times in this machine's zone, like every other time shown; the schedule's own zone
    (in which its cron expression reads) in a column of its own. A paused schedule has no
    next run: resuming it picks the next tick after that moment."""
    return [
        Column("name", [r.name for r in rows], 0),
        Column("expression", [_timing(r) for r in rows], 2),
        Column("tz", [r.schedule.tz if r.schedule.cron else "-" for r in rows], 3),
        Column("next run", ["paused" if r.paused else iso_local(r.next_run_at) for r in rows], 1),
        Column("last run", [iso_local(r.last_run_at) for r in rows], 5),
        Column("last outcome", [_outcome(r) for r in rows], 4),
    ]


def _timing(state: ScheduleState) -> str:
    s = state.schedule
    return s.cron if s.cron is not None else f"every {s.every:g} s"


def _outcome(state: ScheduleState) -> str:
    if state.last_outcome is None:
        return "-"
    job = state.last_job_id
    return state.last_outcome if job is None else f"{state.last_outcome} #{job}"


def stats_columns(st: Stats) -> list[Column]:
    queues = sorted(st.counts)
    paused = set(st.paused)
    columns = [Column("queue", [f"{q} (paused)" if q in paused else q for q in queues], 0)]
    columns += [
        Column(s.value, [st.count_text(s.value, q) for q in queues], 1, justify="right")
        for s in JobState
    ]
    ages = [duration(st.oldest_pending_age_by_queue.get(q)) for q in queues]
    columns.append(Column("oldest pending", ages, 2, justify="right"))
    return columns


def limits_columns(st: Stats) -> list[Column]:
    """``sqljobs stats``: the busiest limit keys, their running jobs against the limit,
    and how many due jobs wait (for a slot, the rate's window, or a free worker)."""
    usages = list(st.limits.values())
    return [
        Column("limit key", [u.key for u in usages], 0, flex=True),
        Column("queue", [u.queue for u in usages], 2),
        Column("running", [_running(u) for u in usages], 0, justify="right"),
        Column("waiting", [str(u.waiting) for u in usages], 0, justify="right"),
        Column("rate", [u.rate or "-" for u in usages], 1, justify="right"),
    ]


def _running(usage: LimitUsage) -> str:
    limit = "" if usage.concurrency is None else f"/{usage.concurrency}"
    return f"{usage.running}{limit}" + (" full" if usage.full else "")


def queues_columns(
    queues: Sequence[QueueInfo], paused_at: Mapping[str, float | None], now: float
) -> list[Column]:
    """``sqljobs queues``: one row a queue; a paused one says for how long (the moment
    it was paused goes below the table: :func:`paused_lines`)."""
    columns = [
        Column("queue", [q.name for q in queues], 0),
        Column("paused", [_paused(q, paused_at, now) for q in queues], 0),
    ]
    keep = {"pending": 1, "running": 1}  # the rest go first on a narrow terminal
    for state in JobState:
        counts = [count_text(state, q.counts.get(state.value, 0)) for q in queues]
        columns.append(Column(state.value, counts, keep.get(state.value, 3), justify="right"))
    ages = [duration(q.oldest_due_age) for q in queues]
    columns.append(Column("oldest due", ages, 2, justify="right"))
    return columns


def _paused(queue: QueueInfo, paused_at: Mapping[str, float | None], now: float) -> str:
    if not queue.paused:
        return "no"
    since = paused_at.get(queue.name)
    return "yes" if since is None else f"yes, {duration(max(0.0, now - since))}"


def paused_lines(queues: Sequence[QueueInfo], paused_at: Mapping[str, float | None]) -> list[str]:
    """When each paused queue was paused (in this machine's zone), and what that means."""
    lines = [
        f"{q.name} paused since {iso_local(paused_at.get(q.name))}" for q in queues if q.paused
    ]
    if lines:
        lines.append("workers take no new jobs from a paused queue: sqljobs queues resume NAME")
    return lines


def workers_columns(statuses: Sequence[WorkerStatus], now: float) -> list[Column]:
    """``sqljobs workers``: each live worker, how busy it is, and the jobs it runs."""
    return [
        Column("worker", [w.id for w in statuses], 0),
        Column("host", [w.host for w in statuses], 2),
        Column("pid", [str(w.pid) for w in statuses], 3, justify="right"),
        Column("queues", [", ".join(w.queues) if w.queues else "all" for w in statuses], 1),
        Column("running", [f"{len(w.running)}/{w.concurrency}" for w in statuses], 0),
        Column("up", [duration(now - w.started_at) for w in statuses], 4),
        Column("seen", [f"{duration(now - w.last_seen)} ago" for w in statuses], 5),
        Column(
            "jobs",
            [", ".join(f"{j.id} {j.task}" for j in w.running) or "-" for w in statuses],
            1,
            flex=True,
        ),
    ]


def _released(job: Job) -> str:
    if job.released_key is None:
        return "-"
    return f"{job.released_key} (released: its scope let go of it)"
