"""The dashboard's HTML pages: what each one reads through the App, handed to its template.

Overview (``/``), Jobs (``/jobs``), a job (``/jobs/ID``), Workflows (``/workflows``), a
workflow's timeline (``/workflows/ID``), Queues, Schedules and Workers.
Each read happens on every request (and every live refresh), so whatever a page shows
agrees with ``sqljobs stats`` and the JSON. No SQL here: everything goes through the App
facade, so both backends serve every page.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from cronsim import CronSim, CronSimError
from jinja2 import Environment

from ..app import App
from ..cron import zone
from ..errors import ConfigurationError
from ..humanize import duration
from ..jobs import (
    ENDED,
    RETRYABLE,
    UNENDED,
    Job,
    JobCount,
    JobFilter,
    JobPage,
    JobState,
    WorkerStatus,
)
from ..limits import queue_limit_records
from ..rollup import replacement_counts, replacements_text
from ..schedules import ScheduleState
from . import charts, flows
from .api import filter_fields
from .reads import paused_at, queue_infos, redacted, redacted_kwargs, redacted_steps

NAV = (
    ("/", "Overview"),
    ("/jobs", "Jobs"),
    ("/queues", "Queues"),
    ("/schedules", "Schedules"),
    ("/workers", "Workers"),
)
WORKFLOWS_LINK = ("/workflows", "Workflows")
"""In the navigation after Jobs when the App registers a workflow (``@app.workflow``)."""
REFRESH_MS = 5000
"""How often a page's live region is fetched again (``static/dashboard.js``)."""
DEFAULT_ALERT_AGE = 60.0
"""Seconds the oldest due job may wait before the overview shows its age as an alert."""
OVERVIEW_JOBS = 10
"""Running and dead jobs the overview lists (the Jobs page has them all)."""
PAGE_SIZE = 50
"""Jobs a page of ``/jobs`` lists."""
BULK_VERBS = {
    "retry": ("Retry", RETRYABLE),
    "cancel": ("Cancel", UNENDED),
    "delete": ("Delete", ENDED),
}
"""Each bulk action: its button's label and the states of the jobs it changes."""
_STATES = [s.value for s in JobState]


@dataclass(frozen=True)
class View:
    """What a page may offer and what it has to say: ``read_only`` is why there are no
    buttons (None: there are); ``csrf`` is this session's token, which every form carries;
    ``logged_in``: through the login page (so a log out button is shown); ``message`` and
    ``error`` come back from an action; ``back`` is this page's own address, where its
    forms' actions return; ``root``, the prefix the dashboard is mounted under, which every
    link on the page starts with."""

    now: float
    read_only: str | None = None
    csrf: str = ""
    logged_in: bool = False
    message: str | None = None
    error: str | None = None
    back: str = "/"
    root: str = ""


@dataclass(frozen=True)
class Chart:
    """One inline SVG chart and the sentence under it."""

    svg: str
    caption: str


