"""E1: how a worker takes a job. Two statements race; one atomic statement cannot.

The broken variants run their SQL on the same ``sqljobs_jobs`` rows the library uses;
the correct one is ``Backend.claim_jobs`` and ``Backend.finish_jobs``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from ..app import App
from ..backends.base import Claim
from ..jobs import JobState, Outcome
from .common import Effects, enqueue, run_threads
from .db import Db
from .results import Progress, Result, Row, no_progress

TASK = "lab_e1"
ARTICLE = {
    "select": {"effects": 974, "duplicates": 774, "max runs": 8, "empty claims": 0,
               "statements": 1956, "time ms": 504},
    "conditional": {"effects": 200, "duplicates": 0, "max runs": 1, "empty claims": 33,
                    "statements": 682, "time ms": 146},
    "single": {"effects": 200, "duplicates": 0, "max runs": 1, "empty claims": 0,
               "statements": 408, "time ms": 113},
}  # fmt: skip


@dataclass
class Tally:
    """What one variant did."""

    effects: Effects
    statements: int = 0
    empty: int = 0
    seconds: float = 0.0

    def figures(self) -> dict[str, float | int]:
        return {
            "effects": self.effects.total,
            "duplicates": self.effects.duplicates,
            "max runs": self.effects.max_runs,
            "empty claims": self.empty,
            "statements": self.statements,
            "time ms": round(self.seconds * 1000, 1),
        }


JOBS = 200
WORKERS = 8  # threads claiming side by side
WORK = 0.002  # seconds each job's work takes

PENDING = "SELECT id FROM sqljobs_jobs WHERE queue = ? AND state = 'pending' ORDER BY id LIMIT 1"


def select_then_update(url: str, queue: str, workers: int, work: float) -> Tally:
    """Don't: read a pending id, then mark it running. Two workers read the same id."""
    tally = Tally(Effects())

    def worker(i: int) -> None:
        with Db(url) as db:
            while (job := db.value(PENDING, (queue,))) is not None:
                db.execute("UPDATE sqljobs_jobs SET state = 'running', worker = ? WHERE id = ?",
                           (f"w{i}", job))  # fmt: skip
                tally.effects.apply(job)
                time.sleep(work)
                db.execute("UPDATE sqljobs_jobs SET state = 'done' WHERE id = ?", (job,))
            tally.statements += db.statements

    tally.seconds = run_threads(workers, worker)
    return tally


def conditional_update(url: str, queue: str, workers: int, work: float) -> Tally:
    """Don't: select, then ``UPDATE ... AND state = 'pending'``. Safe, but the losers of
    each race come back empty-handed and ask again (wasted round trips)."""
    tally = Tally(Effects())

    def worker(i: int) -> None:
        with Db(url) as db:
            while (job := db.value(PENDING, (queue,))) is not None:
                won = db.execute(
                    "UPDATE sqljobs_jobs SET state = 'running', worker = ? "
                    "WHERE id = ? AND state = 'pending'",
                    (f"w{i}", job),
                ).rowcount
                if won != 1:
                    tally.empty += 1
                    continue
                tally.effects.apply(job)
                time.sleep(work)
                db.execute("UPDATE sqljobs_jobs SET state = 'done' WHERE id = ?", (job,))
            tally.statements += db.statements

    tally.seconds = run_threads(workers, worker)
    return tally


def library_claim(app: App, queue: str, workers: int, work: float, per_claim: int = 1) -> Tally:
    """sqljobs: one atomic claim statement (up to ``per_claim`` jobs), fenced completions."""
    tally = Tally(Effects())
    lock = threading.Lock()
    # the backend itself, not the App: E1 counts the claim and completion statements a
    # worker issues, so it calls them one by one as a worker does
    backend = app.backend

    def worker(i: int) -> None:
        statements = 0
        while True:
            jobs = backend.claim_jobs(Claim(f"lab-w{i}", [queue], per_claim))
            statements += 1
            if not jobs:
                # measured, as for the conditional update: a claim that came back with
                # nothing while jobs were still pending is wasted; one that found the queue
                # drained is the thread's last (the check itself is not counted)
                if app.stats().counts.get(queue, {}).get("pending", 0) == 0:
                    break
                with lock:
                    tally.empty += 1
                continue
            for job in jobs:
                tally.effects.apply(job.id)
                time.sleep(work)
                backend.finish_jobs([Outcome(job.id, job.token, JobState.DONE)])
                statements += 1
        tally.statements += statements

    tally.seconds = run_threads(workers, worker)
    return tally


def run(url: str, quick: bool = False, progress: Progress = no_progress) -> Result:
    jobs, workers, work = JOBS, WORKERS, WORK
    result = Result(
        "E1",
        "claim: how a worker takes a job",
        f"{jobs} jobs, {workers} worker threads, {work * 1000:g} ms of work each; the effect "
        "is an in-memory counter per job",
        ["effects", "duplicates", "max runs", "empty claims", "statements", "time ms"],
        chart="duplicates",
    )
    app = App(url)
    try:
        variants = [
            ("select", "SELECT then UPDATE (two statements)", True),
            ("conditional", "conditional UPDATE ... AND state='pending' after a SELECT", True),
            ("single", "sqljobs claim_jobs: one atomic statement", False),
        ]
        for n, (key, label, broken) in enumerate(variants):
            queue = f"lab-e1-{key}"
            enqueue(app, TASK, queue, [[i] for i in range(jobs)])
            if key == "select":
                tally = select_then_update(url, queue, workers, work)
            elif key == "conditional":
                tally = conditional_update(url, queue, workers, work)
            else:
                tally = library_claim(app, queue, workers, work)
            result.rows.append(Row(label, tally.figures(), ARTICLE[key], broken))
            progress((n + 1) / len(variants))
    finally:
        app.close()
    sel, cond, single = result.rows
    result.claim(
        f"SELECT-then-UPDATE runs jobs twice: {sel.ours['duplicates']} duplicates (article 774)",
        sel.ours["duplicates"] > 0,
    )
    result.claim(
        f"conditional update: {cond.ours['duplicates']} duplicates (article 0), "
        f"{cond.ours['empty claims']} empty claims (article 33)",
        cond.ours["duplicates"] == 0 and cond.ours["effects"] == jobs,
    )
    result.claim(
        f"single-statement claim: {single.ours['duplicates']} duplicates (article 0), "
        f"{single.ours['effects']} effects for {jobs} jobs, {single.ours['empty claims']} "
        "empty claims",
        single.ours["duplicates"] == 0 and single.ours["effects"] == jobs,
    )
    result.notes.append(
        "statements: our claim and each completion count as one call each (on SQLite a call "
        "is BEGIN IMMEDIATE + one statement + COMMIT); duplicates depend on how often the "
        "race window is hit, so they vary from run to run and machine to machine"
    )
    return result
