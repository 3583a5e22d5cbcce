"""PgBouncer for the tests: Debian's ``pgbouncer`` in front of the tests' PostgreSQL, one
process per pool mode, each on a free port with an ini file of its own (never the system
service). Transaction mode gets a small server pool, so a worker's connections share
server sessions the way they do in production, and anything that rests on session state
shows up; session mode gets a server session per client connection."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

MODES = ("transaction", "session")
SERVER_SESSIONS = {"transaction": 4, "session": 40}
"""Server sessions per database: few in transaction mode, so that client connections take
turns on them; in session mode each pooled client connection holds one."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PgBouncer:
    """One pgbouncer process in ``mode`` in front of the server ``upstream`` names
    (``postgresql://user@host:port/db``: its user, with no password, is let in)."""

    def __init__(self, mode: str, upstream: str, directory: Path) -> None:
        self.mode = mode
        self.port = free_port()
        parts = urlsplit(upstream)
        self.user = parts.username or "postgres"
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "users.txt").write_text(f'"{self.user}" ""\n')
        (directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={parts.hostname or '127.0.0.1'} port={parts.port or 5432}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {directory / 'users.txt'}\n"
            f"pool_mode = {mode}\n"
            f"default_pool_size = {SERVER_SESSIONS[mode]}\n"
            "max_client_conn = 400\n"
        )
        self.log = directory / "pgbouncer.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        command = [shutil.which("pgbouncer") or "pgbouncer"]
        if os.geteuid() == 0:  # it refuses to run as root; it reads its files first
            command += ["-u", self.user]
        command.append(str(self.directory / "pgbouncer.ini"))
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgbouncer did not listen in {timeout} s")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()  # SIGTERM: pgbouncer's immediate shutdown
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def url(self, database: str, options: str = "") -> str:
        """The URL of ``database`` through this pooler, with ``options`` as its query."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}" + (
            f"?{options}" if options else ""
        )
