"""Don't: a replica with its own in-process ticker (the article's D1). Every replica runs
every tick, so N replicas run each job N times. Run as
``python -m sqljobs.lab.ticker INTERVAL SECONDS DURATION`` (runs go to SQLJOBS_LAB_TICKS).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

from .workload import log_tick


def main(argv: list[str]) -> None:
    interval, seconds, duration = (float(a) for a in argv)
    began = time.time()
    n = 0
    while (now := time.time()) < began + duration:
        log_tick(f"ticker:{os.getpid()}:{n}", now)
        time.sleep(seconds)
        n += 1
        time.sleep(max(0.0, began + n * interval - time.time()))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C on the lab reaches its helpers
        main(sys.argv[1:])
