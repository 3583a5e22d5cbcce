"""A producer process: enqueues its share of items one by one, paced over the run, and
appends each acknowledged enqueue (``item job-id``) to its file the moment the call
returns. Only an acknowledged enqueue is a promise; the conductor checks each one.

Each item carries a business key, so an enqueue retried after an error whose commit did in
fact succeed finds its job instead of making a second one. On PostgreSQL an enqueue may
fail while the server restarts (the producer retries, and counts it); on SQLite no error
may reach a producer at all (each is counted as a failure of the run).

Run as ``python -m chaos.producer NAME COUNT SECONDS OUT`` with ``SQLJOBS_URL`` set.
"""

from __future__ import annotations

import os
import sys
import time

from chaos.tasks import app, apply


def main(name: str, count: int, seconds: float, out_path: str) -> None:
    errors: dict[str, int] = {}
    started = time.monotonic()
    with open(out_path, "a", buffering=1) as out:
        for i in range(count):
            # pace: item i is due at its share of the run, so producers and kills overlap
            ahead = started + seconds * i / count - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            item = f"{name}-{i}"
            while True:
                tried = time.monotonic()
                try:
                    handle = apply.with_options(key=f"chaos:{item}").enqueue(item)
                    break
                except Exception as exc:  # counted by kind; the run's report judges them
                    kind = type(exc).__name__
                    errors[kind] = errors.get(kind, 0) + 1
                    waited = time.monotonic() - tried  # at once, or after the busy timeout?
                    out.write(f"error {kind} {str(exc)[:200]!r} after {waited:.2f} s\n")
                    time.sleep(0.05)
            out.write(f"ack {item} {handle.id}\n")
    app.close()
    sys.exit(0)


if __name__ == "__main__":
    if len(sys.argv) != 5 or "SQLJOBS_URL" not in os.environ:
        sys.exit("usage: SQLJOBS_URL=... python -m chaos.producer NAME COUNT SECONDS OUT")
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
