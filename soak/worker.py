"""One soak worker process: ``python -m soak.worker CONCURRENCY PRUNE_INTERVAL`` with
``SQLJOBS_URL`` set. The library's own worker; only the pruner's interval is the soak's
(so a short smoke run still prunes)."""

from __future__ import annotations

import sys

from soak.tasks import app

if __name__ == "__main__":
    app.run_worker(concurrency=int(sys.argv[1]), prune_interval=float(sys.argv[2]))
