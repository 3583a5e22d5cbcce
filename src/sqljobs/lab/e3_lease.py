"""E3: a lease shorter than the job livelocks the queue; a long lease or a heartbeat fixes it.

Every variant is the library's own Worker (claim, lease, reaper, fencing); only the lease
and whether the heartbeat renews it change.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

from ..app import App
from ..context import JobContext
from ..retry import Retry
from .common import Starts, enqueue, worker_thread
from .db import Db
from .results import Progress, Result, Row, no_progress

ARTICLE: dict[str, dict[str, float | int]] = {
    "B1": {"jobs": 24, "claims": 200, "duplicates": 192, "done": 0, "stuck": 24, "time s": 30},
    "B2": {"jobs": 24, "claims": 200, "duplicates": 192, "done": 0, "stuck": 24, "time s": 30},
    "B3": {"jobs": 24, "claims": 24, "duplicates": 0, "done": 24, "stuck": 0, "time s": 3.67},
    "B4": {"jobs": 24, "claims": 24, "duplicates": 0, "done": 24, "stuck": 0, "time s": 3.67},
}


@dataclass(frozen=True)
class Variant:
    key: str
    lease: float  # in units of the job's duration
    heartbeat: bool
    max_attempts: int = 10_000  # the article had no attempt limit

    def label(self, job: float) -> str:
        text = f"{self.key} lease {self.lease * job * 1000:g} ms"
        if self.heartbeat:
            text += f" + heartbeat every {self.lease * job * 1000 / 3:.0f} ms"
        if self.max_attempts < 100:
            text += f", max_attempts={self.max_attempts}"
        return text


VARIANTS = [
    Variant("B1", 0.25, False),
    Variant("B2", 2 / 3, False),
    Variant("B3", 5 / 3, False),
    Variant("B4", 5 / 12, True),
    Variant("B1+", 0.25, False, max_attempts=3),
]


def run(url: str, quick: bool = False, progress: Progress = no_progress) -> Result:
    jobs, workers = 24, 8
    job, cap = (0.3, 3.0) if quick else (1.2, 30.0)
    result = Result(
        "E3",
        "lease shorter than the job: livelock",
        f"{jobs} jobs of {job:g} s, {workers} worker threads per variant, reaper on, "
        f"time cap {cap:g} s (B1+ until every job is dead, at most "
        f"{_cap(VARIANTS[-1], cap, jobs, workers, job):g} s); variants run side by side on "
        "their own queues",
        ["jobs", "claims", "duplicates", "done", "stuck", "dead", "lease expiries", "time s"],
        chart="done",
    )
    logs: list[Starts] = []
    db = Db(url)
    with ExitStack() as stack:
        workers_ = []
        for v in VARIANTS:
            app = App(url)
            stack.callback(app.close)
            starts = Starts()
            queue = _queue(v.key)
            _register(app, starts, queue, v.lease * job, v.max_attempts, job)
            enqueue(app, "lab_e3", queue, [[] for _ in range(jobs)])
            logs.append(starts)
            workers_.append(
                stack.enter_context(
                    worker_thread(
                        app, concurrency=workers, prefetch=0, heartbeat=v.heartbeat,
                        queues=(queue,),
                    )
                )
            )  # fmt: skip
        began = time.monotonic()
        finish: dict[str, float] = {}
        deadline = {v.key: began + _cap(v, cap, jobs, workers, job) for v in VARIANTS}
        running = dict(zip((v.key for v in VARIANTS), workers_, strict=True))
        for _ in _ticks(began, max(deadline.values()) - began, progress):
            for v in VARIANTS:
                if v.key not in running:
                    continue
                if _open(db, _queue(v.key)) == 0:
                    finish[v.key] = time.monotonic() - began
                elif time.monotonic() < deadline[v.key]:
                    continue
                running.pop(v.key).stop(immediate=True)  # done, or its time is up
            if not running:
                break
        for w in running.values():
            w.stop(immediate=True)
    for v, starts in zip(VARIANTS, logs, strict=True):
        queue = _queue(v.key)
        claimed = [job_id for job_id, _, _ in starts.entries]
        counts = dict(db.rows("SELECT state, count(*) FROM sqljobs_jobs WHERE queue = ? "
                              "GROUP BY state", (queue,)))  # fmt: skip
        expiries = db.value("SELECT sum(lease_expiries) FROM sqljobs_jobs WHERE queue = ?",
                            (queue,))  # fmt: skip
        figures = {
            "jobs": jobs,
            "claims": len(claimed),
            "duplicates": len(claimed) - len(set(claimed)),
            "done": counts.get("done", 0),
            "stuck": jobs - counts.get("done", 0) - counts.get("dead", 0),
            "dead": counts.get("dead", 0),
            "lease expiries": int(expiries or 0),
            "time s": round(finish.get(v.key, deadline[v.key] - began), 2),
        }
        article = ARTICLE.get(v.key, {})
        result.rows.append(Row(v.label(job), figures, article, broken=v.key in ("B1", "B2", "B1+")))
    last_error = db.value("SELECT last_error FROM sqljobs_jobs WHERE queue = 'lab-e3-b1-plus' "
                          "AND state = 'dead' LIMIT 1")  # fmt: skip
    db.close()
    _claims(result, jobs)
    if last_error:
        result.notes.append(f"B1+ (the article's lesson, with an attempt limit): {last_error}")
    if quick:
        result.notes.append(
            f"--quick: every duration is the article's x{job / 1.2:g} (job {job:g} s), "
            f"cap {cap:g} s"
        )
    result.notes.append(
        "claims are attempts that started; our workers also hold a slot until a stale "
        "handler returns, so claims per second are bounded by the job time, as in the article"
    )
    return result


def _claims(result: Result, jobs: int) -> None:
    for key in ("B1", "B2"):
        r = result.row(key + " ").ours
        result.claim(
            f"{key} livelocks: {r['done']} done, {r['duplicates']} duplicate claims "
            "(article 0 done, 192)",
            r["done"] == 0 and r["duplicates"] > 0,
        )
    for key in ("B3", "B4"):
        r = result.row(key).ours
        result.claim(
            f"{key}: {r['done']}/{jobs} done, {r['duplicates']} duplicates (article 24, 0)",
            r["done"] == jobs and r["duplicates"] == 0,
        )
    r = result.row("B1+").ours
    result.claim(
        f"with max_attempts=3 a too-short lease ends every job dead, diagnosed as a lease "
        f"problem: {r['dead']}/{jobs} dead",
        r["dead"] == jobs,
    )


def _cap(v: Variant, cap: float, jobs: int, workers: int, job: float) -> float:
    """How long to watch a variant: ``cap`` for one that never ends, and for one with an
    attempt limit at least three times the work its attempts need (each holds a worker
    thread for the job's duration), so a busy machine cannot cut it short."""
    if v.max_attempts >= 100:
        return cap
    return max(cap, 3 * jobs * v.max_attempts * job / workers)


def _register(
    app: App, starts: Starts, queue: str, lease: float, attempts: int, job: float
) -> None:
    @app.task(name="lab_e3", queue=queue, lease=lease,
              retry=Retry(max_attempts=attempts, base=0.0))  # fmt: skip
    def lab_e3(ctx: JobContext) -> None:
        starts.add(ctx.job_id, ctx.attempt)
        time.sleep(job)


def _open(db: Db, queue: str) -> int:
    return int(db.value("SELECT count(*) FROM sqljobs_jobs WHERE queue = ? AND state IN "
                        "('pending', 'running')", (queue,)))  # fmt: skip


def _ticks(began: float, cap: float, progress: Progress) -> Iterator[None]:
    """Wake every 20 ms until ``cap`` seconds after ``began``, reporting progress."""
    while (elapsed := time.monotonic() - began) < cap:
        progress(elapsed / cap)
        yield
        time.sleep(0.02)
    progress(1.0)


def _queue(key: str) -> str:
    """A variant's own queue ("B1+" -> "lab-e3-b1-plus": queue names take no "+")."""
    return "lab-e3-" + key.lower().replace("+", "-plus")
