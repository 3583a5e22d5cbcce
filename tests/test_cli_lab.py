"""``sqljobs lab``'s helper processes leave no tracebacks: a PostgreSQL connection ended
under them (a server restart) is one line and a reconnect, and none outlives its run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sqljobs.lab import e5_periodic
from sqljobs.lab.claimticker import prepare

from .conftest import fresh_pg_database, wait_until

pytestmark = pytest.mark.processes  # the lab's helper processes


def _ticks(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slow
def test_a_claim_ticker_reconnects_when_its_connection_is_terminated(
    pg_template: str, tmp_path: Path
) -> None:
    import psycopg

    ticks = tmp_path / "ticks.log"
    with fresh_pg_database(pg_template) as url:
        prepare(url, time.time())
        proc = subprocess.Popen(
            [sys.executable, "-m", "sqljobs.lab.claimticker", url, "0.1", "0.02", "4"],
            env={**os.environ, "SQLJOBS_LAB_TICKS": str(ticks)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until(lambda: _ticks(ticks) >= 2, timeout=20, what="the first claimed ticks")
            with psycopg.connect(url, autocommit=True) as admin:
                ended = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
            assert ended is not None and ended[0] == 1
            before = _ticks(ticks)
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    # libpq words the same termination either way, depending on when the ticker next reads
    said = ("terminating connection due to administrator command", "server closed the connection")
    assert "connection lost (" in stderr and any(words in stderr for words in said), stderr
    assert _ticks(ticks) > before  # it went on claiming after the reconnect


def test_helper_processes_do_not_outlive_an_interrupted_run(tmp_path: Path) -> None:
    """E5 drops the scratch database next: a helper left running would die on it."""
    env = {**os.environ, "SQLJOBS_LAB_TICKS": str(tmp_path / "ticks.log")}
    before = _children()
    with pytest.raises(subprocess.TimeoutExpired):
        e5_periodic._run_replicas(["sqljobs.lab.ticker", "0.2", "0", "60"], env, 0.5)
    assert _children() <= before


def _children() -> set[int]:
    """This process's children, from /proc (a reaped one is gone)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            out.add(int(entry.name))
    return out
