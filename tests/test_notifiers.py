"""Wake-ups (guarantee 8): the notifier protocol, on its own and behind each backend."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import sqljobs
import sqljobs.notifiers.sqlite
from sqljobs.notifiers import EVERY_QUEUE, LocalNotifier, datagram

from .conftest import is_pg, wait_until, worker_thread


class Calls:
    """A callback that counts its calls and can be waited for."""

    def __init__(self) -> None:
        self.count = 0
        self.event = threading.Event()

    def __call__(self) -> None:
        self.count += 1
        self.event.set()

    def wait(self, timeout: float = 10.0) -> bool:
        woken = self.event.wait(timeout)
        self.event.clear()
        return woken


def enqueue_in_another_process(url: str, queue: str = "default") -> None:
    code = (
        "import sqljobs, sys; sqljobs.App(sys.argv[1]).enqueue('t', known=False, queue=sys.argv[2])"
    )
    subprocess.run([sys.executable, "-c", code, url, queue], check=True, timeout=60)


# -- in-process --------------------------------------------------------------------------


def test_a_local_announcement_wakes_the_subscribers_of_its_queues() -> None:
    notifier = LocalNotifier()
    mail, any_queue = Calls(), Calls()
    notifier.subscribe(mail, queues=["mail"])
    notifier.subscribe(any_queue)
    before = notifier.change_marker()

    notifier.announce(["reports"])
    assert (mail.count, any_queue.count) == (0, 1)
    notifier.announce(["mail", "reports"])
    assert (mail.count, any_queue.count) == (1, 2)
    notifier.announce()  # queues unknown: everyone
    notifier.announce([EVERY_QUEUE])
    assert (mail.count, any_queue.count) == (3, 4)
    assert notifier.change_marker() != before

    notifier.unsubscribe(mail)
    notifier.announce(["mail"])
    assert (mail.count, any_queue.count) == (3, 5)
    assert notifier.pushes


def test_an_enqueue_wakes_the_workers_of_its_own_app_at_once(url: str) -> None:
    app = sqljobs.App(url)
    woken = threading.Event()
    app._wakeups.subscribe(woken.set)
    app.enqueue("t", known=False)
    assert woken.is_set(), "set before enqueue returned: no database round trip needed"
    app._wakeups.unsubscribe(woken.set)
    woken.clear()
    app.enqueue("t", known=False)
    assert not woken.is_set()


# -- behind each backend: the contract a waiting worker relies on --------------------------


def test_a_commit_in_another_process_reaches_a_waiting_subscriber(url: str) -> None:
    """Both backends push: PostgreSQL by LISTEN/NOTIFY, SQLite by a datagram from the
    process that committed. The change marker moves too, the cheap check a woken worker
    reads before it spends a claim; nothing moves while nothing commits."""
    backend = sqljobs.App(url)._open_backend()
    woken = Calls()
    backend.subscribe(woken)
    assert backend.pushes_changes
    if is_pg(url):
        assert woken.wait(), "a listener wakes everyone once it listens: it may have missed news"
    before = backend.change_marker()
    assert before is not None
    assert backend.change_marker() == before, "nothing committed, nothing changed"

    enqueue_in_another_process(url)

    assert woken.wait(), "the subscriber was woken by the other process's enqueue"
    wait_until(lambda: backend.change_marker() != before, what="the change marker to move")


def test_a_subscriber_to_some_queues_is_woken_for_those_only(url: str) -> None:
    backend = sqljobs.App(url)._open_backend()
    mail, any_queue = Calls(), Calls()
    backend.subscribe(mail, queues=["mail"])  # subscribed first, so woken first
    backend.subscribe(any_queue)
    if is_pg(url):
        assert any_queue.wait() and mail.wait(), "everyone is woken once the listener listens"

    producer = sqljobs.App(url)
    producer.enqueue("t", known=False, queue="reports")
    assert any_queue.wait()
    assert not mail.event.is_set(), "a NOTIFY for 'reports' is not news for 'mail'"
    producer.enqueue("t", known=False, queue="mail")
    assert mail.wait()


def test_a_new_schedule_is_announced_to_every_subscriber(url: str) -> None:
    """A schedule that is new may fall due before waiting workers would next look."""
    backend = sqljobs.App(url)._open_backend()
    mail = Calls()
    backend.subscribe(mail, queues=["mail"])
    if is_pg(url):
        assert mail.wait()
    before = backend.change_marker()
    sqljobs.App(url).schedule("nightly", every=3600, task="t", queue="reports", known=False)
    assert mail.wait(), "schedules concern every queue"
    wait_until(lambda: backend.change_marker() != before, what="the change marker to move")


def test_a_closed_notifier_listens_again_when_used_again(url: str) -> None:
    backend = sqljobs.App(url)._open_backend()
    woken = Calls()
    backend.subscribe(woken)
    if is_pg(url):
        assert woken.wait()
    backend.close()
    backend.close()
    before = backend.change_marker()  # in use again
    if is_pg(url):
        assert woken.wait(), "a new listener, and its first wake-up"
    enqueue_in_another_process(url)
    assert woken.wait(), "the other process's enqueue reached the new listener"
    wait_until(lambda: backend.change_marker() != before, what="the change marker to move")


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_poll_only_mode_pushes_nothing_and_has_no_marker(url: str) -> None:
    """For PgBouncer in transaction mode: no LISTEN, so workers rely on their poll."""
    backend = sqljobs.App(url, backend_options={"listen": False})._open_backend()
    backend.subscribe(Calls())
    assert not backend.pushes_changes and backend.change_marker() is None


# -- SQLite: datagrams between the processes of one host ------------------------------------


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_sqlite_poll_only_mode_binds_no_socket_and_workers_read_the_counter(url: str) -> None:
    """``?listen=false`` on a SQLite URL: no socket beside the file; a worker falls back
    to reading the change counter every few milliseconds."""
    app = sqljobs.App(url + "?listen=false")
    app.task(name="t")(lambda: None)
    backend = app._open_backend()
    backend.subscribe(Calls())
    assert not backend.pushes_changes and backend.change_marker() is not None
    folder = datagram.folder_for(backend.path)  # type: ignore[attr-defined]
    assert not os.path.exists(folder) or not os.listdir(folder)
    with worker_thread(app) as worker:
        wait_until(lambda: worker.counters["claims"] >= 1, what="the first claim")
        assert worker._producer.checks_changes  # (white box)


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_a_database_deep_in_a_tree_is_woken_through_the_folders_descriptor(
    url: str, tmp_path: Path
) -> None:
    """A socket path holds at most 103 bytes: deeper folders are reached, on Linux,
    through /proc/self/fd/N/name, in the listener and in every sender."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    deep_url = f"sqlite:///{deep}/jobs.db"
    backend = sqljobs.App(deep_url)._open_backend()
    woken = Calls()
    backend.subscribe(woken)
    assert backend.pushes_changes
    assert len(os.fsencode(backend.notifier._listener.path)) > datagram.MAX_ADDRESS  # type: ignore[attr-defined]
    enqueue_in_another_process(deep_url)
    assert woken.wait(), "the other process's datagram reached the deep folder"


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_without_a_socket_address_workers_fall_back_to_the_counter(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No way to address the folder (a path too long and no /proc, as on macOS): nothing
    is pushed, and waiting workers read the change counter every few milliseconds."""
    monkeypatch.setattr(datagram, "FD_FOLDERS", str(tmp_path / "no-proc"))
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    backend = sqljobs.App(f"sqlite:///{deep}/jobs.db")._open_backend()
    backend.subscribe(Calls())
    assert not backend.pushes_changes
    assert backend.change_marker() is not None


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_the_socket_of_a_killed_listener_is_removed_by_the_next_announcement(url: str) -> None:
    """A SIGKILLed process leaves its socket file; the first sender that finds nobody
    behind it removes it, and the living listeners still hear."""
    backend = sqljobs.App(url)._open_backend()
    woken = Calls()
    backend.subscribe(woken)
    folder = datagram.folder_for(backend.path)  # type: ignore[attr-defined]
    code = (
        "import sqljobs, sys, time; b = sqljobs.App(sys.argv[1])._open_backend(); "
        "b.subscribe(lambda: None); print('bound', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline().strip() == b"bound"
    assert len(os.listdir(folder)) == 2
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    child.stdout.close()
    assert len(os.listdir(folder)) == 2, "nobody removed the killed process's socket"

    sqljobs.App(url).enqueue("t", known=False)

    assert woken.wait(), "the living listener heard the enqueue"
    assert os.listdir(folder) == [os.path.basename(backend.notifier._listener.path)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_an_enqueue_in_the_callers_transaction_is_found_when_the_caller_commits(
    url: str,
) -> None:
    """Nothing can announce a commit the caller makes later: the enqueue says one is
    coming, and the listener reads the change counter every 2 ms for a while (it does
    not look at all otherwise), waking its subscribers when it moved."""
    backend = sqljobs.App(url)._open_backend()
    woken = Calls()
    backend.subscribe(woken)
    producer = sqljobs.App(url)
    producer.migrate()
    conn = sqlite3.connect(backend.path, isolation_level=None)  # type: ignore[attr-defined]
    conn.execute("BEGIN IMMEDIATE")
    producer.enqueue("t", known=False, connection=conn)
    wait_until(lambda: backend.notifier.heard() == 1, what="the coming datagram")  # type: ignore[attr-defined]
    assert not woken.event.is_set(), "nothing to claim before the caller commits"
    conn.execute("COMMIT")
    assert woken.wait(1.5), "the watch found the commit within its window"
    conn.close()


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_an_idle_listener_blocks_and_never_looks_at_the_counter(url: str) -> None:
    """Commits that announce nothing (another worker's heartbeat, another program's
    write) wake no one: the listener looks at data_version once as it starts, then only
    while a commit is coming, so an idle host costs nothing. What another program
    inserts is found by the workers' fallback poll."""
    sqljobs.App(url).migrate()
    backend = sqljobs.App(url)._open_backend()
    woken = Calls()
    backend.subscribe(woken)
    conn = sqlite3.connect(backend.path, isolation_level=None)  # type: ignore[attr-defined]
    conn.execute("CREATE TABLE another_programs_table (x)")  # a commit, nothing more
    conn.close()
    # a datagram after the commit that wakes no one (a cancel of no job here): once it is
    # heard, the listener has passed its loop since the commit
    other = sqljobs.App(url)._open_backend()
    other.notifier.announce_events("cancel", [1])  # type: ignore[attr-defined]
    wait_until(lambda: backend.notifier.heard() == 1, what="the datagram after the commit")  # type: ignore[attr-defined]
    assert backend.notifier.looks == 1  # type: ignore[attr-defined]
    assert not woken.event.is_set()
    # and it blocks: no periodic look is coming either
    assert backend.notifier._listener._socket.gettimeout() is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_an_idle_sqlite_worker_sleeps_until_a_timer_or_a_wake_up(url: str) -> None:
    """With the datagram listener a waiting worker is not woken every few milliseconds
    to read the change counter: over an idle second it passes its loop a few times (its
    timers), where the 2 ms check made it pass about 500 times."""
    app = sqljobs.App(url)
    ran = threading.Event()

    @app.task
    def t() -> None:
        ran.set()

    with worker_thread(app, poll_interval=0.25) as worker:
        wait_until(lambda: worker.counters["claims"] >= 1, what="the first claim")
        assert not worker._producer.checks_changes  # (white box)
        loops, polled = worker.counters["loops"], worker.counters["due_checks"]
        # the window: four polls (a second), where the 2 ms check would pass 500 times
        wait_until(lambda: worker.counters["due_checks"] >= polled + 4, what="four polls")
        idle_loops = worker.counters["loops"] - loops
        polls = worker.counters["due_checks"] - polled
        enqueue_in_another_process(url, "default")
        assert ran.wait(10), "a job enqueued by another process woke the worker"
    assert idle_loops <= 2 * polls, f"{idle_loops} passes over {polls} idle polls"


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_a_poll_only_worker_claims_when_its_own_app_enqueues(url: str) -> None:
    """Poll-only mode has no change marker: the App's own count of wake-ups is what tells
    a stepped worker that an enqueue of its process made work (else it waited for its
    poll, here 60 s)."""
    app = sqljobs.App(url, backend_options={"listen": False})
    app.task(name="t")(lambda: None)
    worker = sqljobs.Worker(app, install_signal_handlers=False, poll_interval=60.0)
    assert worker.start()
    try:
        for _ in range(3):  # the first claim, the question of what is due, and idle
            worker.run_once()
        assert worker.counters["claimed"] == 0
        app.enqueue("t")
        step = worker.run_once()
        assert step.claimed == 1, "the local wake-up made the worker claim"
    finally:
        worker.stop()
        while not worker.run_once().stopped:
            pass
        worker.close()
