"""Reads that leave a watch, and two requests sent in one round trip (a mixin of
:class:`~metadata.zk.ops.ZkOps`).

A processor following a job pays for every round trip to ZooKeeper with thread wake-ups on both
sides of kazoo's queue; sending two requests before awaiting either answer (ZooKeeper answers a
session's requests in order) costs one. Each method runs inside the ops' retry loop: a retried
attempt sends both requests again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL

__all__ = ["PipelinedReads", "Watcher"]

T = TypeVar("T")
#: kazoo's one-shot watch function: called with the WatchedEvent (on kazoo's event thread,
#: or the connection thread for :func:`~metadata.zk.handler.inline` ones).
Watcher = Callable[[Any], None]
Read = tuple[bytes, ZnodeStat] | None
_EPHEMERAL = 1  # ZooKeeper's create flag (kazoo's ``create_async(ephemeral=True)``)


class PipelinedReads:
    """``get_watched``, ``get_both`` and ``create_and_get`` for :class:`ZkOps`."""

    client: KazooClient
    acl: list[ACL]

    def call(self, what: str, path: str, attempt: Callable[[], T]) -> T:
        raise NotImplementedError  # (ZkOps's)

    def _wait(self, async_result: Any) -> Any:
        raise NotImplementedError  # (ZkOps's)

    def _count(self, *, writes: int = 0, reads: int = 0, transactions: int = 0) -> None:
        raise NotImplementedError  # (ZkOps's)

    def _read(self, pending: Any) -> Read:
        try:
            data, stat = self._wait(pending)
        except NoNodeError:
            return None
        self._count(reads=1)
        return bytes(data or b""), stat

    def get_watched(self, path: str, what: str, watch: Watcher | None) -> Read:
        """The node's data and stat (None if it does not exist), leaving kazoo's one-shot
        ``watch`` on it if it exists (None: no watch), called at the node's next change."""
        return self.call(what, path, lambda: self._read(self.client.get_async(path, watch=watch)))

    def get_both(
        self, first: str, second: str, *, what: str, watch: Watcher | None
    ) -> tuple[Read, Read]:
        """:meth:`get_watched` of ``first`` (with ``watch``) and of ``second`` (no watch), in one
        round trip."""

        def attempt() -> tuple[Read, Read]:
            one = self.client.get_async(first, watch=watch)
            two = self.client.get_async(second)
            return self._read(one), self._read(two)

        return self.call(what, first, attempt)

    def create_and_get(
        self, path: str, read: str, *, what: str, watch: Watcher | None = None
    ) -> tuple[bool, Read]:
        """Create the empty ephemeral node ``path`` and read ``read`` (leaving ``watch`` on it,
        as :meth:`get_watched`) in one round trip. Returns (False if ``path`` already existed,
        ``read``'s data and stat or None if it does not exist); a missing parent of ``path``
        raises :class:`~metadata.zk.errors.NotFound`."""
        chosen = list(self.acl)

        def attempt() -> tuple[bool, Read]:
            # kazoo's ``create_async`` hands its answer on through its completion thread (a
            # queue and a thread woken); the request it wraps is answered on the connection's.
            created = self.client._create_async_inner(path, b"", chosen, _EPHEMERAL)
            reading = self.client.get_async(read, watch=watch)
            try:
                self._wait(created)
                fresh = True
                self._count(writes=1)
            except NodeExistsError:
                fresh = False
            return fresh, self._read(reading)

        return self.call(what, path, attempt)
