"""What PostgresBackend gives the parts mixed into it (the enqueue): declared once, for
the type checker, so each part can be read and checked on its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .dialect import Dialect

if TYPE_CHECKING:
    import psycopg

    from ..jobs import EnqueueResult, NewJob
    from ..notifiers.postgres import PostgresNotifier

T = TypeVar("T")


class PostgresPart(Dialect):
    """Base of the PostgresBackend mixins; PostgresBackend provides all of this."""

    if TYPE_CHECKING:
        schema: str
        server_clock: bool
        clock: Callable[[], float]
        notifier: PostgresNotifier

        def _run(
            self,
            work: Callable[[psycopg.Connection[Any]], T],
            attempts: int = 5,
            transaction: bool = True,
        ) -> T: ...

        def _insert_dependent(self, conn: Any, job: NewJob) -> EnqueueResult: ...

    def _caller_now(self) -> dict[str, float]:
        """The ``now`` an enqueue's statements read when the App's clock is theirs (see
        postgres.on_client_clock): passed by hand, since they may run on the caller's
        connection, which no clock cursor of ours fills it in on."""
        return {} if self.server_clock else {"now": self.clock()}
