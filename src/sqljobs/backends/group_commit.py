"""Group commit: writes that many threads ask for at the same moment, committed together.

A thread that asks for a write queues it and takes its turn at the writer; whoever gets
the turn writes every write queued by then in one transaction, so a commit (and its wait
for the disk) serves all of them, and the others find theirs done when their turn comes.
Nothing waits for company: a write alone is written at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Out = TypeVar("Out")

log = logging.getLogger("sqljobs.backend")


class _Request(Generic[Item, Out]):
    __slots__ = ("item", "out", "state")

    def __init__(self, item: Item) -> None:
        self.item = item
        self.out: Out | None = None
        self.state = "queued"  # then "taken" into a batch, then "done" or "failed"


class GroupCommit(Generic[Item, Out]):
    """Runs ``write_all(items)`` (one transaction, returning an outcome per item, in order)
    for the items threads :meth:`submit` at once, and ``write_one(item)`` for an item
    alone. When a batch's transaction fails, each of its items is tried alone, so that one
    item's error is its own thread's, never its neighbours'."""

    def __init__(
        self,
        write_all: Callable[[Sequence[Item]], Sequence[Out]],
        write_one: Callable[[Item], Out],
    ) -> None:
        self._write_all = write_all
        self._write_one = write_one
        self._queued: list[_Request[Item, Out]] = []
        self._queue_lock = threading.Lock()
        self._turn = threading.Lock()

    def submit(self, item: Item) -> Out:
        """Write ``item`` (with whatever else is queued by then) and return its outcome."""
        request: _Request[Item, Out] = _Request(item)
        with self._queue_lock:
            self._queued.append(request)
        with self._turn:  # the writer before us has set the state of every item it took
            if request.state == "queued":
                with self._queue_lock:
                    batch, self._queued = self._queued, []
                for taken in batch:
                    taken.state = "taken"
                if len(batch) == 1:
                    return self._write_one(item)
                self._write(batch)
        if request.state == "failed":
            return self._write_one(item)
        return request.out  # type: ignore[return-value]

    def _write(self, batch: list[_Request[Item, Out]]) -> None:
        try:
            outs = self._write_all([r.item for r in batch])
        except BaseException as exc:
            for request in batch:
                request.state = "failed"
            if not isinstance(exc, Exception):
                raise
            log.debug("a group commit of %d writes failed (%s); each is tried alone",
                      len(batch), exc)  # fmt: skip
            return
        for request, out in zip(batch, outs, strict=True):
            request.out, request.state = out, "done"
