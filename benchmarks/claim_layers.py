"""What one PostgreSQL claim costs a worker, layer by layer, measured in one sitting.

    python benchmarks/claim_layers.py [--calls 1000]

Each call is timed alone (``perf_counter``) on a scratch database, and the kinds take
turns call by call so the machine's noise falls on all alike:

- ``SELECT 1`` on a plain psycopg connection: the round trip itself;
- the claim statement, prepared, on a plain connection: the server's work and the rows'
  transfer and parsing by psycopg;
- the worker backend's ``finish_and_claim`` (its pool, its parameters, the rows turned
  into jobs): the same statement with sqljobs' Python around it;

each for an empty queue and for one due job (enqueued, untimed, before each call). The
worker's connections do not wait for the WAL flush (``synchronous_commit`` off), nor do
the plain ones here. Prints the median and p90 of each, in ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import pg_server
import psycopg

import sqljobs
from sqljobs.backends.base import Claim
from sqljobs.backends.postgres import PostgresBackend

Timed = Callable[[], int]


def _kinds(url: str, app: sqljobs.App) -> dict[str, Timed]:
    """The three calls timed, each returning how many rows (jobs) it got."""
    backend = app._open_backend(pool_size=4, synchronous_commit=False)
    assert isinstance(backend, PostgresBackend)
    claim = Claim("bench", None, 10, None, 10, ())
    sql, params = backend._claim_statement("claim", claim)
    params.update(began_ids="{}", began_tokens="{}")
    plain = psycopg.connect(url, autocommit=True)
    plain.execute("SET jit = off; SET synchronous_commit = off")

    def select_one() -> int:
        return len(plain.execute("SELECT 1", prepare=True).fetchall())

    def statement() -> int:
        return len(plain.execute(sql, params, prepare=True).fetchall())

    def backend_call() -> int:
        return len(backend.finish_and_claim([], Claim("bench", None, 10))[1])

    return {"SELECT 1": select_one, "claim statement": statement, "finish_and_claim": backend_call}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls of each kind")
    args = parser.parse_args()
    with pg_server.scratch_db("layers") as url:
        app = sqljobs.App(url)
        noop = app.task(name="layers_noop")(lambda: None)
        kinds = _kinds(url, app)
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(50):  # warm up: plans, caches, the pool
            for call in kinds.values():
                call()
        for n in range(args.calls):
            for name, call in kinds.items():
                for queue in ("empty", "one job") if name != "SELECT 1" else ("-",):
                    if queue == "one job":
                        noop.enqueue()
                    began = time.perf_counter()
                    got = call()
                    times.setdefault((name, queue), []).append(time.perf_counter() - began)
                    if got != (0 if queue == "empty" else 1):
                        raise RuntimeError(f"{name} ({queue}), call {n}: {got} rows")
        app.close()
    print(f"{'ms per call':<20}{'empty queue p50 (p90)':>24}{'one due job p50 (p90)':>24}")
    for name in kinds:
        cells = []
        for queue in ("empty", "one job") if name != "SELECT 1" else ("-",):
            ms = sorted(t * 1000 for t in times[(name, queue)])
            cells.append(f"{statistics.median(ms):.3f} ({ms[int(0.9 * len(ms))]:.3f})")
        cells += ["(no table)"] * (2 - len(cells))
        print(f"{name:<20}{cells[0]:>24}{cells[1]:>24}")


if __name__ == "__main__":
    main()
