"""Wake-ups (guarantee 8): the notifier protocol, on its own and behind each backend."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

import sqljobs
from sqljobs.notifiers import EVERY_QUEUE, LocalNotifier

from .conftest import is_pg, wait_until


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
    app.add_wakeup(woken)
    app.enqueue("t", known=False)
    assert woken.is_set(), "set before enqueue returned: no database round trip needed"
    app.remove_wakeup(woken)
    woken.clear()
    app.enqueue("t", known=False)
    assert not woken.is_set()


# -- behind each backend: the contract a waiting worker relies on --------------------------


def test_a_commit_in_another_process_reaches_a_waiting_subscriber(url: str) -> None:
    """A backend that pushes calls its subscribers; one that does not moves its
    change_marker, the cheap check a waiting worker polls. Either way the news arrives
    without a claim, and nothing moves while nothing commits."""
    backend = sqljobs.App(url).open_backend()
    woken = Calls()
    backend.subscribe(woken)
    if backend.pushes_changes:
        assert woken.wait(), "a listener wakes everyone once it listens: it may have missed news"
    before = backend.change_marker()
    assert before is not None
    assert backend.change_marker() == before, "nothing committed, nothing changed"

    enqueue_in_another_process(url)

    if backend.pushes_changes:
        assert woken.wait(), "the subscriber was woken by the other process's enqueue"
    wait_until(lambda: backend.change_marker() != before, what="the change marker to move")
    assert backend.pushes_changes == is_pg(url)


@pytest.mark.parametrize("url", ["postgres"], indirect=True)  # SQLite does not push
def test_a_subscriber_to_some_queues_is_woken_for_those_only(url: str) -> None:
    backend = sqljobs.App(url).open_backend()
    mail, any_queue = Calls(), Calls()
    backend.subscribe(mail, queues=["mail"])  # subscribed first, so woken first
    backend.subscribe(any_queue)
    assert any_queue.wait() and mail.wait(), "everyone is woken once the listener listens"

    producer = sqljobs.App(url)
    producer.enqueue("t", known=False, queue="reports")
    assert any_queue.wait()
    assert not mail.event.is_set(), "a NOTIFY for 'reports' is not news for 'mail'"
    producer.enqueue("t", known=False, queue="mail")
    assert mail.wait()


def test_a_new_schedule_is_announced_to_every_subscriber(url: str) -> None:
    """A schedule that is new may fall due before waiting workers would next look."""
    backend = sqljobs.App(url).open_backend()
    mail = Calls()
    backend.subscribe(mail, queues=["mail"])
    if backend.pushes_changes:
        assert mail.wait()
    before = backend.change_marker()
    sqljobs.App(url).schedule("nightly", every=3600, task="t", queue="reports", known=False)
    if backend.pushes_changes:
        assert mail.wait(), "schedules concern every queue"
    wait_until(lambda: backend.change_marker() != before, what="the change marker to move")


def test_a_closed_notifier_listens_again_when_used_again(url: str) -> None:
    backend = sqljobs.App(url).open_backend()
    woken = Calls()
    backend.subscribe(woken)
    if backend.pushes_changes:
        assert woken.wait()
    backend.close()
    backend.close()
    before = backend.change_marker()  # in use again
    if backend.pushes_changes:
        assert woken.wait(), "a new listener, and its first wake-up"
    enqueue_in_another_process(url)
    wait_until(lambda: backend.change_marker() != before, what="the change marker to move")


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_poll_only_mode_pushes_nothing_and_has_no_marker(url: str) -> None:
    """For PgBouncer in transaction mode: no LISTEN, so workers rely on their poll."""
    backend = sqljobs.App(url, backend_options={"listen": False}).open_backend()
    backend.subscribe(Calls())
    assert not backend.pushes_changes and backend.change_marker() is None
