"""The streaming commit pointer: ``streaming/commits``, one live driver per job and the commit in
force.

A stateful streaming query's commit records live beside its state (``state.checkpoint_dir``);
which record is the latest, and which driver may move it, is kept here, in one node per run id
(``streaming/<run id>``, :meth:`StreamingCommits.for_run`) holding
JSON ``{"format": 1, "epoch": e, "driver": "...", "batch": b, "record": "commit-...json"}``.

- :meth:`StreamingCommits.acquire`: a driver starting bumps ``epoch`` with a conditional set and
  holds the node's znode version after it (a :class:`DriverLease`). Every driver before it is
  deposed from then on: the last to start wins, as a Kafka producer's ``initTransactions`` does.
- :meth:`StreamingCommits.commit`: the driver moves ``batch`` and ``record`` with a set expecting
  the version its lease holds, and the lease takes the new version. A deposed driver's set finds
  the version moved and raises :class:`DriverFenced` naming both drivers: nothing was written.

The recipe stores and reads; which batch may be committed, and what a lower batch id means, is
the driver's to decide (:mod:`coordinator.streaming.runtime`).

Example, with a :class:`~metadata.zk.ZkMetadataStore` ``store``::

    commits = store.streaming_commits.for_run("r1")
    lease = commits.acquire("app-2026-1@host-a:4711")
    pointer = commits.current()      # batch 6, record commit-...-e00000003-....json
    lease = commits.commit(lease, 7, "commit-000000000007-e00000004-3fa2c1.json")
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from metadata.errors import CorruptDataError
from metadata.zk.errors import FencedOut, VersionMismatch, WriteConflict
from metadata.zk.layout import JobLayout, encode_name
from metadata.zk.ops import ZkOps

__all__ = ["CommitPointer", "DriverFenced", "DriverLease", "StreamingCommits"]


class DriverFenced(FencedOut):
    """A newer driver of the job took over: this one may not commit."""


@dataclass(frozen=True, slots=True)
class CommitPointer:
    """What the node holds: the driver epoch in force, its driver, the latest commit."""

    epoch: int
    driver: str
    batch: int | None  # None: nothing committed yet
    record: str | None
    zversion: int


@dataclass(frozen=True, slots=True)
class DriverLease:
    """A driver's hold on the pointer: its epoch, its name and the znode version it expects."""

    epoch: int
    driver: str
    zversion: int


class StreamingCommits:
    """Reads, acquires and moves the streaming commit pointer of one job (module docstring)."""

    def __init__(
        self, ops: ZkOps, layout: JobLayout, run_id: str = "", *, max_attempts: int = 20
    ) -> None:
        self._ops = ops
        self._layout = layout
        self._folder = f"{layout.folder}/streaming"
        self._path = f"{self._folder}/{encode_name(run_id) if run_id else 'commits'}"
        self._max_attempts = max_attempts

    def for_run(self, run_id: str) -> StreamingCommits:
        """The pointer of run ``run_id`` (a new run id starts a query's state again)."""
        return StreamingCommits(self._ops, self._layout, run_id, max_attempts=self._max_attempts)

    @property
    def path(self) -> str:
        return self._path

    def _parse(self, data: bytes, version: int) -> CommitPointer:
        try:
            document: Any = json.loads(data)
            batch = document["batch"]
            record = document["record"]
            return CommitPointer(
                epoch=int(document["epoch"]),
                driver=str(document["driver"]),
                batch=None if batch is None else int(batch),
                record=None if record is None else str(record),
                zversion=version,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptDataError(
                self._path, f"not a streaming commit pointer ({exc!r})"
            ) from None

    @staticmethod
    def _dump(epoch: int, driver: str, batch: int | None, record: str | None) -> bytes:
        document = {"format": 1, "epoch": epoch, "driver": driver, "batch": batch}
        document["record"] = record
        return json.dumps(document, sort_keys=True).encode()

    def current(self) -> CommitPointer | None:
        """The pointer, or None if no driver of the job ever started."""
        found = self._ops.get(self._path, "read the streaming commit pointer")
        return None if found is None else self._parse(found[0], found[1].version)

    def acquire(
        self, driver: str, *, adopt: tuple[int, str] | None = None, min_epoch: int = 1
    ) -> DriverLease:
        """Take the next epoch for ``driver`` (at least ``min_epoch``); every earlier driver is
        deposed. ``adopt`` (batch, record): the latest commit the records show, set as the
        pointer's commit if the node has none (ZooKeeper's data was lost or is new)."""
        for _ in range(self._max_attempts):
            found = self._ops.get(self._path, "read the streaming commit pointer")
            if found is None:
                self._ops.ensure(self._folder, what="create the streaming folder")
                data = self._dump(0, "", None, None)
                self._ops.ensure(self._path, data, what="create the streaming commit pointer")
                continue
            pointer = self._parse(found[0], found[1].version)
            batch, record = pointer.batch, pointer.record
            if record is None and adopt is not None:
                batch, record = adopt
            epoch = max(pointer.epoch + 1, min_epoch)
            try:
                stat = self._ops.set(
                    self._path,
                    self._dump(epoch, driver, batch, record),
                    what="acquire the streaming driver epoch",
                    version=pointer.zversion,
                )
            except VersionMismatch:
                continue  # another driver started at the same time: read again
            self._ops.log.info(
                "zk.streaming_driver_acquired", epoch=epoch, driver=driver, deposed=pointer.driver
            )
            return DriverLease(epoch, driver, stat.version)
        raise WriteConflict(
            self._path, f"could not acquire a driver epoch in {self._max_attempts} attempts"
        )

    def holds(self, lease: DriverLease) -> bool:
        """True while no other driver took over since ``lease``."""
        pointer = self.current()
        return pointer is not None and pointer.zversion == lease.zversion

    def ensure_holds(self, lease: DriverLease, what: str) -> None:
        """Raise :class:`DriverFenced` unless ``lease`` is still in force."""
        if not self.holds(lease):
            raise self.fenced(lease, what)

    def commit(self, lease: DriverLease, batch: int, record: str) -> DriverLease:
        """Point at ``record`` (batch ``batch``) if ``lease`` is still in force; the lease with
        the node's new version. :class:`DriverFenced` (nothing written) if another driver took
        over."""
        try:
            stat = self._ops.set(
                self._path,
                self._dump(lease.epoch, lease.driver, batch, record),
                what=f"commit streaming batch {batch}",
                version=lease.zversion,
            )
        except VersionMismatch:
            raise self.fenced(lease, f"commit batch {batch}") from None
        return DriverLease(lease.epoch, lease.driver, stat.version)

    def fenced(self, lease: DriverLease, what: str) -> DriverFenced:
        """The error of ``what`` refused because a newer driver holds the job."""
        pointer = self.current()
        other = f"driver {pointer.driver!r} (epoch {pointer.epoch})" if pointer else "no driver"
        return DriverFenced(
            self._path,
            f"{what}: refused, this driver {lease.driver!r} (epoch {lease.epoch}) was deposed by "
            f"{other}; only one driver may run a job's stateful query (stop this one)",
        )
