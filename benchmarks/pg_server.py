"""The PostgreSQL server: scratch databases, its statistics, and what it does with no queue
library at all (pgbench, a bare psycopg loop), the physical references for sqljobs' drain.

``BENCH_PG_URL`` (else the test suite's ``SQLJOBS_TEST_PG``) names an existing database on
a server where the user may create databases; every repetition gets its own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from common import Sample

ADMIN_URL = os.environ.get(
    "BENCH_PG_URL", os.environ.get("SQLJOBS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
)


def unreachable() -> str:
    """Why the server cannot be used ("" if it can), for a SKIPPED row."""
    try:
        with psycopg.connect(ADMIN_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"PostgreSQL not reachable at {ADMIN_URL} ({message}); set BENCH_PG_URL"
    return ""


def server_version() -> str:
    with psycopg.connect(ADMIN_URL, connect_timeout=3) as conn:
        return str(conn.execute("SHOW server_version").fetchone()[0]).split()[0]  # type: ignore[index]


def _admin(sql: str, params: tuple[Any, ...] = (), attempts: int = 30) -> Any:
    """One statement on the admin database on a fresh connection; its first row, if any.
    Retried for a while: the test suite on this shared machine restarts the server."""
    for attempt in range(1, attempts + 1):
        try:
            with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
                cur = conn.execute(sql, params)
                return cur.fetchone() if cur.description else None
        except psycopg.OperationalError:
            if attempt == attempts:
                raise
            time.sleep(1.0)


@contextmanager
def scratch_db(tag: str) -> Iterator[str]:
    """A fresh empty database for one repetition, dropped (forcibly) afterwards."""
    name = f"bench_{tag}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    _admin(f"CREATE DATABASE {name}")
    try:
        yield ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def transactions(url: str) -> float:
    """Transactions committed or rolled back so far in the database of ``url``, read from
    the admin database so the reading itself is not counted. PostgreSQL 15 flushes a
    backend's counters at most once a second (an idle one's within 10 s)."""
    row = _admin("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                 (url.rsplit("/", 1)[1],))  # fmt: skip
    if row is None:
        raise RuntimeError(f"no statistics for {url}")
    return float(row[0])


# -- pgbench -------------------------------------------------------------------------------

UPDATE_SCRIPT = (
    "\\set aid random(1, 100000 * :scale)\n"
    "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n"
)


def pgbench_missing() -> str:
    return "" if shutil.which("pgbench") else "pgbench is not on PATH (postgresql-client)"


def pgbench_update(url: str, clients: int = 8, seconds: int = 5) -> Sample:
    """Autocommit single-row UPDATE transactions per second (``pgbench -f``, 8 clients):
    what one durable commit per job would allow at most."""
    subprocess.run(["pgbench", "-i", "-q", url], check=True, capture_output=True)
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(UPDATE_SCRIPT)
        script.flush()
        command = ["pgbench", "-n", "-c", str(clients), "-j", "2", "-T", str(seconds),
                   "-f", script.name, url]  # fmt: skip
        done = subprocess.run(command, check=True, capture_output=True, text=True)
    match = re.search(r"tps = ([\d.]+) \(without initial", done.stdout)
    if match is None:
        raise RuntimeError(f"no tps in pgbench output:\n{done.stdout}")
    return {"tps": float(match.group(1))}
