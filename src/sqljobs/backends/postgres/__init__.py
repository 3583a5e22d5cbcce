"""The PostgreSQL engine: :class:`PostgresBackend`, its pool, its enqueue and its SQL."""

from .backend import PostgresBackend
from .pool import FIRST_CONNECTION_WAIT, EndedWhileIdle, described

__all__ = ["FIRST_CONNECTION_WAIT", "EndedWhileIdle", "PostgresBackend", "described"]
