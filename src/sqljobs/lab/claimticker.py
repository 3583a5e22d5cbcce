"""Don't: the article's D4. Replicas claim the tick in storage with one conditional update,
then run the job themselves and compute the next run from *now* instead of from the tick.
One run per tick is kept, but a job longer than the interval overlaps the next replica's
run, and every late claim pushes the schedule back: it drifts and loses ticks.

Run as ``python -m sqljobs.lab.claimticker URL INTERVAL SECONDS DURATION``; runs go to
SQLJOBS_LAB_TICKS, keyed ``d4:<scheduled tick, ISO>`` so the lag can be read back.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime

from .db import Db
from .workload import log_tick

TABLE = "lab_e5_claims"


def prepare(url: str, first_tick: float) -> None:
    """The schedule row the replicas fight over."""
    with Db(url) as db:
        db.execute(f"DROP TABLE IF EXISTS {TABLE}")
        db.execute(
            f"CREATE TABLE {TABLE} (name TEXT PRIMARY KEY, next_run_at DOUBLE PRECISION NOT NULL)"
        )
        db.execute(f"INSERT INTO {TABLE} VALUES ('d4', ?)", (first_tick,))


def main(argv: list[str]) -> None:
    url = argv[0]
    interval, seconds, duration = (float(a) for a in argv[1:])
    began = time.time()
    with Db(url) as db:
        while time.time() < began + duration:
            now = time.time()
            tick = db.value(f"SELECT next_run_at FROM {TABLE} WHERE name = 'd4'")
            claimed = db.execute(
                f"UPDATE {TABLE} SET next_run_at = ? WHERE name = 'd4' AND next_run_at = ? "
                "AND next_run_at <= ?",
                (now + interval, tick, now),  # the bug: the next run counts from now
            ).rowcount
            if claimed == 1:
                start = time.time()
                time.sleep(seconds)  # the replica runs the job itself
                log_tick(f"d4:{datetime.fromtimestamp(tick, UTC).isoformat()}", start)
            else:
                time.sleep(0.005)


if __name__ == "__main__":
    main(sys.argv[1:])
