"""The per-thread time budget of a block of ZooKeeper calls (metadata.zk.deadline)."""

from __future__ import annotations

import threading

import pytest

from metadata.zk.deadline import Deadlines


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_waits_are_capped_by_what_is_left_and_nothing_is_left_once_spent() -> None:
    clock = Clock()
    deadlines = Deadlines(clock)
    assert deadlines.remaining() is None and deadlines.cap(15.0) == 15.0  # no budget
    with deadlines.within(10.0):
        assert deadlines.cap(15.0) == 10.0 and deadlines.cap(1.0) == 1.0
        clock.now += 7
        assert deadlines.cap(15.0) == pytest.approx(3.0)
        clock.now += 5
        assert deadlines.remaining() == 0 and deadlines.cap(1.0) == 0
    assert deadlines.remaining() is None


def test_an_inner_block_ends_no_later_than_the_outer_and_other_threads_are_free() -> None:
    clock = Clock()
    deadlines = Deadlines(clock)
    seen: list[float | None] = []
    with deadlines.within(5.0):
        with deadlines.within(60.0):
            assert deadlines.remaining() == 5.0
            worker = threading.Thread(target=lambda: seen.append(deadlines.remaining()))
            worker.start()
            worker.join()
        with deadlines.within(2.0):
            assert deadlines.remaining() == 2.0
        assert deadlines.remaining() == 5.0
    assert seen == [None]
    with pytest.raises(ValueError, match="cannot be negative"), deadlines.within(-1):
        pass
