"""A throwaway PostgreSQL server of the tests' own, for the tests that stop, restart or
starve one: the shared server at 127.0.0.1:5432 serves every other test (and anyone
else on the machine), so no test takes that one down.

The cluster lives in a temporary directory owned by the ``postgres`` system user (initdb
refuses root), listens on a free loopback port with trust auth, and is removed on
:meth:`PrivateCluster.destroy`. ``fsync=off`` keeps it quick; durability across an OS crash
is not what these tests exercise (a server restart still writes and replays its WAL).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path


def _bindir() -> Path | None:
    root = Path("/usr/lib/postgresql")
    if not root.is_dir():
        return None
    for version in sorted(root.iterdir(), key=lambda p: p.name, reverse=True):
        if (version / "bin" / "initdb").exists():
            return version / "bin"
    return None


def available() -> str | None:
    """Why a private cluster cannot be made here, or None when it can."""
    if _bindir() is None:
        return "PostgreSQL's server binaries (initdb, pg_ctl) are not installed"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "there is no 'postgres' system user to own a private cluster"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PrivateCluster:
    """One PostgreSQL server: ``start``, ``stop``, ``restart``, and ``url(database)``."""

    def __init__(self, settings: Sequence[str] = ()) -> None:
        """``settings``: more ``postgresql.conf`` lines (``"checkpoint_timeout = 30s"``)."""
        bindir = _bindir()
        if bindir is None:
            raise RuntimeError(available() or "no PostgreSQL binaries")
        self.bindir = bindir
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="sqljobs-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        owner = pwd.getpwnam("postgres")
        os.chown(self.root, owner.pw_uid, owner.pw_gid)
        self._as_postgres(
            [
                str(bindir / "initdb"),
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            ]
        )
        settings = [
            f"port = {self.port}",
            "listen_addresses = '127.0.0.1'",
            f"unix_socket_directories = '{self.root}'",
            "fsync = off",
            "full_page_writes = off",
            "max_connections = 200",
            "shared_buffers = 64MB",
            *settings,
        ]
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(settings) + "\n")
        self.start()
        self._as_postgres(
            [
                str(bindir / "createdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "test",
            ]
        )

    def _as_postgres(self, argv: list[str], timeout: float = 120) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *argv],
            check=True,
            capture_output=True,
            timeout=timeout,
        )

    def url(self, database: str = "test") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self._ctl("start", "-w", "-l", str(self.log))

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` ends sessions cleanly, ``immediate`` is a crash (WAL
        replay at the next start)."""
        self._ctl("stop", "-w", "-m", mode)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def _ctl(self, *args: str) -> None:
        self._as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.data), *args])

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
