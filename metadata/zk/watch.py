"""A handle on a kazoo watch recipe (``ChildrenWatch``/``DataWatch``) that can be stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Watch"]


class Watch:
    """Returned by the store's ``watch_*`` methods; :meth:`stop` ends the callbacks.

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
