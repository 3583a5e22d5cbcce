"""Raw SQL on the queue's own database, for the broken variants and for measuring.

One small wrapper over a DB-API connection in autocommit mode, so the same ``?`` SQL
runs on sqlite3 and psycopg; plus scratch databases that the lab creates and drops.
"""

from __future__ import annotations

import sqlite3
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"


def is_postgres(url: str) -> bool:
    return url.startswith(("postgres://", "postgresql://"))


def sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:///")


class Db:
    """An autocommit connection that speaks ``?`` on both backends."""

    def __init__(self, url: str) -> None:
        self.postgres = is_postgres(url)
        self.statements = 0
        if self.postgres:
            import psycopg

            self.conn: Any = psycopg.connect(url, autocommit=True)
        else:
            self.conn = sqlite3.connect(sqlite_path(url), isolation_level=None, timeout=30)
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA busy_timeout = 30000")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        self.statements += 1
        if self.postgres:
            sql = sql.replace("?", "%s")
        return self.conn.execute(sql, tuple(params))

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return list(self.execute(sql, params).fetchall())

    def value(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Db:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


@contextmanager
def scratch_database(backend: str, url: str | None = None) -> Iterator[str]:
    """A fresh, empty database for one experiment, removed afterwards.

    SQLite: a new file (beside ``url``'s file if given, else in a temp folder).
    PostgreSQL: a new database on ``url``'s server (default: local), dropped at the end.
    """
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="sqljobs-lab-") as tmp:
            folder = Path(sqlite_path(url)).parent if url else Path(tmp)
            path = folder / f"sqljobs-lab-{uuid.uuid4().hex[:8]}.db"
            try:
                yield f"sqlite:///{path}"
            finally:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    import psycopg

    admin_url = url or DEFAULT_PG
    name = f"sqljobs_lab_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
