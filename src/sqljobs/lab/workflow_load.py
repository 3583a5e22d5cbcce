"""What E10's worker processes run (``--app sqljobs.lab.workflow_load:app``): a workflow of
six effect steps and one ``wf.transaction()`` step, and a plain task that does the same
work from the top on every attempt.

Each effect logs ``<job> <pid> s<i>.start.<attempt>`` and ``s<i>.end.<attempt>`` to the
lab's run log (:func:`~sqljobs.lab.workload.log_run`), so a run cut short by a kill shows.
At each kill point the process logs ``kill.<point>.<attempt>`` and waits for the lab's
SIGKILL, once per point and job (a marker file beside the run log says it was reached).

Run as ``python -m sqljobs.lab.workflow_load QUEUE MAX_CRASHES POLL`` for a worker of two
supervised processes whose poison-job limit is MAX_CRASHES (``sqljobs worker`` keeps 3)
and whose fallback poll is every POLL seconds.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from ..app import App
from ..context import JobContext
from ..retry import Retry
from ..tasks import Task
from ..workflows import Workflow
from .workload import log_run

STEPS = 6
BOOK_AT = 3  # the transaction step runs after s0..s2, so the kills after it replay it
TABLE = "lab_e10_booked"
LEASE = 5.0  # the supervisor hands a killed process's job back at once: no lease wait
WAIT_FOR_KILL = 60.0
RETRY = Retry(max_attempts=30, base=0.01)  # each kill is an attempt
WORKFLOW, PLAIN = "lab_e10_workflow", "lab_e10_plain"


def kill_point(job: int, point: str, attempt: int) -> None:
    """The first time ``job`` gets here: say so in the run log and wait for the SIGKILL."""
    marker = Path(os.environ["SQLJOBS_LAB_RUNS"]).with_name(f"kill-{job}-{point}")
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return
    log_run(job, f"kill.{point}.{attempt}")
    time.sleep(WAIT_FOR_KILL)  # the lab kills this process here; if not, its counts show it


def effect(job: int, attempt: int, step: str) -> str:
    """One step's effect: started, killed once mid-way, finished, killed once before the
    step's checkpoint (the plain task has none: the kill falls at the same place)."""
    log_run(job, f"{step}.start.{attempt}")
    kill_point(job, f"{step}-effect", attempt)
    log_run(job, f"{step}.end.{attempt}")
    kill_point(job, f"{step}-checkpoint", attempt)
    return step


def book(tx: Any, job: int, attempt: int) -> None:
    """The transaction step's write, killed once before its commit."""
    log_run(job, f"book.run.{attempt}")
    mark = "?" if isinstance(tx, sqlite3.Connection) else "%s"
    tx.execute(f"INSERT INTO {TABLE} (job, attempt) VALUES ({mark}, {mark})", (job, attempt))
    kill_point(job, "book-commit", attempt)


def register(on: App) -> tuple[Task[[], list[str]], Task[[], list[str]]]:
    """The workflow and the plain task, on ``on`` (the lab's App enqueues with them, so
    their lease and retry policy are stamped on the jobs)."""

    @on.workflow(name=WORKFLOW, lease=LEASE, retry=RETRY)
    def lab_e10_workflow(wf: Workflow) -> list[str]:
        job, attempt = wf.id, wf.ctx.attempt
        done = []
        for i in range(STEPS):
            if i == BOOK_AT:
                with wf.transaction("book") as tx:
                    book(tx, job, attempt)
            done.append(wf.step(f"s{i}", effect, job, attempt, f"s{i}"))
        return done

    @on.task(name=PLAIN, lease=LEASE, retry=RETRY)
    def lab_e10_plain(ctx: JobContext) -> list[str]:
        job, attempt = ctx.job_id, ctx.attempt
        done = []
        for i in range(STEPS):
            if i == BOOK_AT:
                # a transaction of its own: ctx.transaction() would end the job here
                with ctx.backend.job_transaction() as tx:
                    book(tx, job, attempt)
            done.append(effect(job, attempt, f"s{i}"))
        return done

    return lab_e10_workflow, lab_e10_plain


app = App(default_lease=LEASE)
register(app)


def main(argv: list[str]) -> None:
    queue, max_crashes, poll = argv[0], int(argv[1]), float(argv[2])
    app.run_worker(1, [queue], processes=2, max_crashes=max_crashes, poll_interval=poll)


if __name__ == "__main__":
    main(sys.argv[1:])