@dataclass(frozen=True)
class Pages:
    """Renders the pages of one dashboard over ``app``."""

    app: App
    env: Environment
    alert_age: float = DEFAULT_ALERT_AGE

    def render(
        self,
        template: str,
        view: View,
        *,
        title: str,
        section: str,
        live: bool = True,
        **context: Any,
    ) -> str:
        """``template`` in the layout: navigation, notices, the live region."""
        return self.env.get_template(template).render(
            nav=self._nav(),
            title=title,
            section=section,
            view=view,
            back=view.back,
            refresh_ms=REFRESH_MS if live else 0,
            states=_STATES,
            **context,
        )

    def _nav(self) -> tuple[tuple[str, str], ...]:
        if not any(task.is_workflow for task in self.app.tasks.values()):
            return NAV
        return (*NAV[:2], WORKFLOWS_LINK, *NAV[2:])

    # -- overview ---------------------------------------------------------------------

    def overview(self, view: View) -> str:
        """Counts by queue and state, the oldest due age against the alert threshold,
        the last hour's throughput and failures, paused queues, live workers, and the
        jobs that run or need a hand."""
        app = self.app
        stats = app.stats()
        oldest = stats.oldest_pending_age
        return self.render(
            "overview.html",
            view,
            title="Overview",
            section="/",
            stats=stats,
            queues=queue_infos(app, stats),
            paused_at=paused_at(app),
            age_alert=oldest is not None and oldest > self.alert_age,
            alert_age=self.alert_age,
            workers_live=stats.workers,
            workers=self._workers(),
            charts=self._charts(),
            overview_jobs=OVERVIEW_JOBS,
            running=self._jobs(JobFilter(state="running"), OVERVIEW_JOBS).jobs,
            dead=self._jobs(JobFilter(state="dead"), OVERVIEW_JOBS).jobs,
        )

    def _charts(self) -> list[Chart]:
        """The last hour, a bar a minute: attempts done, and attempts failed (retried or
        dead, lease expired, worker crashed), from the rollup the workers keep."""
        minutes = self.app.throughput(60)
        done = [m.done for m in minutes]
        failed = [m.failed for m in minutes]
        return [
            Chart(
                charts.bars(minutes, done, "done per minute", "done"),
                f"Done per minute, last hour: {sum(done):,} in all",
            ),
            Chart(
                charts.bars(minutes, failed, "failed per minute", "failed"),
                f"Failed attempts per minute, last hour: {sum(failed):,} in all",
            ),
        ]

    # -- jobs -------------------------------------------------------------------------

    def _jobs(self, filter: JobFilter, limit: int, before: int | None = None) -> JobPage:
        page = self.app.find_jobs(filter, before=before, limit=limit)
        return JobPage([redacted(self.app, job) for job in page.jobs], page.next_before)

    def jobs(
        self,
        view: View,
        filter: JobFilter,
        before: int | None,
        query: list[tuple[str, str]],
        workflow: int | None = None,
    ) -> str:
        """A page of the jobs matching ``filter`` (newest first, from ``before``), the
        filter form, and the bulk actions on a selection or on every match; with
        ``workflow``, the filter holds that workflow's child jobs (``ids``)."""
        page = self._jobs(filter, PAGE_SIZE, before)
        matching = self.app.count_jobs(filter)
        filtered = filter != JobFilter()
        return self.render(
            "jobs.html",
            view,
            title="Jobs",
            section="/jobs",
            form=dict(query),
            page=page,
            page_size=PAGE_SIZE,
            matching=matching,
            filtered=filtered,
            next_url=_jobs_url(query, page.next_before) if page.next_before else None,
            first_url=_jobs_url(query, None) if before is not None else None,
            bulk=BULK_VERBS,
            filter_fields=filter_fields(filter),
            workflow=workflow,
        )

    def confirm(self, view: View, verb: str, filter: JobFilter) -> str:
        """The question a bulk action asks first, "Cancel 100 jobs?": how many jobs it
        would change, and the button that does it (or why there is nothing to do)."""
        label, states = BULK_VERBS[verb]
        newest = self.app.find_jobs(limit=1).jobs
        count = self.affected(verb, filter)  # as of now: no job is newer than ``newest``
        if newest and filter.ids is None:  # what is confirmed is what was counted
            filter = replace(filter, up_to=newest[0].id)
        jobs = "job" if count.n == 1 and not count.capped else "jobs"
        if count.capped:  # stopped early: at least so many, maybe many more
            amount = f"at least {count.n:,}" if count.n else "all the matching"
        else:
            amount = f"{count.n:,}"
        return self.render(
            "confirm.html",
            view,
            title=f"{label} {amount} {jobs}?",
            section="/jobs",
            live=False,
            verb=verb,
            label=label,
            acts_on=states,
            count=count,
            fields=filter_fields(filter),
            filter_words=filter.describe(),
            action_label=f"{label} {amount} {jobs}",
        )

    def affected(self, verb: str, filter: JobFilter) -> JobCount:
        """How many jobs ``verb`` would change: the matches in the states it acts on."""
        _, states = BULK_VERBS[verb]
        if filter.by_state_and_queue_only():
            # one stats read answers every state at once (count_jobs would read it per state)
            stats = self.app.stats()
            queues = [filter.queue] if filter.queue is not None else list(stats.counts)
            pairs = [(q, s) for q in queues for s in filter.only(states)]
            return JobCount(
                sum(stats.counts.get(q, {}).get(s, 0) for q, s in pairs),
                any(stats.is_capped(s, q) for q, s in pairs),
            )
        total, capped = 0, False
        for state in filter.only(states):
            found = self.app.count_jobs(replace(filter, state=state))
            total, capped = total + found.n, capped or found.capped
        return JobCount(total, capped)

    def job(self, view: View, job_id: int) -> str | None:
        """One job in full: arguments, result, progress, every attempt, why it waits, its
        parents and children, and what may be done with it. None: no such job."""
        found = self.app.get_job(job_id)
        if found is None:
            return None
        job = redacted(self.app, found)
        steps = flows.steps_of(self.app, found)
        return self.render(
            "job.html",
            view,
            title=f"Job {job.id}",
            section="/jobs",
            job=job,
            reason=self.app.waiting_reason(found),
            attempts=[*(_attempt(entry) for entry in job.history), *_current_attempt(job)],
            children=self.app.job_children(job.id),
            task_known=job.task in self.app.tasks,
            steps=None if steps is None else len(steps),
            workflow_children=None if steps is None else len(flows.child_ids(steps)),
            part_of=flows.parent_of(job),
        )

    # -- workflows --------------------------------------------------------------------

    def workflows(self, view: View, state: str | None) -> str:
        """The App's workflows, newest first (of ``state`` only, when given): each one's
        state, steps, and what a waiting one waits for."""
        app = self.app
        runs = app.workflows(state=state, limit=PAGE_SIZE)
        return self.render(
            "workflows.html",
            view,
            title="Workflows",
            section=WORKFLOWS_LINK[0],
            runs=runs,
            state=state,
            registers=any(task.is_workflow for task in app.tasks.values()),
            page_size=PAGE_SIZE,
        )

    def workflow(self, view: View, job_id: int) -> str | flows.Missing:
        """A workflow's timeline: each checkpointed step with its kind, state, duration,
        result or error, what a waiting one waits for, and its child jobs; the workflow's
        own state and why it waits. Or why there is none to show."""
        app = self.app
        loaded = flows.load(app, job_id)
        if isinstance(loaded, flows.Missing):
            return loaded
        found, stored = loaded
        steps = redacted_steps(app, stored)
        return self.render(
            "workflow.html",
            view,
            title=f"Workflow {job_id}",
            section=WORKFLOWS_LINK[0],
            job=redacted(app, found),
            reason=app.waiting_reason(found),
            rows=flows.step_rows(app, steps),
            children=len(flows.child_ids(steps)),
            task_known=found.task in app.tasks,
        )

    # -- queues, schedules, workers -----------------------------------------------------

    def queues(self, view: View) -> str:
        """Every queue: counts, oldest due age, paused or not (and since when), its limits."""
        app = self.app
        stats = app.stats()
        infos = queue_infos(app, stats)
        limits = {
            r.queue: r for r in queue_limit_records(app.queue_limits, (q.name for q in infos))
        }
        return self.render(
            "queues.html",
            view,
            title="Queues",
            section="/queues",
            queues=infos,
            paused_at=paused_at(app),
            limits=limits,
            usages=list(stats.limits.values()),
        )

    def schedules(self, view: View) -> str:
        """Every schedule: its timing in words and as written, zone, next and last run,
        last outcome, paused or not."""
        rows = [self._schedule_row(state, view.now) for state in self.app.list_schedules()]
        return self.render(
            "schedules.html", view, title="Schedules", section="/schedules", schedules=rows
        )

    def _schedule_row(self, state: ScheduleState, now: float) -> dict[str, Any]:
        s = state.schedule
        return {
            "state": state,
            "name": s.name,
            "words": in_words(state, now),
            "kwargs": redacted_kwargs(self.app, s.task, s.kwargs),
        }

    def workers(self, view: View) -> str:
        """Every live worker and what it is running right now."""
        replaced = replacement_counts(self.app.metric_totals())
        return self.render(
            "workers.html", view, title="Workers", section="/workers", workers=self._workers(),
            replaced=replacements_text(replaced) if any(replaced.values()) else None,
        )  # fmt: skip

    def _workers(self) -> list[WorkerStatus]:
        return [
            replace(w, running=[redacted(self.app, job) for job in w.running])
            for w in self.app.workers()
        ]

    # -- the login page and refusals ---------------------------------------------------

    def login(self, view: View) -> str:
        return self.render("login.html", view, title="Log in", section="", live=False)

    def refusal(self, view: View, reason: str, back: str = "/", title: str = "Refused") -> str:
        """A refused action or a bad address, for a person: why, and the way back."""
        return self.render(
            "refusal.html",
            view,
            title=title,
            section="",
            live=False,
            reason=reason,
            way_back=back,
        )


