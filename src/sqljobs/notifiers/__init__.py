"""Wake-ups: guarantee 8 (low latency at a low idle cost) lives in this package.

A worker that has nothing to do sleeps; a notifier is what ends the sleep as soon as there
may be work, so an enqueue starts within milliseconds while an idle worker costs almost
nothing. One protocol (:class:`~sqljobs.notifiers.base.Notifier`), three implementations:

- :mod:`.local`: in-process. An App wakes the workers of its own process the moment an
  enqueue commits (an App holds one, and its workers subscribe to it).
- :mod:`.postgres`: LISTEN/NOTIFY across hosts. A listener thread per backend; enqueues
  NOTIFY inside their own statement (the SQL is in the backend's ``.sql`` files), at most
  once per queue per short window, with a trailing NOTIFY so the last job of a burst is
  never left to the fallback poll.
- :mod:`.sqlite` (with :mod:`.datagram`): the processes sharing a SQLite file share a
  host, so the one that committed sends a datagram to each waiting process's Unix socket
  in a folder beside the database. An enqueue in the caller's own transaction says a
  commit is coming, and the listeners read ``PRAGMA data_version`` (a counter in shared
  memory that moves when another connection commits) every 2 ms for a while. Where no
  socket can be bound, workers read that counter every few milliseconds instead.

A jittered poll in the worker is the fallback under all of them.
"""

from __future__ import annotations

from .base import EVERY_QUEUE, Notifier, Subscribers
from .local import LocalNotifier

__all__ = ["EVERY_QUEUE", "LocalNotifier", "Notifier", "Subscribers"]
