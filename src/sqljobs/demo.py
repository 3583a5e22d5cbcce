"""``make demo``: real worker processes, one SIGKILLed mid-run, and nothing lost.

Enqueues a few hundred jobs into a fresh SQLite file, starts three worker processes,
kills one with SIGKILL while it holds jobs, and reports that every job finished, how many
ran twice (the killed worker's jobs, re-run after their lease expired), and that the
effect guarded by ``ctx.transaction()`` + ``sqljobs.idempotent`` still happened once each.
Replaced by ``sqljobs lab all --quick`` when the lab lands.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sqljobs

LEASE = 2.0
app = sqljobs.App(default_lease=LEASE)


@app.task(lease=LEASE)
def charge(ctx: sqljobs.JobContext, order: int) -> None:
    """Record every execution, and apply the business effect at most once."""
    path = app.url.removeprefix("sqlite:///")
    with sqlite3.connect(path, isolation_level=None, timeout=30) as log:
        log.execute("INSERT INTO demo_runs (job, pid) VALUES (?, ?)", (ctx.job_id, os.getpid()))
    time.sleep(0.05)  # the work; a SIGKILL may land here, after the run was recorded
    with ctx.transaction() as tx:  # the effect, its marker and the completion commit together
        if sqljobs.idempotent(tx, f"order-{order}:charge"):
            tx.execute("UPDATE demo_account SET balance = balance - 1")


def main(jobs: int = 300, workers: int = 3) -> int:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    console = Console()
    folder = Path(tempfile.mkdtemp(prefix="sqljobs-demo-"))
    url = f"sqlite:///{folder / 'demo.db'}"
    demo = sqljobs.App(url)
    demo.migrate()
    db = sqlite3.connect(folder / "demo.db", isolation_level=None)
    db.execute("CREATE TABLE demo_runs (job INTEGER, pid INTEGER)")
    db.execute("CREATE TABLE demo_account (balance INTEGER)")
    db.execute("INSERT INTO demo_account VALUES (?)", (jobs,))
    ids = [demo.enqueue("charge", kwargs={"order": i}).id for i in range(jobs)]
    console.print(
        f"[bold]sqljobs demo[/]: {jobs} jobs in {url}, {workers} worker processes, "
        f"lease {LEASE:g} s; one worker gets SIGKILL mid-run"
    )

    env = dict(os.environ, SQLJOBS_URL=url)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sqljobs",
                "--app",
                "sqljobs.demo:app",
                "worker",
                "--concurrency",
                "4",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    victim, killed_holding = procs[0], 0
    started = time.monotonic()
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task("running", total=jobs)
        while True:
            done = demo.stats().total("done")
            progress.update(bar, completed=done)
            if victim.poll() is None and done >= jobs // 3:
                held = db.execute(
                    "SELECT count(*) FROM sqljobs_jobs WHERE state = 'running' AND worker LIKE ?",
                    (f"%-{victim.pid}-%",),
                ).fetchone()[0]
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                killed_holding = held
                progress.console.print(
                    f"SIGKILL sent to worker pid {victim.pid} holding {held} jobs"
                )
            if done == jobs or time.monotonic() - started > 120:
                break
            time.sleep(0.05)
    elapsed = time.monotonic() - started
    for proc in procs[1:]:
        proc.send_signal(signal.SIGTERM)
    for proc in procs[1:]:
        proc.wait(timeout=30)

    runs = dict(db.execute("SELECT job, count(*) FROM demo_runs GROUP BY job").fetchall())
    finished = sum(1 for i in ids if (j := demo.get_job(i)) and j.state.value == "done")
    twice = sum(1 for i in ids if runs.get(i, 0) > 1)
    (balance,) = db.execute("SELECT balance FROM demo_account").fetchone()
    table = Table(title="at-least-once delivery, made harmless")
    for col in ("jobs", "done", "lost", "runs", "ran twice", "killed held", "effects", "time"):
        table.add_column(col, justify="right")
    table.add_row(
        str(jobs),
        str(finished),
        str(jobs - finished),
        str(sum(runs.values())),
        str(twice),
        str(killed_holding),
        str(jobs - balance),
        f"{elapsed:.1f} s",
    )
    console.print(table)
    ok = finished == jobs and jobs - balance == jobs
    console.print(
        (
            "[green]every job finished; each effect applied exactly once[/]"
            if ok
            else "[red]something was lost or applied twice[/]"
        )
        + f"; {twice} jobs ran twice because the killed worker held them (lease recovery)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
