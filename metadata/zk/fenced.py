"""Fenced writes: leader writes that only succeed while the leader's epoch is in force.

A :class:`Fence` (made by :meth:`~metadata.zk.recipe.epoch.LeaderEpochs.fence`) holds the guard of
one epoch, a ``check`` of the epoch node's znode version, and puts it first in every transaction it
commits; a transaction refused at the guard raises :class:`~metadata.zk.errors.FencedOut` (nothing
of it was applied).

:class:`PartWriter` writes the parts of a chunked blob (the chunks and container views of a job
model, :mod:`metadata.zk.chunks`) into its version folder under a fence, before the commit that
makes them visible. Every part name carries the writer's epoch, so two leaders never write the same
node; a part left by our own earlier attempt (its answer lost with the connection) is overwritten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NodeExistsError
from kazoo.protocol.states import ZnodeStat

from metadata.zk.chunks import chunk_epoch
from metadata.zk.errors import FencedOut, TransactionRejected, WriteConflict
from metadata.zk.ops import ZkOps
from metadata.zk.transaction import Op

__all__ = ["Fence", "PartWriter"]


@dataclass(frozen=True, slots=True)
class Fence:
    """Commits transactions guarded by one leader epoch (see the module docstring).

    ``epoch`` is the epoch number, ``guard`` its check, ``refused(what)`` the
    :class:`FencedOut` to raise when the guard fails.
    """

    ops: ZkOps
    epoch: int
    guard: Op
    refused: Callable[[str], FencedOut]

    def commit(self, ops: Sequence[Op], what: str) -> list[Any]:
        """One fenced transaction; :class:`FencedOut` if the epoch moved on, else
        :class:`TransactionRejected` as :meth:`ZkOps.commit` raises it."""
        try:
            return self.ops.commit([self.guard, *ops], what)
        except TransactionRejected as exc:
            if exc.index == 0:
                raise self.refused(what) from None
            raise

    def commit_batched(self, ops: Sequence[Op], what: str) -> int:
        """:meth:`ZkOps.commit_batched` with the guard first in every batch; returns the writes."""
        try:
            return self.ops.commit_batched(ops, what, guards=[self.guard])
        except TransactionRejected as exc:
            if exc.index == 0:
                raise self.refused(what) from None
            raise


class PartWriter:
    """Writes the parts of one uncommitted version folder under ``fence`` (``what`` names the
    operation in errors and logs)."""

    def __init__(self, fence: Fence, what: str) -> None:
        self._fence = fence
        self._ops = fence.ops
        self._what = what

    def write(
        self,
        version: int,
        folder: str,
        chunks: Sequence[tuple[str, bytes]],
        small: Sequence[tuple[str, bytes]] = (),
    ) -> tuple[ZnodeStat, list[Op]]:
        """Prepare ``folder`` (the uncommitted folder of ``version``), then write the ``chunks``
        one by one and the ``small`` parts batched; returns the folder's stat and the checks of
        every part written, for the commit."""
        stat = self.prepare_folder(version, folder)
        checks = self.write_chunks(folder, chunks)
        return stat, checks + self.write_small(folder, small)

    def prepare_folder(self, version: int, path: str) -> ZnodeStat:
        """Create the folder ``path`` of ``version`` (empty = uncommitted) or clean the parts an
        earlier, abandoned attempt of an epoch not newer than ours left in it; returns its stat."""
        what = self._what
        found = self._ops.get(path, what)
        if found is None:
            try:
                self._fence.commit([Op("create", path, b"")], what)
            except TransactionRejected as exc:
                if not isinstance(exc.error, NodeExistsError):
                    raise  # created meanwhile (by us, answer lost, or another leader) is fine
            found = self._ops.get(path, what)
            if found is None:
                raise WriteConflict(path, f"{what}: the version folder vanished while writing")
        data, stat = found
        if data:
            raise WriteConflict(path, f"{what}: version {version} is already committed")
        stale = []
        for name in self._ops.children(path, what) or []:
            owner = chunk_epoch(name)
            if owner is not None and owner <= self._fence.epoch:
                stale.append(Op("delete", f"{path}/{name}"))
        if stale:
            self._ops.log.info("zk.abandoned_chunks_removed", version=version, chunks=len(stale))
            self._fence.commit_batched(stale, what)
        return stat

    def write_chunks(self, folder: str, chunks: Sequence[tuple[str, bytes]]) -> list[Op]:
        """Create each (large) chunk in a fenced transaction of its own; returns the checks the
        commit makes (each chunk at the znode version written)."""
        checks = []
        for name, data in chunks:
            path = f"{folder}/{name}"
            checks.append(Op("check", path, version=self.write_one(path, data)))
        return checks

    def write_small(self, folder: str, parts: Sequence[tuple[str, bytes]]) -> list[Op]:
        """Create the (small) parts under ``folder`` in as few fenced transactions as fit;
        returns the checks the commit makes. A node left by our own earlier attempt (its answer
        lost) is overwritten one by one."""
        if not parts:
            return []
        ops = [Op("create", f"{folder}/{name}", data) for name, data in parts]
        try:
            self._fence.commit_batched(ops, self._what)
            return [Op("check", f"{folder}/{name}", version=0) for name, _ in parts]
        except TransactionRejected as exc:
            if not isinstance(exc.error, NodeExistsError):
                raise
        return self.write_chunks(folder, parts)

    def write_one(self, path: str, data: bytes) -> int:
        """Create one part (fenced); returns its znode version."""
        what = self._what
        try:
            self._fence.commit([Op("create", path, data)], what)
            return 0
        except TransactionRejected as exc:
            if not isinstance(exc.error, NodeExistsError):
                raise
        # Our own earlier attempt created it (its answer was lost): overwrite it.
        found = self._ops.get(path, what)
        if found is None:
            raise WriteConflict(path, f"{what}: a chunk vanished while writing it")
        self._fence.commit([Op("set", path, data, version=found[1].version)], what)
        return int(found[1].version) + 1
