"""Tasks for the dashboard's browser tests: a charge that fails until the test "fixes" it
(a file appears), a mail task, and slow work for a queue that stays busy."""

from __future__ import annotations

import os
from pathlib import Path

import sqljobs

app = sqljobs.App()


@app.task(queue="billing", retry=sqljobs.Retry(max_attempts=1), redact=["card_number"])
def charge(customer: str, card_number: str) -> str:
    """Fails while ``SQLJOBS_TEST_FIXED`` names a file that does not exist."""
    if not Path(os.environ["SQLJOBS_TEST_FIXED"]).exists():
        raise ValueError(f"no such customer {customer}")
    return f"charged {customer}"


@app.task(queue="mail")
def send(to: str) -> None:
    """Nothing to do: it only has to be taken, or not."""


@app.task(queue="bulk")
def later(n: int) -> None:
    """Never served by the test's worker: jobs to bulk-cancel."""
