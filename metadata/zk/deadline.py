"""A time budget for the ZooKeeper calls one thread makes in a block (:class:`Deadlines`).

Each store call is bounded on its own (``retry_deadline_s`` of retries, ``op_timeout_s`` for an
answer), which lets a few calls in a row wait minutes on a server that neither answers nor
closes its sockets (a frozen or partitioned server). A caller whose calls must end by a given
time, whatever they are (the steps after a streaming batch's commit), sets one budget for all of
them::

    with store.within(10.0):          # every call this thread makes in the block:
        store.locality.write(where)   # waits, retries and gives up by the budget's end
        store.batches.record(entry, keep=50)

Inside the block every wait is capped by what is left (:meth:`Deadlines.cap`); once it is spent,
a call makes no further attempt and raises :class:`~metadata.zk.errors.StoreUnavailable`. Other
threads (kazoo's, a coordinator's) are not affected. Blocks nest: the inner one ends no later
than the outer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Deadlines"]


class Deadlines:
    """Per-thread deadlines (module docstring); ``clock``: seconds, monotonic."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._local = threading.local()

    def _current(self) -> float | None:
        deadline: float | None = getattr(self._local, "deadline", None)
        return deadline

    @contextmanager
    def within(self, seconds: float) -> Iterator[None]:
        """Calls of this thread in the block end within ``seconds`` (module docstring)."""
        if seconds < 0:
            raise ValueError(f"a budget cannot be negative, got {seconds}")
        outer = self._current()
        deadline = self._clock() + seconds
        self._local.deadline = deadline if outer is None else min(outer, deadline)
        try:
            yield
        finally:
            self._local.deadline = outer

    def remaining(self) -> float | None:
        """Seconds left of this thread's budget (0 once spent); None: no budget."""
        deadline = self._current()
        return None if deadline is None else max(0.0, deadline - self._clock())

    def cap(self, seconds: float) -> float:
        """``seconds``, or what is left of this thread's budget if that is less."""
        left = self.remaining()
        return seconds if left is None else min(seconds, left)
