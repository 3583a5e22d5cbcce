"""The backend conformance suite: what every engine must do, one file per group of
``Backend`` protocol methods, each test run on every engine (the ``url`` fixture's cases;
a new engine adds its case there). ``test_coverage.py`` fails while a protocol method has
no test here.

Each file names the methods it covers in ``COVERS``; the coverage test checks that every
name there is really called in that file.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sqljobs import App
from sqljobs.backends import Backend
from sqljobs.backends.base import Claim
from sqljobs.jobs import ClaimedJob, NewJob
from sqljobs.payload import encode


@pytest.fixture
def backend(app: App) -> Backend:
    """The engine under test, on a fresh migrated database (the App's own backend)."""
    return app.backend


def new_job(backend: Backend, task: str = "t", *args: Any, **fields: Any) -> NewJob:
    """A job of ``task`` called with ``args`` as an enqueue builds it, due now, with
    ``fields`` set."""
    job = NewJob(task, encode(task, args, {}), "default", 0, backend.now(), 30.0, 3)
    return replace(job, **fields)


def claim(backend: Backend, worker: str = "w", limit: int = 10, **fields: Any) -> list[ClaimedJob]:
    """What ``worker`` claims, up to ``limit`` jobs of any task and queue."""
    return backend.claim_jobs(Claim(worker, limit=limit, **fields))


def pending(backend: Backend) -> int:
    """How many jobs are pending, in every queue."""
    return sum(counts.get("pending", 0) for counts in backend.stats().counts.values())
