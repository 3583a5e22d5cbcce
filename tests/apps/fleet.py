"""Two services sharing one queue with different task sets: ``app_a`` runs ``resize``,
``app_b`` runs ``bill``. Each run is logged as ``<task>:<label> <pid> <phase>``."""

from __future__ import annotations

import sqljobs

from .workload import log_run

app_a = sqljobs.App()
app_b = sqljobs.App()


@app_a.task(queue="shared")
def resize(label: str) -> None:
    log_run(f"resize:{label}", "end")


@app_b.task(queue="shared")
def bill(label: str) -> None:
    log_run(f"bill:{label}", "end")
