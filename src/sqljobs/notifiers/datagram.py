"""Wake-ups between the processes of one host: a Unix datagram socket per listener, in a
folder beside the database.

SQLite lives on one host, so a process that committed can tell the others directly. Each
process that waits for work binds one datagram socket in the folder (``jobs.db-wake/``
beside ``jobs.db``, as SQLite keeps ``jobs.db-wal``); an announcement after a commit is
one datagram to each socket there, naming the queues. A datagram costs a few
microseconds to send and nothing to wait for: the listener thread blocks in ``recv``.

Nothing here is trusted for correctness: a datagram may be dropped (the receiver's
buffer is full: it has wake-ups waiting anyway), a socket left by a killed process is
removed by the first sender that finds nobody behind it, and the caller keeps a slower
check for commits that no one announced.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Collection

log = logging.getLogger("sqljobs")

SOCKET_SUFFIX = ".sock"

MAX_ADDRESS = 103
"""The longest socket path every POSIX system we run on binds (``sun_path`` is 108 bytes
on Linux, 104 on macOS, each with its terminating NUL)."""

FD_FOLDERS = "/proc/self/fd"
"""On Linux, a path through an open descriptor of the folder: short whatever the
folder's own path, so a database deep in a tree still gets its sockets."""

MAX_MESSAGE = 2048
"""An announcement longer than this (very many queues) is sent as "every queue"."""

WAKE_ALL = "*"

READY_WAIT = 2.0
"""How long binding waits for the listener thread's first ``on_tick()``."""


def folder_for(database: str) -> str:
    """The folder of wake-up sockets for the SQLite file at ``database``."""
    return os.path.abspath(database) + "-wake"


def name_for_pid(pid: int) -> str:
    """A listener's socket name: its pid (to tell whose it is) and a random part."""
    return f"{pid}-{secrets.token_hex(4)}{SOCKET_SUFFIX}"


def usable(folder: str) -> bool:
    """Whether sockets in ``folder`` can be addressed here: Unix sockets exist, and either
    a path in the folder fits an address or Linux's descriptor paths can stand in."""
    return hasattr(socket, "AF_UNIX") and (
        _fits(os.path.join(folder, name_for_pid(2**22))) or os.path.isdir(FD_FOLDERS)
    )


def _fits(path: str) -> bool:
    return len(os.fsencode(path)) <= MAX_ADDRESS


