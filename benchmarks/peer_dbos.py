"""DBOS (dbos-transact), driven only through its public API, as a peer of sqljobs'
workflows on SQLite and on PostgreSQL. It runs in processes of its own (DBOS is one
instance a process):

    python peer_dbos.py setup URL WORKFLOWS STEPS POLL
    python peer_dbos.py worker URL FOLDER

``setup`` creates DBOS's system database on URL (a ``sqlite:///`` file or a PostgreSQL
database), registers the queue ``wfbench`` (``worker_concurrency=8``, polled every POLL
seconds; DBOS's default is 1.0) and enqueues WORKFLOWS workflows of STEPS no-op steps
without running any (it listens to no queue). ``worker`` writes ``ready`` (the
``time.time()`` just before ``DBOS.launch()``) to FOLDER, launches, and runs them until
SIGTERM; each workflow writes a line of ``steps.txt``, the seconds each step call took.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig

QUEUE = "wfbench"
_lock = threading.Lock()


def config(url: str) -> DBOSConfig:
    """The same application in both processes: a fixed version, so the worker takes what
    the setup enqueued; logging down to warnings, as sqljobs' worker logs nothing per job."""
    return {
        "name": "wfbench",
        "system_database_url": url,
        "application_version": "bench",
        "executor_id": "bench-worker",
        "log_level": "WARNING",
    }


@DBOS.step()
def noop(i: int) -> None:
    return None


@DBOS.workflow()
def steps(n: int) -> None:
    marks = [time.perf_counter()]
    for i in range(n):
        noop(i)
        marks.append(time.perf_counter())
    line = " ".join(f"{b - a:.7f}" for a, b in pairwise(marks))
    with _lock, open(Path(os.environ["BENCH_FOLDER"]) / "steps.txt", "a") as out:
        out.write(line + "\n")


def setup(url: str, workflows: int, n: int, poll: float) -> None:
    DBOS(config=config(url))
    DBOS.listen_queues([])  # enqueue only: the worker process runs them
    DBOS.launch()
    queue = DBOS.register_queue(QUEUE, worker_concurrency=8, polling_interval_sec=poll,
                                on_conflict="always_update")  # fmt: skip
    for _ in range(workflows):
        queue.enqueue(steps, n)
    DBOS.destroy()


def worker(url: str, folder: Path) -> None:
    os.environ["BENCH_FOLDER"] = str(folder)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    DBOS(config=config(url))
    (folder / "ready").write_text(f"{time.time():.6f}\n")
    DBOS.launch()
    stop.wait()
    DBOS.destroy()


def finished(url: str) -> tuple[int, float | None]:
    """How many workflows ended successfully, and when the last did (Unix seconds), read
    from DBOS's ``workflow_status`` table (``updated_at``: milliseconds)."""
    sql = "SELECT count(*), max(updated_at) FROM {t} WHERE status = 'SUCCESS'"
    if url.startswith("sqlite:///"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            row: Any = conn.execute(sql.format(t="workflow_status")).fetchone()
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            row = pg.execute(sql.format(t="dbos.workflow_status")).fetchone()
    return int(row[0]), None if row[1] is None else float(row[1]) / 1000


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING)
    if argv[0] == "setup":
        setup(argv[1], int(argv[2]), int(argv[3]), float(argv[4]))
    elif argv[0] == "worker":
        worker(argv[1], Path(argv[2]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
