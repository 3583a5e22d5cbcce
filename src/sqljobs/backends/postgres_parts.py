"""What PostgresBackend gives the parts mixed into it (enqueue, schedules): declared once,
for the type checker, so each part can be read and checked on its own."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ..jobs import EnqueueResult, NewJob

if TYPE_CHECKING:
    import psycopg

T = TypeVar("T")


class PostgresPart:
    """Base of the PostgresBackend mixins; PostgresBackend provides all of this."""

    if TYPE_CHECKING:
        schema: str
        channel: str
        listen: bool
        notify_window: float
        server_clock: bool
        queries: dict[str, str]
        _lock: threading.Lock
        _last_notify: dict[str, float]
        _trailing: dict[str, threading.Timer]

        def now(self) -> float: ...

        def _run(
            self,
            work: Callable[[psycopg.Connection[Any]], T],
            attempts: int = 5,
            transaction: bool = True,
        ) -> T: ...

        def _fetch(
            self, name: str, params: Mapping[str, Any] | None = None, sql: str | None = None
        ) -> list[Any]: ...

        def enqueue_jobs(
            self, jobs: Iterable[NewJob], connection: Any | None = None
        ) -> list[EnqueueResult]: ...