class FolderAddress:
    """How sockets in ``folder`` are addressed: by their path where it fits, else through
    an open descriptor of the folder (``/proc/self/fd/N/name``), reopened when the folder
    was made anew."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._fd: int | None = None
        self._fd_of: tuple[int, int, int] | None = None  # (pid, device, inode)

    def base(self) -> str:
        """The prefix of every socket address in the folder (it must exist)."""
        if _fits(os.path.join(self.folder, name_for_pid(2**22))):
            return self.folder
        st = os.stat(self.folder)
        key = (os.getpid(), st.st_dev, st.st_ino)
        if self._fd is None or self._fd_of != key:
            self.close()
            self._fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
            self._fd_of = key
        return f"{FD_FOLDERS}/{self._fd}"

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None and self._fd_of is not None and self._fd_of[0] == os.getpid():
            with contextlib.suppress(OSError):
                os.close(fd)


def encode(names: Collection[str] | None) -> bytes:
    """The datagram for ``names`` (queues, or job events such as ``#cancel:12``; None:
    every queue), one per line."""
    if not names:
        return WAKE_ALL.encode()
    text = "\n".join(sorted(names)).encode()
    return text if len(text) <= MAX_MESSAGE else WAKE_ALL.encode()


def decode(message: bytes) -> list[str]:
    """The names a datagram carries (``["*"]`` for an empty one)."""
    return message.decode("utf-8", "replace").split("\n") if message else [WAKE_ALL]


class Sender:
    """Sends an announcement to every socket in the folder. The folder's listing is
    cached until its modification time changes (a listener bound or left), so an
    announcement costs one ``stat`` and one ``sendto`` per listener."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._pid = 0
        self._address = FolderAddress(folder)
        self._listing: tuple[int, list[tuple[str, str]]] = (-1, [])

    def send(self, message: bytes) -> int:
        """Send ``message`` to every listener; return how many took it."""
        targets = self._targets()
        if not targets:
            return 0
        sock = self._sender()
        sent = 0
        for address, path in targets:
            try:
                sock.sendto(message, address)
                sent += 1
            except (ConnectionRefusedError, FileNotFoundError):
                self._forget(path)  # its process is gone (killed, or closed meanwhile)
            except BlockingIOError:
                pass  # its buffer is full of wake-ups not yet read: one more adds nothing
            except OSError as exc:  # e.g. another user's socket: it still has its checks
                log.debug("wake-up to %s not sent: %s", path, exc)
        return sent

    def close(self) -> None:
        with self._lock:
            sock, self._socket = self._socket, None
            self._address.close()
            self._listing = (-1, [])
        if sock is not None:
            sock.close()

    def _sender(self) -> socket.socket:
        with self._lock:
            if self._socket is None or self._pid != os.getpid():  # (a forked child's own)
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sock.setblocking(False)
                self._socket, self._pid = sock, os.getpid()
            return self._socket

    def _targets(self) -> list[tuple[str, str]]:
        """(address to send to, path of the socket file) of every listener."""
        try:
            stamp = os.stat(self.folder).st_mtime_ns
        except OSError:
            return []  # no folder: nobody has ever listened
        with self._lock:
            cached_stamp, targets = self._listing
            if stamp == cached_stamp:
                return targets
            try:
                names = [n for n in os.listdir(self.folder) if n.endswith(SOCKET_SUFFIX)]
                base = self._address.base()
            except OSError:
                return []
            targets = [(f"{base}/{n}", os.path.join(self.folder, n)) for n in names]
            self._listing = (stamp, targets)
            return targets

    def _forget(self, path: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(path)
        with self._lock:
            self._listing = (-1, [])


class Listener:
    """A bound socket in the folder and the thread that reads it.

    ``on_message(names)`` is called on the thread for each datagram (as :func:`decode`
    gives them); ``on_tick()`` once before the constructor returns and then every
    ``tick()`` seconds (asked again after each datagram, which may change it; None: no
    ticks, the thread blocks until a datagram comes), however many datagrams come.
    """

    def __init__(
        self,
        folder: str,
        on_message: Callable[[list[str]], None],
        on_tick: Callable[[], None],
        tick: Callable[[], float | None],
    ) -> None:
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        name = name_for_pid(os.getpid())
        self.path = os.path.join(folder, name)
        self._address = FolderAddress(folder)
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.address = f"{self._address.base()}/{name}"
            self._socket.bind(self.address)
        except OSError:
            self._socket.close()
            self._address.close()
            raise
        self._on_message, self._on_tick, self._tick = on_message, on_tick, tick
        self._closing = threading.Event()
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="sqljobs-wake", daemon=True
        )
        self._thread.start()
        ready.wait(READY_WAIT)  # its first on_tick() is the baseline later ones compare with

    def close(self) -> None:
        """Stop the thread (woken by a datagram to itself) and remove the socket."""
        self._closing.set()
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(b"", self.address)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        self._socket.close()
        self._address.close()

    def _run(self, ready: threading.Event) -> None:
        self._guarded(self._on_tick)
        ready.set()
        ticked = time.monotonic()
        while not self._closing.is_set():
            interval = self._tick()
            if interval is None:
                self._socket.settimeout(None)  # nothing to look at: block
            else:
                self._socket.settimeout(max(0.001, ticked + interval - time.monotonic()))
            message = None
            try:
                message = self._socket.recv(MAX_MESSAGE + 1)
            except TimeoutError:
                pass
            except OSError as exc:
                if exc.errno in (errno.EBADF, errno.ENOTSOCK) or self._closing.is_set():
                    return  # closed under us
                log.warning("wake-up socket %s failed (%s): waiting on checks", self.path, exc)
                return
            if self._closing.is_set():
                return
            if message is not None:
                self._guarded(functools.partial(self._on_message, decode(message)))
            if interval is None:
                ticked = time.monotonic()  # a watch that starts now looks first in interval
            elif time.monotonic() >= ticked + interval:  # on time, however busy
                self._guarded(self._on_tick)
                ticked = time.monotonic()

    def _guarded(self, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception:  # one bad callback must not end wake-ups for everyone
            log.exception("a wake-up callback raised")
