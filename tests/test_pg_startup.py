"""A worker started while PostgreSQL cannot be reached waits, logged, and starts working
once it can: a deploy that starts workers before the database must not kill them."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from sqljobs import App, JobState

from .conftest import fresh_pg_database, wait_until, worker_thread

pytestmark = pytest.mark.postgres  # (conftest marks every pg_template user too)


@pytest.fixture
def url(pg_template: str) -> Iterator[str]:
    """PostgreSQL only here."""
    with fresh_pg_database(pg_template) as url:
        yield url


class Forwarder:
    """A TCP relay from a local port to PostgreSQL, switched on when the test says: before
    that, the port refuses connections like a server that is not up yet. ``delay`` holds
    each connection that long before it reaches the server, like a slow network."""

    def __init__(self, target: tuple[str, int], delay: float = 0.0) -> None:
        self.target = target
        self.delay = delay
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()  # nothing listens here until start()
        self._sockets: list[socket.socket] = []
        self.accepted = 0  # connections relayed so far

    def start(self) -> None:
        server = socket.create_server(("127.0.0.1", self.port))
        self._sockets.append(server)
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = server.accept()
                self.accepted += 1
                self._sockets.append(client)
                threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        time.sleep(self.delay)  # the slow network this relay stands for
        with contextlib.suppress(OSError):
            upstream = socket.create_connection(self.target)
            self._sockets.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()


def test_a_worker_waits_for_an_unreachable_database_then_runs(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    parts = urlsplit(url)
    relay = Forwarder((parts.hostname or "127.0.0.1", parts.port or 5432))
    relayed = url.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{relay.port}")
    producer = App(url)
    worker_app = App(relayed)

    @worker_app.task
    def hello() -> None: ...

    job_id = producer.enqueue("hello", known=False).id
    try:
        with caplog.at_level(logging.INFO, logger="sqljobs"), worker_thread(worker_app):
            wait_until(
                lambda: sum("database unreachable" in r.getMessage() for r in caplog.records) >= 2,
                what="two logged attempts to connect",
            )
            assert producer.stats().workers == 0
            relay.start()
            wait_until(lambda: (j := producer.get_job(job_id)) and j.state is JobState.DONE)
        warnings = [r for r in caplog.records if "database unreachable" in r.getMessage()]
        assert all(r.levelno == logging.WARNING for r in warnings)
        assert "retrying in" in warnings[0].getMessage()
        assert any("database reachable after" in r.getMessage() for r in caplog.records)
    finally:
        relay.close()


def test_a_worker_stopped_while_it_waits_for_the_database_returns(url: str) -> None:
    parts = urlsplit(url)
    relay = Forwarder((parts.hostname or "127.0.0.1", parts.port or 5432))
    app = App(url.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{relay.port}"))
    app.task(name="t")(lambda: None)
    with worker_thread(app) as worker:
        pass  # worker_thread stops it and fails if it does not return
    assert worker.stopped.is_set()


def test_opening_the_backend_connects_once_not_beside_the_pool(url: str) -> None:
    """The pool's first connection is the one an App's first statement uses; no second
    connection checks the URL beside it (on two cores, two at once slowed a worker's
    start-up by 2.5 ms). A URL that cannot connect still fails clearly: see
    test_postgres.py's test_a_wrong_password_or_database_fails_clearly_at_startup."""
    parts = urlsplit(url)
    relay = Forwarder((parts.hostname or "127.0.0.1", parts.port or 5432))
    relay.start()
    app = App(url.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{relay.port}"))
    try:
        assert app.stats().workers == 0
        assert relay.accepted == 1
    finally:
        app.close()
        relay.close()


def test_a_server_slow_to_answer_is_waited_for_not_taken_for_a_failure(url: str) -> None:
    """A first connection slower than FIRST_CONNECTION_WAIT: the backend connects once
    alone (a server that cannot be reached would fail there, clearly), finds the server
    slow but there, and works on a new pool."""
    from sqljobs.backends.postgres import FIRST_CONNECTION_WAIT

    parts = urlsplit(url)
    relay = Forwarder((parts.hostname or "127.0.0.1", parts.port or 5432),
                      delay=FIRST_CONNECTION_WAIT + 0.3)  # fmt: skip
    relay.start()
    app = App(url.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{relay.port}"))
    try:
        assert app.stats().workers == 0
        assert app.enqueue("t", known=False).created
    finally:
        app.close()
        relay.close()
