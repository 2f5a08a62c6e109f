"""Fencing: the leader epoch node ``leader/epoch``.

A coordinator that wins the election calls :meth:`LeaderEpochs.acquire`, which bumps the epoch
(a conditional set) and returns a :class:`LeaderEpoch` holding the epoch number and the epoch
node's znode version after the bump. Every leader write is a transaction whose first operation is
:meth:`LeaderEpochs.guard` (``check(leader/epoch, zversion)``): once another coordinator acquires
a newer epoch, the old leader's transactions are refused whole, and the store raises
:class:`FencedOut` (kazoo reports a failed check by *returning* errors from ``commit()``; the
store turns that into the exception). :meth:`LeaderEpochs.fence` gives the
:class:`~metadata.zk.fenced.Fence` that commits such transactions.
"""

from __future__ import annotations

from dataclasses import dataclass

from metadata.errors import CorruptDataError
from metadata.zk.errors import FencedOut, VersionMismatch, WriteConflict
from metadata.zk.fenced import Fence
from metadata.zk.layout import JobLayout
from metadata.zk.ops import Op, ZkOps

__all__ = ["LeaderEpoch", "LeaderEpochs"]


@dataclass(frozen=True, slots=True)
class LeaderEpoch:
    """A leader's epoch: ``epoch`` (1, 2, ...) and the epoch node's znode version it fences on."""

    epoch: int
    zversion: int


class LeaderEpochs:
    """Reads, acquires and checks the leader epoch of one job.

    Example, with a :class:`~metadata.zk.ZkMetadataStore` ``store``::

        epoch = store.epochs.acquire()          # after winning the election
        store.job_models.publish(model, epoch=epoch, participants=live)
        if not store.epochs.holds(epoch):       # another coordinator took over
            ...

    """

    def __init__(self, ops: ZkOps, layout: JobLayout, *, max_attempts: int = 20) -> None:
        self._ops = ops
        self._path = layout.epoch
        self._max_attempts = max_attempts

    @property
    def path(self) -> str:
        return self._path

    def _parse(self, data: bytes) -> int:
        text = data.decode("ascii", errors="replace").strip()
        if not text:
            return 0
        if not text.isdigit():
            raise CorruptDataError(self._path, f"leader epoch is not a number: {text[:40]!r}")
        return int(text)

    def current(self) -> LeaderEpoch | None:
        """The epoch in force, or None if the job has no epoch node yet."""
        found = self._ops.get(self._path, "read leader epoch")
        if found is None:
            return None
        data, stat = found
        return LeaderEpoch(self._parse(data), stat.version)

    def acquire(self) -> LeaderEpoch:
        """Bump the epoch; every holder of an older epoch is fenced out from now on."""
        for _ in range(self._max_attempts):
            found = self._ops.get(self._path, "read leader epoch")
            if found is None:
                # create it (or find it created concurrently), then read it again
                self._ops.ensure(self._path, b"0", what="create leader epoch")
                continue
            data, stat = found
            epoch = self._parse(data) + 1
            try:
                new_stat = self._ops.set(
                    self._path,
                    str(epoch).encode(),
                    what="acquire leader epoch",
                    version=stat.version,
                )
            except VersionMismatch:
                continue  # another contender bumped it first (or our lost answer did): re-read
            self._ops.log.info("zk.epoch_acquired", epoch=epoch, zversion=new_stat.version)
            return LeaderEpoch(epoch, new_stat.version)
        raise WriteConflict(
            self._path, f"could not acquire the leader epoch in {self._max_attempts} attempts"
        )

    def guard(self, epoch: LeaderEpoch) -> Op:
        """The check that fences a leader transaction on ``epoch``."""
        return Op("check", self._path, version=epoch.zversion)

    def fence(self, epoch: LeaderEpoch) -> Fence:
        """Commits transactions fenced on ``epoch`` (:class:`FencedOut` once it moved on)."""
        return Fence(
            self._ops, epoch.epoch, self.guard(epoch), lambda what: self.fenced_out(epoch, what)
        )

    def holds(self, epoch: LeaderEpoch) -> bool:
        """True while ``epoch`` is still the epoch in force."""
        current = self.current()
        return current is not None and current.zversion == epoch.zversion

    def ensure_holds(self, epoch: LeaderEpoch, what: str) -> None:
        """Raise :class:`FencedOut` unless ``epoch`` is still in force (a cheap early check)."""
        if not self.holds(epoch):
            raise self.fenced_out(epoch, what)

    def fenced_out(self, epoch: LeaderEpoch, what: str) -> FencedOut:
        """The error of a write by ``epoch`` refused because the job's epoch moved on."""
        current = self.current()
        now = f"epoch {current.epoch}" if current else "no epoch"
        return FencedOut(
            self._path,
            f"{what}: refused, this leader holds epoch {epoch.epoch} but the job is at {now}; "
            "nothing was written",
        )
