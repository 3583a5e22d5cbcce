"""A deliberately naive worker process, for the experiments' "don't" rows.

It claims with an atomic conditional UPDATE but sets no lease, so nothing ever returns
its jobs if it dies; and on SIGTERM it exits at once, abandoning what it holds.
Run as ``python -m sqljobs.lab.naive URL QUEUE THREADS SECONDS``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from .db import Db
from .workload import log_run

CLAIM = (
    "UPDATE sqljobs_jobs SET state = 'running', worker = ? WHERE id = ("
    "SELECT id FROM sqljobs_jobs WHERE queue = ? AND state = 'pending' ORDER BY id LIMIT 1"
    ") AND state = 'pending' RETURNING id"
)


def work_loop(url: str, queue: str, seconds: float, name: str) -> None:
    with Db(url) as db:
        while True:
            job = db.value(CLAIM, (name, queue))
            if job is None:
                time.sleep(0.01)  # plain polling: this is the naive worker
                continue
            log_run(job, "start")
            time.sleep(seconds)
            log_run(job, "end")
            db.execute("UPDATE sqljobs_jobs SET state = 'done' WHERE id = ?", (job,))


def main(argv: list[str]) -> None:
    url, queue, threads, seconds = argv[0], argv[1], int(argv[2]), float(argv[3])
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # cancel everything at once
    for i in range(threads):
        name = f"naive-{os.getpid()}-{i}"
        threading.Thread(target=work_loop, args=(url, queue, seconds, name), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
