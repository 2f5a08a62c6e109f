"""Streaming batch history: ``history/batch-<batch id>``, the last N batches of a job's query.

One node per committed micro-batch, holding JSON (format 1) of a :class:`BatchEntry`: when, the
job model version it followed, its rows and seconds, its tasks warm / restored / new, the bytes
restored and written, how many tasks ran on the executor they were pinned to, each task's
executor, location and state bytes (:class:`TaskPlace`), and the lag per input partition where
the source reports one (Kafka: end offset minus committed offset).

The driver writes an entry after the batch is committed: a create and the deletion of the
oldest entries beyond ``keep`` in one transaction. A batch id committed again (Spark running a
committed batch once more after a driver restart) replaces its entry with a set. The writes are
not fenced: the entries are reports (the commit itself is fenced by the driver epoch), and a
deposed driver's last report of a batch it committed is still true. Readers accept unknown
fields and missing optional ones.

The recipe stores and reads; what is reported, and ``keep``, are the driver's
(:mod:`coordinator.streaming.history`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kazoo.exceptions import NodeExistsError

from metadata.errors import CorruptDataError
from metadata.zk.errors import TransactionRejected
from metadata.zk.layout import BATCH_PREFIX, JobLayout
from metadata.zk.ops import Op, ZkOps

__all__ = ["BATCHES_FORMAT", "BatchEntry", "BatchHistory", "TaskPlace"]

BATCHES_FORMAT = 1


@dataclass(frozen=True, slots=True)
class TaskPlace:
    """Where one task of a batch ran and what its state cost: ``executor`` (None: unknown) at
    ``location``; ``pinned_to`` the executor its job model named (``off`` when it ran
    elsewhere); ``source`` of its state (memory | local | restored | new); the state bytes it
    restored and wrote; its rows in and its seconds."""

    task: str
    executor: str | None
    location: str | None
    pinned_to: str | None
    source: str
    bytes_restored: int = 0
    bytes_written: int = 0
    rows_in: int = 0
    seconds: float = 0.0

    @property
    def off(self) -> bool:
        """True when the task ran away from the executor it was pinned to."""
        return self.pinned_to is not None and self.executor != self.pinned_to


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One committed micro-batch (see the module docstring); ``written_at`` in UNIX seconds."""

    batch: int
    written_at: float
    version: int = 0
    seconds: float = 0.0
    rows_in: int = 0
    rows_out: int = 0
    tasks: int = 0
    warm: int = 0
    restored: int = 0
    new: int = 0
    bytes_restored: int = 0
    bytes_written: int = 0
    pinned_ok: int = 0
    pinned_total: int = 0
    places: Sequence[TaskPlace] = ()
    lag: Mapping[str, int] = field(default_factory=dict)  # input partition -> records behind

    def to_json(self) -> bytes:
        document = {
            "format": BATCHES_FORMAT,
            **asdict(self),
            "places": [asdict(p) for p in self.places],
            "lag": dict(self.lag),
        }
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, path: str) -> BatchEntry:
        try:
            document: Any = json.loads(data)
            if not isinstance(document, dict):
                raise TypeError("not an object")
            known = {k: v for k, v in document.items() if k in cls.__dataclass_fields__}
            places = [_place(p) for p in known.pop("places", [])]
            entry = cls(**known, places=tuple(places))
            if not isinstance(entry.batch, int) or not isinstance(entry.lag, dict):
                raise TypeError("batch or lag of the wrong type")
        except (UnicodeDecodeError, json.JSONDecodeError, TypeError) as exc:
            raise CorruptDataError(path, f"batch history entry is unusable: {exc}") from None
        return entry


def _place(document: Any) -> TaskPlace:
    if not isinstance(document, dict):
        raise TypeError("a task place is not an object")
    known = {k: v for k, v in document.items() if k in TaskPlace.__dataclass_fields__}
    return TaskPlace(**known)


def _batch_of(name: str) -> int | None:
    number = name.removeprefix(BATCH_PREFIX)
    return int(number) if name.startswith(BATCH_PREFIX) and number.isdigit() else None


class BatchHistory:
    """Writes (a streaming driver) and reads the job's last batches.

    Example, with a :class:`~metadata.zk.ZkMetadataStore` ``store``::

        # the driver, once batch 42 is committed
        entry = BatchEntry(42, written_at=time.time(), seconds=1.8, tasks=4, warm=3, restored=1,
                           places=[TaskPlace("Partition 0", "2", "zone-a/host-2", "2", "local")],
                           lag={"events-0": 120})
        store.batches.record(entry, keep=50)   # prunes the oldest beyond 50
        store.batches.read(limit=10)           # the newest 10, oldest first

    """

    def __init__(self, ops: ZkOps, layout: JobLayout) -> None:
        self._ops = ops
        self._layout = layout

    @property
    def path(self) -> str:
        return self._layout.history

    def batches(self) -> list[int]:
        """The batch ids with an entry, sorted."""
        names = self._ops.children(self.path, "list batch history") or []
        return sorted(b for b in map(_batch_of, names) if b is not None)

    def record(self, entry: BatchEntry, *, keep: int) -> bool:
        """Write ``entry`` and delete the oldest entries so that ``keep`` remain, in one
        transaction. Returns False if the batch had an entry already: it is replaced (a set)."""
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        path = self._layout.batch_entry(entry.batch)
        what = f"record batch {entry.batch}"
        older = [b for b in self.batches() if b != entry.batch]
        excess = max(0, len(older) + 1 - keep)
        ops = [Op("create", path, entry.to_json())]
        ops += [Op("delete", self._layout.batch_entry(b)) for b in older[:excess]]
        try:
            self._ops.commit(ops, what)
        except TransactionRejected as exc:
            if not isinstance(exc.error, NodeExistsError):
                raise
            self._ops.set(path, entry.to_json(), what=what)
            self._ops.log.info("zk.batch_replaced", batch=entry.batch)
            return False
        self._ops.log.debug("zk.batch_recorded", batch=entry.batch, pruned=excess)
        return True

    def read(self, limit: int | None = None) -> list[BatchEntry]:
        """The entries, oldest first (the newest ``limit`` of them if given)."""
        batches = self.batches()
        if limit is not None:
            batches = batches[-limit:] if limit > 0 else []
        paths = [self._layout.batch_entry(b) for b in batches]
        found = self._ops.get_many(paths, "read batch history", self.path)
        entries = []
        for path in paths:
            got = found.get(path)
            if got is not None:  # pruned meanwhile
                entries.append(BatchEntry.from_json(got[0], path))
        return entries
