"""kazoo's threading handler with a cheaper ``select``: one ``poll(2)`` call per wait.

kazoo's connection thread waits on its socket (and its wake-up pipe) through
``handler.select`` before and after every request. The stock handler builds a new
``selectors.DefaultSelector`` for each of those waits: on Linux an epoll instance created,
registered, waited on and closed, five system calls and several Python objects per wait. With a
thousand processor sessions in a few processes that is a large part of the CPU a rebalance costs
(measured: 0.31 ms of CPU per ``get`` on loopback, 0.17 ms with ``poll``). :func:`poll_select`
keeps ``select``'s contract (the ready objects of ``rlist`` and ``wlist``, any fd number, a
timeout in seconds) with one ``poll`` call; :class:`PollingHandler` uses it.
"""

from __future__ import annotations

import logging
import math
import select
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

__all__ = ["PollingHandler", "inline", "poll_select"]

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
