"""kazoo's threading handler with a cheaper ``select``: one ``poll(2)`` call per wait.

kazoo's connection thread waits on its socket (and its wake-up pipe) through
``handler.select`` before and after every request. The stock handler builds a new
``selectors.DefaultSelector`` for each of those waits: on Linux an epoll instance created,
registered, waited on and closed, five system calls and several Python objects per wait. With a
thousand processor sessions in a few processes that is a large part of the CPU a rebalance costs
(measured: 0.31 ms of CPU per ``get`` on loopback, 0.17 ms with ``poll``). :func:`poll_select`
keeps ``select``'s contract (the ready objects of ``rlist`` and ``wlist``, any fd number, a
timeout in seconds) with one ``poll`` call; :class:`PollingHandler` uses it. Its results
(:class:`OneShotResult`) hand a request's answer to the waiting thread through one plain lock
rather than a ``Condition``.
"""

from __future__ import annotations

import logging
import math
import select
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kazoo.handlers.threading import AsyncResult, SequentialThreadingHandler
from kazoo.handlers.utils import _NONE, fileobj_to_fd

__all__ = ["OneShotResult", "PollingHandler", "inline", "poll_select"]

_log = logging.getLogger(__name__)
_READ = select.POLLIN | select.POLLPRI
_WRITE = select.POLLOUT


def poll_select(
    rlist: Sequence[Any], wlist: Sequence[Any], xlist: Sequence[Any], timeout: float | None = None
) -> tuple[list[Any], list[Any], list[Any]]:
    """``select.select`` through ``poll``: no limit on fd numbers, no selector built per call.

    As with ``selectors``, an error or hang-up on an fd makes it both readable and writable (as
    far as it was asked for); an fd closed while waited on raises ``ValueError``."""
    if timeout is not None and timeout < 0:
        raise ValueError("timeout must be non-negative")
    wanted: dict[int, int] = {}
    objects: dict[int, tuple[list[Any], list[Any]]] = {}
    for fileobj in rlist:
        fd = fileobj_to_fd(fileobj)
        wanted[fd] = wanted.get(fd, 0) | _READ
        objects.setdefault(fd, ([], []))[0].append(fileobj)
    for fileobj in wlist:
        fd = fileobj_to_fd(fileobj)
        wanted[fd] = wanted.get(fd, 0) | _WRITE
        objects.setdefault(fd, ([], []))[1].append(fileobj)
    poller = select.poll()
    for fd, mask in wanted.items():
        poller.register(fd, mask)
    ready = poller.poll(None if timeout is None else math.ceil(timeout * 1000))
    readable: list[Any] = []
    writable: list[Any] = []
    for fd, events in ready:
        if events & select.POLLNVAL:
            raise ValueError(f"invalid file descriptor {fd}")
        readers, writers = objects[fd]
        if events & ~_WRITE:  # input, or an error / hang-up: a read will tell
            readable += readers
        if events & ~_READ:  # output, or an error / hang-up
            writable += writers
    return readable, writable, []


F = TypeVar("F", bound=Callable[..., None])
_INLINE = "_affinity_zk_inline"


def inline(watch: F) -> F:
    """Mark a watch function that only hands the event on (puts it on a queue: it never blocks
    and never calls ZooKeeper): :class:`PollingHandler` then calls it on the connection thread
    itself, sparing kazoo's event thread a wake-up per event. Any other handler calls it as
    every watch, on its event thread."""
    setattr(watch, _INLINE, True)
    return watch


class OneShotResult(AsyncResult):  # type: ignore[misc]  # (kazoo: untyped)
    """kazoo's threading ``AsyncResult`` on two plain locks instead of a ``Condition``.

    A ``Condition`` builds a lock for every wait and runs a dozen Python calls to hand the
    value over; here the value's arrival releases one lock that each waiter takes and gives
    back. The same contract: :meth:`set` or :meth:`set_exception` once (a second outcome
    replaces the first, as kazoo's does), :meth:`get` with kazoo's time-out error,
    :meth:`rawlink` callbacks run as kazoo's handler runs them (on its completion thread)."""

    def __init__(self, handler: Any) -> None:  # (kazoo's Condition is not built)
        self._handler = handler
        self._exception: Any = _NONE
        self._callbacks: list[Callable[[Any], None]] = []
        self._timeout_factory = handler.timeout_exception
        self.value: Any = None
        self._mutex = threading.RLock()  # the outcome and the callbacks
        self._arrived = threading.Lock()  # held until the outcome is in
        self._arrived.acquire()

    def set(self, value: Any = None) -> None:
        self._settle(value, None)

    def set_exception(self, exception: BaseException) -> None:
        self._settle(self.value, exception)

    def _settle(self, value: Any, exception: BaseException | None) -> None:
        with self._mutex:
            first = self._exception is _NONE
            self.value, self._exception = value, exception
            self._do_callbacks()
            if first:
                self._arrived.release()

    def _await(self, timeout: float | None) -> None:
        wait_s = -1 if timeout is None else max(timeout, 0.0)
        if self._exception is _NONE and self._arrived.acquire(timeout=wait_s):
            self._arrived.release()  # (for the next waiter)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if block:
            self._await(timeout)
        exception = self._exception
        if exception is None:
            return self.value
        if exception is _NONE:
            raise self._timeout_factory()
        raise exception

    def wait(self, timeout: float | None = None) -> bool:
        self._await(timeout)
        return self._exception is not _NONE

    def rawlink(self, callback: Callable[[Any], None]) -> None:
        with self._mutex:
            if callback not in self._callbacks:
                self._callbacks.append(callback)
            if self.ready():
                self._do_callbacks()

    def unlink(self, callback: Callable[[Any], None]) -> None:
        with self._mutex:
            if not self.ready() and callback in self._callbacks:
                self._callbacks.remove(callback)


class PollingHandler(SequentialThreadingHandler):  # type: ignore[misc]  # (kazoo: untyped)
    """kazoo's :class:`SequentialThreadingHandler` waiting with :func:`poll_select`, calling
    :func:`inline` watches at once."""

    def dispatch_callback(self, callback: Any) -> None:
        if getattr(callback.func, _INLINE, False):
            try:
                callback.func(*callback.args)
            except Exception:  # as kazoo's event thread would: log it and go on
                _log.exception("inline watch %r failed", callback.func)
            return
        super().dispatch_callback(callback)

    def select(self, *args: Any, **kwargs: Any) -> tuple[list[Any], list[Any], list[Any]]:
        return poll_select(*args, **kwargs)

    def async_result(self) -> OneShotResult:
        return OneShotResult(self)
