"""A barrier's state watched until it is decided: what a processor needs of a barrier.

:class:`DecisionWatch` (made by :meth:`Barriers.watch_decision` and
:meth:`Barriers.join_and_watch`) holds one of kazoo's one-shot watches on the state node and
re-arms it only while the state is undecided: a decided barrier stays decided, so neither the
decision nor the barrier's later removal by retention costs another read. When the watch fires,
the state is read again, on kazoo's event thread, or, given ``hand_off``, wherever
``hand_off(reread)`` runs it (a member group's own thread: the event then goes from kazoo's
connection thread straight to that thread, :func:`~metadata.zk.handler.inline`).
"""

from __future__ import annotations

from collections.abc import Callable

from kazoo.protocol.states import WatchedEvent, ZnodeStat

from metadata.errors import CorruptDataError
from metadata.model import BarrierState
from metadata.zk.errors import ZkStoreError
from metadata.zk.handler import inline
from metadata.zk.ops import ZkOps
from metadata.zk.watch import Watch

__all__ = ["DecisionWatch", "HandOff"]

#: ``hand_off(reread)``: run ``reread()`` soon, on the caller's thread; must not block.
HandOff = Callable[[Callable[[], None]], None]

_DECIDED = (BarrierState.DONE, BarrierState.TIMED_OUT)
_DECIDED_BYTES = frozenset(state.encode() for state in _DECIDED)


class DecisionWatch:
    """Barrier state at ``path`` watched until decided (see the module docstring); ``decode``
    turns the node's data into a state (CorruptDataError if it is none)."""

    def __init__(
        self,
        ops: ZkOps,
        path: str,
        decode: Callable[[bytes], BarrierState],
        callback: Callable[[BarrierState | None], None],
        on_error: Callable[[Exception], None],
        *,
        hand_off: HandOff | None = None,
    ) -> None:
        self._ops = ops
        self.path = path
        self._decode = decode
        self.watch = Watch(ops.log, "barrier decision", path)
        self._callback = callback
        self._on_error = on_error

        def on_event(_event: WatchedEvent) -> None:
            """kazoo's watch fired (the state changed or is gone, or the session ended)."""
            if self.watch.stopped:
                return
            if hand_off is None:
                self.reread()
            else:
                hand_off(self.reread)

        self.on_event = on_event if hand_off is None else inline(on_event)

    def settle(self, found: tuple[bytes, ZnodeStat] | None) -> None:
        """Deliver what a read of the state found (None: the barrier is gone)."""
        if found is None:
            self.watch.deliver(self._callback, None)
            self.watch.stop()
            return
        try:
            state = self._decode(found[0])
        except CorruptDataError:
            self._ops.log.exception("zk.barrier_state_corrupt", path=self.path)
            return  # the watch stays: a leader's next write may mend it
        self.watch.deliver(self._callback, state)
        if state in _DECIDED:
            self.watch.stop()  # decided for good: nothing more to see

    def reread(self) -> None:
        """Read the state again after the watch fired. A decided state (the usual news) needs
        no new watch; anything else is read once more with the watch re-armed. A failure ends
        the watch and calls ``on_error``."""
        if self.watch.stopped:
            return
        try:
            found = self._ops.get_watched(self.path, "read barrier state", None)
            if found is not None and found[0] not in _DECIDED_BYTES:
                found = self._ops.get_watched(self.path, "read barrier state", self.on_event)
        except ZkStoreError as exc:
            self._ops.log.warning("zk.barrier_reread_failed", path=self.path, error=repr(exc))
            if not self.watch.stopped:
                self.watch.stop()
                self._on_error(exc)
            return
        self.settle(found)