def _attempt(entry: Any) -> dict[str, Any]:
    """One history entry as the attempts table shows it; keys not known here are kept
    as ``key=value`` notes, so nothing a newer worker wrote is hidden."""
    if not isinstance(entry, dict):
        return {"attempt": "-", "outcome": "-", "worker": None, "started_at": None,
                "took": None, "error": str(entry), "notes": []}  # fmt: skip
    started, ended = _number(entry.get("started_at")), _number(entry.get("ended_at"))
    known = {"attempt", "outcome", "started_at", "ended_at", "worker", "error", "traceback",
             "exception"}  # fmt: skip
    notes = [
        f"retry in {duration(_number(value))}" if key == "retry_in" else f"{key}={value}"
        for key, value in entry.items()
        if key not in known
    ]
    return {
        "attempt": entry.get("attempt", "-"),
        "outcome": entry.get("outcome", "-"),
        "worker": entry.get("worker"),
        "started_at": started,
        "took": ended - started if started is not None and ended is not None else None,
        "error": entry.get("error"),
        "notes": notes,
        "traceback": entry.get("traceback"),
    }


def _current_attempt(job: Job) -> list[dict[str, Any]]:
    """The attempt that is running, or the one that succeeded: the history keeps only
    attempts that ended otherwise, and the job's row tells this one."""
    if job.state not in (JobState.RUNNING, JobState.DONE) or job.started_at is None:
        return []
    ended = job.finished_at if job.state is JobState.DONE else None
    return [
        {
            "attempt": job.attempts,
            "outcome": job.state.value,
            "worker": job.worker,
            "started_at": job.started_at,
            "took": None if ended is None else ended - job.started_at,
            "error": None,
            "notes": [],
            "traceback": None,
        }
    ]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def in_words(state: ScheduleState, now: float) -> str:
    """``At 03:00 on Monday through Friday`` for cron; ``every 5.0 s`` for an interval."""
    s = state.schedule
    if s.cron is None:
        return f"every {duration(s.every)}"
    try:
        return str(CronSim(s.cron, datetime.fromtimestamp(now, zone(s.tz))).explain())
    except (CronSimError, ConfigurationError, ValueError):
        return s.cron  # a row that no longer parses still lists


def _jobs_url(query: list[tuple[str, str]], before: int | None) -> str:
    """``/jobs`` with this page's filter, from ``before`` (None: the newest page)."""
    kept = [(k, v) for k, v in query if k != "before"]
    if before is not None:
        kept.append(("before", str(before)))
    return "/jobs" + ("?" + urlencode(kept) if kept else "")
