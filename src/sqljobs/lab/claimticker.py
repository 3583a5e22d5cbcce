"""Don't: the article's D4. Replicas claim the tick in storage with one conditional update,
then run the job themselves and compute the next run from *now* instead of from the tick.
One run per tick is kept, but a job longer than the interval overlaps the next replica's
run, and every late claim pushes the schedule back: it drifts and loses ticks.

Run as ``python -m sqljobs.lab.claimticker URL INTERVAL SECONDS DURATION``; runs go to
SQLJOBS_LAB_TICKS, keyed ``d4:<scheduled tick, ISO>`` so the lag can be read back.
A replica whose PostgreSQL connection is ended under it (the server restarts; on a
shared server, another program's tests may restart it) says so in one line and
reconnects, as a real replica would, instead of dying with a traceback.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime

from .db import Db, is_postgres
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
    deadline = time.time() + duration
    lost = _connection_errors(url)
    db = _connect(url, deadline)
    try:
        while db is not None and time.time() < deadline:
            try:
                _claim_once(db, interval, seconds)
            except lost as exc:  # a server restart or a terminated connection
                db.close()
                print(f"claimticker {os.getpid()}: connection lost ({exc}); reconnecting",
                      file=sys.stderr)  # fmt: skip
                db = _connect(url, deadline)
    except KeyboardInterrupt:  # Ctrl-C on the lab reaches its helpers too
        pass
    finally:
        if db is not None:
            db.close()


def _claim_once(db: Db, interval: float, seconds: float) -> None:
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


def _connection_errors(url: str) -> tuple[type[Exception], ...]:
    """What a lost PostgreSQL connection raises (``AdminShutdown`` when the server
    restarts or an admin ends the session); SQLite has no connection to lose."""
    if not is_postgres(url):
        return ()
    import psycopg

    return (psycopg.OperationalError,)


def _connect(url: str, deadline: float) -> Db | None:
    """Connect, trying again while the server cannot be reached (it restarts), as a real
    replica would, until the run's end; None then."""
    while True:
        try:
            return Db(url)
        except _connection_errors(url):
            if time.time() >= deadline:
                return None
            time.sleep(0.1)


if __name__ == "__main__":
    main(sys.argv[1:])
