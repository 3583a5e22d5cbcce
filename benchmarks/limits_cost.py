"""What concurrency and rate limits cost a drain, measured against the same drain unlimited.

    python benchmarks/limits_cost.py [--jobs 10000] [--keys 10] [--per-key 2,4,8] [--rounds 3]
                                     [--rate 50] [--rated 200] [--only sqlite|postgres]

Issue 13's figures. Each round drains ``--jobs`` no-op jobs twice on a fresh database, with
one worker of 8 threads in this process (as ``make bench``'s drain): once without a
limit, once as a task limited to each ``--per-key`` count running at once per key over
``--keys`` keys, taken in turn. The limited drain must reach at least half the unlimited
rate. The rounds interleave them, so the machine's noise hits all alike: compare each
round's ratio, not single timings.

A limit caps the jobs a key has in flight, and a job holds its slot from the claim's
commit to its completion's, waiting in the worker's buffer and for the next round trip
too. Unlimited, the worker keeps 8 running and up to 40 more claimed; 10 keys of 2 slots
allow 20 in all, so that drain is bound by the limit itself (Little's law), whatever the
claim costs. Hence several counts, side by side.

Then a rate: ``--rated`` jobs of a task limited to ``--rate`` starts a second, drained
by the same worker. A worker whose due jobs wait for the rate sleeps until the window
opens, so it should make no more claims than starts (the target: at most one claim per
slot that opens), plus the idle cost: printed as claims, starts and claims per start, and
the most starts seen in any one second (never above the rate).

Each database is fresh: a temporary SQLite file; a scratch PostgreSQL database on
``BENCH_PG_URL``, else ``SQLJOBS_TEST_PG``, dropped afterwards.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pg_server
from common import Countdown, log, scratch_dir
from sqljobs_cases import done_in_table, running_worker

import sqljobs

CONCURRENCY = 8


@contextmanager
def database(kind: str, tag: str) -> Iterator[str]:
    """A fresh database URL of ``kind``."""
    if kind == "sqlite":
        with scratch_dir() as where:
            yield f"sqlite:///{where / 'jobs.db'}"
    else:
        with pg_server.scratch_db(tag) as url:
            yield url


def drain(url: str, jobs: int, keys: int, per_key: int | None) -> tuple[float, float]:
    """Jobs a second from worker start to the last outcome committed, and claims made."""
    countdown = Countdown(jobs)
    app = sqljobs.App(url)

    def noop(key: str) -> None:
        countdown.hit()

    if per_key is None:
        task = app.task(name="noop")(noop)
    else:
        task = app.task(name="noop", concurrency=per_key, concurrency_key=_key)(noop)
    app.migrate()
    try:
        task.enqueue_many([(f"k{i % keys}",) for i in range(jobs)])
        elapsed, claims = _drained(app, jobs, countdown)
        if done_in_table(url) != jobs:
            raise RuntimeError("not every job is done in the table")
    finally:
        app.close()
    return jobs / elapsed, claims


def _drained(app: sqljobs.App, jobs: int, countdown: Countdown) -> tuple[float, float]:
    """Seconds from worker start until ``jobs`` outcomes are committed, and the claims
    the worker made meanwhile."""
    started = time.perf_counter()
    with running_worker(app, concurrency=CONCURRENCY) as worker:
        countdown.wait()
        while worker.counters["done"] < jobs:
            time.sleep(0.0005)
        elapsed = time.perf_counter() - started
        claims = float(worker.counters["claims"])
    countdown.check()
    return elapsed, claims


def _key(key: str, **_: object) -> str:
    return key


@dataclass
class Paced:
    seconds: float
    claims: float
    starts: int
    most_in_a_second: int


def paced(url: str, jobs: int, rate: int) -> Paced:
    """Drain ``jobs`` jobs of a task limited to ``rate`` starts a second."""
    countdown = Countdown(jobs)
    app = sqljobs.App(url)

    @app.task(name="paced", rate=f"{rate}/s")
    def paced_(i: int) -> None:
        countdown.hit()

    app.migrate()
    try:
        handles = paced_.enqueue_many([(i,) for i in range(jobs)])
        elapsed, claims = _drained(app, jobs, countdown)
        starts = sorted(h.refresh().started_at or 0.0 for h in handles)
    finally:
        app.close()
    most = max(sum(1 for t in starts if s <= t < s + 1.0) for s in starts)
    return Paced(elapsed, claims, len(starts), most)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--per-key", default="2,4,8", help="comma-separated limits per key")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=50)
    parser.add_argument("--rated", type=int, default=200)
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    args = parser.parse_args()
    kinds = [k for k in ("sqlite", "postgres") if args.only in (None, k)]
    if "postgres" in kinds and (why_not := pg_server.unreachable()):
        log(f"PostgreSQL skipped: {why_not}")
        kinds.remove("postgres")
    counts = [int(n) for n in args.per_key.split(",")]
    print(
        f"drain of {args.jobs:,} no-op jobs, worker of {CONCURRENCY} threads; limited: N at "
        f"once per key over {args.keys} keys (measured, {args.rounds} interleaved rounds)"
    )
    print(f"{'db':<9} {'N':>3} {'round':>5} {'unlimited/s':>12} {'limited/s':>10} {'ratio':>6}")
    for kind in kinds:
        ratios: dict[int, list[float]] = {n: [] for n in counts}
        for round_ in range(1, args.rounds + 1):
            with database(kind, "limits_free") as url:
                free, _ = drain(url, args.jobs, args.keys, None)
            for n in counts:
                with database(kind, "limits_held") as url:
                    held, _ = drain(url, args.jobs, args.keys, n)
                ratios[n].append(held / free)
                figures = f"{free:>12,.0f} {held:>10,.0f} {held / free:>6.2f}"
                print(f"{kind:<9} {n:>3} {round_:>5} {figures}")
        for n in counts:
            median = statistics.median(ratios[n])
            ok = "met" if median >= 0.5 else "MISSED"
            print(f"{kind:<9} {n:>3} median ratio {median:.2f} (target >= 0.5: {ok})")
    print(f"\nrate {args.rate}/s: {args.rated} jobs, worker of {CONCURRENCY} threads (measured)")
    head = f"{'seconds':>8} {'claims':>7} {'starts':>7} {'claims/start':>13} {'most in 1 s':>12}"
    print(f"{'db':<9} {head}")
    for kind in kinds:
        with database(kind, "limits_rate") as url:
            p = paced(url, args.rated, args.rate)
        print(
            f"{kind:<9} {p.seconds:>8.2f} {p.claims:>7.0f} {p.starts:>7} "
            f"{p.claims / p.starts:>13.2f} {p.most_in_a_second:>12}"
        )


if __name__ == "__main__":
    main()
