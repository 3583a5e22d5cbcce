"""Rows are read by column name: a column added, dropped or moved cannot shift a value
into the wrong field."""

from __future__ import annotations

import sqlite3

import pytest

from sqljobs.backends.rows import claimed_jobs, expired_job, result
from sqljobs.jobs import ClaimedJob

CLAIMED = (
    "SELECT 'extra' AS surplus, 'k' AS key, 7.0 AS deadline_at, 5.0 AS created_at, 3 AS "
    "max_attempts, 30.0 AS lease, {token} AS token, 1 AS attempt, {priority} AS priority, "
    "'default' AS queue, '{{}}' AS payload, 'send' AS task, {id} AS id, {run_at} AS run_at"
)


def _rows(*selects: str) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    found = result(sqlite3.connect(":memory:").execute(" UNION ALL ".join(selects)))
    return found.names, found.rows


def test_columns_in_any_order_fill_the_fields_they_are_named_for() -> None:
    names, rows = _rows(CLAIMED.format(id=9, token=4, priority=0, run_at=1.0))
    assert names[0] == "surplus", "columns the record does not need are passed over"
    assert claimed_jobs(names, rows) == [
        ClaimedJob(9, "send", "{}", "default", 0, 1, 4, 30.0, 3, 5.0, 7.0, "k", run_at=1.0)
    ]


def test_claimed_jobs_come_back_in_claim_order() -> None:
    """Highest priority first, then the earliest due, then the oldest id, whatever order
    the UPDATE ... RETURNING gave them in."""
    names, rows = _rows(
        CLAIMED.format(id=1, token=1, priority=0, run_at=2.0),
        CLAIMED.format(id=2, token=1, priority=5, run_at=9.0),
        CLAIMED.format(id=4, token=1, priority=0, run_at=1.0),
        CLAIMED.format(id=3, token=1, priority=0, run_at=1.0),
    )
    assert [j.id for j in claimed_jobs(names, rows)] == [2, 3, 4, 1]


def test_a_column_the_record_needs_and_the_statement_lacks_fails_naming_it() -> None:
    names, rows = _rows("SELECT 1 AS id, 2 AS token")
    with pytest.raises(LookupError, match=r"without.*'task'"):
        expired_job(names, rows[0])


def test_flags_that_sqlite_gives_as_integers_become_booleans() -> None:
    names, rows = _rows(
        "SELECT 1 AS id, 2 AS token, 't' AS task, 1 AS attempt, 3 AS max_attempts, "
        "30.0 AS lease, NULL AS started_at, 0.0 AS lease_until, NULL AS deadline_at, "
        "'w' AS worker, 1 AS worker_alive, 0 AS errors, 0 AS lease_expiries, 0 AS crashes, "
        "0 AS prefetched, 'q' AS queue"
    )
    job = expired_job(names, rows[0])
    assert job.worker_alive is True and job.prefetched is False
