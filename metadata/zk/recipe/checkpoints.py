"""Checkpoints: one node per stream partition, ``checkpoints/<system>.<stream>.<partition>``.

Each node holds the JSON of a :class:`~metadata.checkpoints.PartitionCheckpoint`
(``{"format": 1, "factor": 4, "offsets": [120, null, 98, 130]}``): the next offset to read of
every key bucket of that partition at the factor of its last writer. The factor changes lazily:
after a split or a merge nothing is rewritten; a task reading bucket ``b`` of the new factor gets
:func:`~metadata.checkpoints.offset_for` of the stored checkpoint (a split inherits, a merge takes
the minimum), and its first write stores the checkpoint converted to its factor
(:func:`~metadata.checkpoints.with_offset`).

Writes are read-modify-write with compare-and-set: read the node and its znode version, apply
``with_offset`` for each bucket written, then ``set`` expecting that version (``create`` if the
node is missing). A write that loses a race (the version moved, the node was created or deleted
meanwhile) re-reads and tries again after a short random pause, at most ``max_attempts`` times
(tenacity), then :class:`~metadata.zk.errors.WriteConflict`. So concurrent writers of sibling
buckets never lose each other's updates, and a write whose answer was lost to a connection drop
is harmless: the retry finds the value already there and writes nothing (writes are differential:
an unchanged checkpoint is not written again).

A node that does not parse is :class:`~metadata.errors.CorruptDataError` naming its path, for
readers and writers alike: nothing is overwritten, an operator fixes or deletes it.

Checkpoints belong to the job, not to a run id: unlike task locality (I7) they survive a new run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat

from metadata.checkpoints import (
    PartitionCheckpoint,
    bucket_index,
    check_offset,
    dump_checkpoint,
    load_checkpoint,
    offset_for,
    with_offset,
)
from metadata.model import SystemStreamPartition
from metadata.zk.errors import TransactionRejected
from metadata.zk.layout import JobLayout, parse_checkpoint_name
from metadata.zk.ops import Op, ZkOps
from metadata.zk.races import LostRace, lost_race, retry_races

__all__ = ["CheckpointStore", "partition_of"]


def partition_of(ssp: SystemStreamPartition) -> SystemStreamPartition:
    """The whole stream partition ``ssp`` belongs to (``key_bucket=-1``)."""
    if ssp.key_bucket == -1:
        return ssp
    return SystemStreamPartition(ssp.system, ssp.stream, ssp.partition)


class CheckpointStore:
    """Reads and writes the checkpoints of one job (see the module docstring).

    Example, with a :class:`~metadata.zk.ZkMetadataStore` ``store``::

        events_3 = SystemStreamPartition("kafka", "events", 3)
        store.checkpoints.write(events_3, 1, 120)          # the whole partition (factor 1)
        bucket = SystemStreamPartition("kafka", "events", 3, key_bucket=1)
        store.checkpoints.read(bucket, 4)                  # 120: a split inherits
        store.checkpoints.read_all()                       # {events_3: PartitionCheckpoint(...)}

    """

    def __init__(
        self,
        ops: ZkOps,
        layout: JobLayout,
        *,
        max_attempts: int = 25,
        max_pause_s: float = 0.2,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self._ops = ops
        self._layout = layout
        self._folder = layout.checkpoints
        self._max_attempts = max_attempts
        self._max_pause_s = max_pause_s
        self._folder_exists = False

    # ---------------------------------------------------------------- reading

    def _path(self, ssp: SystemStreamPartition) -> str:
        return self._layout.checkpoint(ssp.system, ssp.stream, ssp.partition)

    def _decode(
        self, path: str, found: tuple[bytes, ZnodeStat] | None
    ) -> PartitionCheckpoint | None:
        return None if found is None else load_checkpoint(found[0], path)

    def read_partition(
        self, system: str, stream: str, partition: int
    ) -> PartitionCheckpoint | None:
        """The stored checkpoint of a stream partition (at its last writer's factor), or None."""
        path = self._layout.checkpoint(system, stream, partition)
        return self._decode(path, self._ops.get(path, "read checkpoint"))

    def read(self, ssp: SystemStreamPartition, factor: int) -> int | None:
        """The offset a task reading ``ssp`` (key bucket ``ssp.key_bucket`` of ``factor``; -1 with
        factor 1 for the whole partition) resumes at; None if there is no checkpoint for it."""
        bucket_index(ssp.key_bucket, factor)
        stored = self.read_partition(ssp.system, ssp.stream, ssp.partition)
        return offset_for(stored, ssp.key_bucket, factor)

    def read_all(self) -> dict[SystemStreamPartition, PartitionCheckpoint]:
        """Every stored checkpoint, keyed by its whole stream partition (``key_bucket=-1``)."""
        names = self._ops.children(self._folder, "list checkpoints") or []
        paths = {f"{self._folder}/{name}": name for name in names}
        found = self._ops.get_many(paths, "read checkpoints", self._folder)
        result: dict[SystemStreamPartition, PartitionCheckpoint] = {}
        for path, name in sorted(paths.items()):
            system, stream, partition = parse_checkpoint_name(name, path)
            checkpoint = self._decode(path, found.get(path))
            if checkpoint is None:
                continue  # deleted between listing and reading
            result[SystemStreamPartition(system, stream, partition)] = checkpoint
        return result

    # ---------------------------------------------------------------- writing

    def write(self, ssp: SystemStreamPartition, factor: int, offset: int) -> PartitionCheckpoint:
        """Record that every message of ``ssp`` (key bucket ``ssp.key_bucket`` of ``factor``)
        below ``offset`` was processed; returns the partition's checkpoint as now stored."""
        return self.write_many({ssp: offset}, factor)[partition_of(ssp)]

    def write_many(
        self, offsets: Mapping[SystemStreamPartition, int], factor: int
    ) -> dict[SystemStreamPartition, PartitionCheckpoint]:
        """:meth:`write` for several stream partitions (or buckets) of one factor, e.g. every
        input of a task. Returns the stored checkpoints by whole stream partition.

        Each partition's update is a compare-and-set of its own; they are sent together, in as
        few transactions as fit (not atomic across partitions: each stands on its own).
        """
        plan: dict[SystemStreamPartition, list[tuple[int, int]]] = defaultdict(list)
        seen: set[tuple[SystemStreamPartition, int]] = set()
        for ssp, offset in offsets.items():
            bucket = bucket_index(ssp.key_bucket, factor)
            check_offset(offset)
            whole = partition_of(ssp)
            self._path(whole)  # validates system, stream and partition
            if (whole, bucket) in seen:
                raise ValueError(f"key bucket {bucket} of factor {factor} of {whole} given twice")
            seen.add((whole, bucket))
            plan[whole].append((ssp.key_bucket, offset))
        if not plan:
            return {}
        return retry_races(
            lambda: self._write_once(plan, factor),
            ops=self._ops,
            folder=self._folder,
            what="write checkpoints",
            event="zk.checkpoint_write_conflict",
            attempts=self._max_attempts,
            max_pause_s=self._max_pause_s,
        )

    def _write_once(
        self, plan: Mapping[SystemStreamPartition, list[tuple[int, int]]], factor: int
    ) -> dict[SystemStreamPartition, PartitionCheckpoint]:
        paths = {whole: self._path(whole) for whole in plan}
        found = self._ops.get_many(paths.values(), "read checkpoints", self._folder)
        result: dict[SystemStreamPartition, PartitionCheckpoint] = {}
        ops: list[Op] = []
        for whole, updates in plan.items():
            path = paths[whole]
            entry = found.get(path)
            stored = self._decode(path, entry)  # corrupt data raises here: nothing is written
            (first_bucket, first_offset), *more = updates
            checkpoint = with_offset(stored, first_bucket, factor, first_offset)
            for key_bucket, offset in more:
                checkpoint = with_offset(checkpoint, key_bucket, factor, offset)
            result[whole] = checkpoint
            if entry is None:
                ops.append(Op("create", path, dump_checkpoint(checkpoint)))
            elif checkpoint != stored:
                ops.append(Op("set", path, dump_checkpoint(checkpoint), version=entry[1].version))
        if ops and not self._folder_exists:
            self._ensure_folder()
        try:
            written = self._ops.commit_batched(ops, "write checkpoints")
        except TransactionRejected as exc:
            if not lost_race(exc):
                raise
            if isinstance(exc.error, NoNodeError):
                self._folder_exists = False  # a create found no folder (or a set no node)
            raise LostRace(str(exc)) from exc
        self._ops.log.debug("zk.checkpoints_written", partitions=len(plan), written=written)
        return result

    def _ensure_folder(self) -> None:
        """Create ``checkpoints/`` if missing (jobs set up before checkpoints existed)."""
        if self._ops.exists(self._folder, "check checkpoints folder") is None:
            self._ops.ensure(self._folder, what="create checkpoints folder")
        self._folder_exists = True
