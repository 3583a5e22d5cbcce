"""Group commit: writes asked for at the same moment share one transaction, and a failed
batch gives every write its own try, so one write's error is never another's."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from sqljobs.backends.group_commit import GroupCommit

from .conftest import wait_until


class Recorder:
    """write_all/write_one that record their calls; the first write_one waits for
    ``release`` so that other writes queue behind it."""

    def __init__(self, fail_all: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.alone: list[int] = []
        self.release = threading.Event()
        self.fail_all = fail_all

    def write_all(self, items: Sequence[int]) -> list[int]:
        self.batches.append(list(items))
        if self.fail_all:
            raise RuntimeError("the batch's transaction failed")
        return [item * 10 for item in items]

    def write_one(self, item: int) -> int:
        if not self.alone:
            self.release.wait(10)
        self.alone.append(item)
        if item == 13:
            raise ValueError("item 13 is refused")
        return item * 10


def _submit_all(
    writer: GroupCommit[int, int], recorder: Recorder, items: list[int]
) -> dict[int, object]:
    """Submit items[0] first (it holds the turn), the rest once it does; wait until they
    queue, release the first, and collect what each thread got."""
    got: dict[int, object] = {}

    def submit(item: int) -> None:
        try:
            got[item] = writer.submit(item)
        except Exception as exc:
            got[item] = exc

    first = threading.Thread(target=submit, args=(items[0],))
    first.start()
    wait_until(lambda: writer._turn.locked(), what="the first write holds the turn")
    rest = [threading.Thread(target=submit, args=(i,)) for i in items[1:]]
    for thread in rest:
        thread.start()
    wait_until(lambda: len(writer._queued) == len(rest), what="the others to queue")
    recorder.release.set()
    for thread in [first, *rest]:
        thread.join(10)
    return got


def test_writes_queued_behind_a_write_share_one_batch() -> None:
    recorder = Recorder()
    writer = GroupCommit(recorder.write_all, recorder.write_one)
    got = _submit_all(writer, recorder, [1, 2, 3, 4])
    assert got == {1: 10, 2: 20, 3: 30, 4: 40}
    assert recorder.alone == [1]
    assert len(recorder.batches) == 1 and sorted(recorder.batches[0]) == [2, 3, 4]


def test_a_failed_batch_gives_each_write_its_own_try_and_its_own_error() -> None:
    recorder = Recorder(fail_all=True)
    writer = GroupCommit(recorder.write_all, recorder.write_one)
    got = _submit_all(writer, recorder, [1, 12, 13, 14])
    assert got[1] == 10 and got[12] == 120 and got[14] == 140
    assert isinstance(got[13], ValueError), "the refused item's error is its own"
    assert sorted(recorder.alone) == [1, 12, 13, 14]


def test_a_write_alone_is_written_at_once_and_raises_its_own_error() -> None:
    recorder = Recorder()
    recorder.release.set()
    writer = GroupCommit(recorder.write_all, recorder.write_one)
    assert writer.submit(5) == 50
    with pytest.raises(ValueError, match="item 13"):
        writer.submit(13)
    assert recorder.batches == [] and writer._queued == []
