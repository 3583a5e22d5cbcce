"""sqljobs.testing.explain: the plan of a statement on either engine, for tests that
check a query reads an index instead of the whole table."""

from __future__ import annotations

import pytest

from sqljobs import App
from sqljobs.testing import Plan, assert_uses_index, explain

from .conftest import is_pg


def _by_id(app: App) -> str:
    marker = "%(id)s" if is_pg(app) else ":id"
    return f"SELECT id, state FROM sqljobs_jobs WHERE id = {marker}"


def _pkey(app: App) -> str:
    return "sqljobs_jobs_pkey" if is_pg(app) else "PRIMARY KEY"


def test_a_lookup_by_id_reads_the_primary_key(app: App) -> None:
    plan = explain(app, _by_id(app), {"id": 1})
    assert isinstance(plan, Plan) and plan.engine == ("postgres" if is_pg(app) else "sqlite")
    assert_uses_index(plan, _pkey(app), table="sqljobs_jobs")
    (read,) = plan.reads("sqljobs_jobs")
    assert read.index == _pkey(app) and not read.full_scan
    assert plan.full_scans() == set()


def test_a_filter_on_an_unindexed_column_reads_the_whole_table(app: App) -> None:
    marker = "%(payload)s" if is_pg(app) else ":payload"
    plan = explain(app, f"SELECT id FROM sqljobs_jobs WHERE payload = {marker}", {"payload": "x"})
    assert plan.full_scans() == {"sqljobs_jobs"}, plan.text
    with pytest.raises(AssertionError, match="does not use index sqljobs_jobs_claim") as caught:
        assert_uses_index(plan, "sqljobs_jobs_claim")
    assert "sqljobs_jobs" in str(caught.value) and "payload" in str(caught.value)


def test_an_index_named_but_a_table_read_whole_fails_too(app: App) -> None:
    marker = "%(id)s" if is_pg(app) else ":id"
    sql = (
        f"SELECT a.id FROM sqljobs_jobs a, sqljobs_jobs b WHERE a.id = {marker} "
        "AND b.payload = a.payload"
    )
    plan = explain(app, sql, {"id": 1})
    assert_uses_index(plan, _pkey(app))
    with pytest.raises(AssertionError, match="reads all of sqljobs_jobs"):
        assert_uses_index(plan, _pkey(app), table="sqljobs_jobs")


def test_analyze_runs_the_statement_on_postgresql_only(app: App) -> None:
    if not is_pg(app):
        with pytest.raises(ValueError, match="PostgreSQL's"):
            explain(app, _by_id(app), {"id": 1}, analyze=True)
        return
    plan = explain(app, _by_id(app), {"id": 1}, analyze=True)
    assert "Shared Hit Blocks" in plan.nodes[0].raw and "Actual Rows" in plan.nodes[0].raw
