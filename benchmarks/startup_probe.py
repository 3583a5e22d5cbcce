"""A fresh process that times its own worker from ``run_worker()``: to the first job's
handler (``first``), or to the end of the reference article's 200 jobs of 2 ms, all
enqueued before the worker starts (``article``). Prints milliseconds; run by
``sqljobs_cases.startup``, one process per repetition.

    python startup_probe.py URL first|article
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import sqljobs

ARTICLE_JOBS = 200


def main(url: str, mode: str) -> None:
    app = sqljobs.App(url)
    began = [0.0]
    left = [1 if mode == "first" else ARTICLE_JOBS]
    lock = threading.Lock()

    def hit() -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        print(f"{(time.perf_counter() - began[0]) * 1000:.2f}", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)  # the worker drains and run_worker returns

    @app.task(name="first")
    def first() -> None:
        hit()

    @app.task(name="work")
    def work(i: int) -> None:
        time.sleep(0.002)
        hit()

    app.migrate()
    if mode == "first":
        first.enqueue()
    else:
        work.enqueue_many([(i,) for i in range(ARTICLE_JOBS)])
    app.close()  # the worker opens its own connections, as a fresh process would
    began[0] = time.perf_counter()
    app.run_worker(concurrency=8)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
