"""Watches: a stoppable handle on kazoo's watch recipes, and a coalescing children watch.

:class:`Watch` is what the recipes' ``watch*`` methods return. :class:`CoalescedChildrenWatch`
re-reads a node's children a moment after a change, so a burst of changes costs one read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, WatchedEvent

from metadata.zk.ops import ZkOps

__all__ = ["CoalescedChildrenWatch", "Watch"]


class Watch:
    """Returned by the store's ``watch*`` methods; :meth:`stop` ends the callbacks.

    kazoo removes a watch only when its next event arrives, so after :meth:`stop` the callback is
    simply not called any more. A callback that raises is logged (``zk.watch_callback_failed``,
    with the traceback) and the watch stays in place: one bad event must not end the watching.
    """

    def __init__(self, log: Any, kind: str, path: str) -> None:
        self._log = log
        self.kind = kind
        self.path = path
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def deliver(self, callback: Callable[..., None], *args: Any) -> bool:
        """Call ``callback(*args)`` unless stopped; returns False to tell kazoo to stop."""
        if self._stopped.is_set():
            return False
        try:
            callback(*args)
        except Exception:
            self._log.exception("zk.watch_callback_failed", watch=self.kind, path=self.path)
        return not self._stopped.is_set()


class CoalescedChildrenWatch:
    """A children watch that re-reads the list ``delay_s`` after a change (not at once), so a
    burst of changes costs one read. ``callback(names)`` returns False to end the watch; the
    watch also ends when the node is gone. The first read (:meth:`fetch`) is synchronous; later
    ones run on a timer thread, and a failed re-read (connection trouble) is retried, logged,
    until the node is gone or the session is closed."""

    def __init__(
        self, ops: ZkOps, path: str, callback: Callable[[list[str]], bool], delay_s: float
    ) -> None:
        self._ops = ops
        self._path = path
        self._callback = callback
        self._delay_s = delay_s
        self._lock = threading.Lock()
        self._pending = False
        self._ended = False

    def fetch(self) -> None:
        with self._lock:
            self._pending = False
            if self._ended:
                return
        try:
            names = self._ops.client.get_children(self._path, watch=self._on_event)
        except NoNodeError:
            self._ended = True
            return
        if not self._callback(names):
            self._ended = True

    def _on_event(self, event: WatchedEvent) -> None:
        if event.type == EventType.DELETED:
            self._ended = True
            return
        with self._lock:
            if self._pending or self._ended:
                return
            self._pending = True
        timer = threading.Timer(self._delay_s, self._refetch)
        timer.daemon = True
        timer.start()

    def _refetch(self) -> None:
        while True:
            try:
                self.fetch()
                return
            except (ConnectionLoss, ConnectionClosedError, SessionExpiredError):
                if not self._ops.client.connected and self._ops.client.state == "LOST":
                    return
                self._ops.log.warning("zk.barrier_participants_reread_failed", path=self._path)
                time.sleep(0.2)
            except KazooException:
                self._ops.log.exception("zk.barrier_participants_reread_failed", path=self._path)
                return
