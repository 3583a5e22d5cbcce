"""The SQLite engine: :class:`SqliteBackend`, its connections, its enqueue and its SQL."""

from .backend import SqliteBackend
from .connections import split_script
from .sql import MIGRATIONS, Q

__all__ = ["MIGRATIONS", "Q", "SqliteBackend", "split_script"]
