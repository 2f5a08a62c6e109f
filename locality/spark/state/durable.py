"""The durable side of the state store: checkpoint files per key group, and batch records.

A stateful query's durable directory (``state.checkpoint_dir``)::

    <root>/keygroups/kg-<group:05d>/base-<seq>.json | delta-<seq>.json   (objectspace chains)
    <root>/records/commit-<batch:012d>-e<epoch:08d>-<id>.json   a committed batch (below)
    <root>/records/pending-<batch:012d>.json  a batch started: its processing time
    <root>/outputs/output-<batch:012d>-<task>-<token>.arrow   a task attempt's output, kept
                                              until it is published (exactly-once Kafka output)

The **driver** writes records: ``pending`` before a batch's tasks run (so every attempt of the
batch, also after an application restart, uses the same processing time) and ``commit`` after
every task checkpointed it and the sink took its output. The **tasks** write the key-group
chains, each attempt under names of its own (its token, :meth:`ObjectSpace.checkpoint`'s tag).

A commit record names, per task, the token of the attempt that is the truth, and per key group
the **head** of its chain (the newest file; the chain is followed back from it), the driver
epoch that wrote it, and ``prev``: the record of the commit the batch started from. Records
are *created* (never overwritten, :meth:`Storage.create_record`): a second writer of one name
fails. Which record is the latest is not decided here: ZooKeeper holds the pointer, moved by
compare-and-set under the driver's epoch (:class:`metadata.zk.recipe.StreamingCommits`); a
record the pointer does not reach is an attempt that lost (or a deposed driver's) and is
removed by :func:`prune_records`. Records of format 1 (no heads, no epoch) are still read.

Plugging in an object store
---------------------------
Everything goes through :class:`Storage`: the key-group file operations of
:class:`~locality.spark.state.objectspace.CheckpointStorage` (list a key group's files, read
one, create one atomically and never overwrite, delete one), five record operations and four
for kept outputs (the exactly-once Kafka output). An S3 / GCS / Azure implementation maps a key
group to a prefix, ``create_file`` and ``create_record`` to a conditional put
(``If-None-Match: *``: fails if the object exists; atomic by nature), ``list_files`` to a
listing of the prefix (strongly consistent on S3 since 2020), and ``put_record`` and
``put_output`` to a plain put.
Pass it as ``stateful_foreach_batch(..., storage=...)``; it is pickled to the executors with
each task, so it must be picklable (hold credentials by reference, not in the object).
:class:`DirectoryStateStorage` is the filesystem one (a shared mount, HDFS through FUSE, or one
machine in tests). Standard library only.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol
from urllib.parse import quote

from locality.spark.state.directory_storage import DirectoryStateStorage
from locality.spark.state.objectspace import CheckpointStorage

__all__ = [
    "CommitRecord",
    "commit_exists",
    "DirectoryStateStorage",
    "Storage",
    "latest_commit",
    "output_name",
    "prune_outputs",
    "prune_records",
    "read_commit",
    "read_pending",
    "record_name",
    "write_commit",
    "write_pending",
]

_RECORD_RE = re.compile(r"^(commit|pending)-(\d{12})(?:-e(\d{8})-[0-9a-f]{1,16})?\.json$")
#: Commit records kept along the chain of the latest commit (older ones are pruned).
KEEP_RECORDS = 3


class Storage(CheckpointStorage, Protocol):
    """Durable storage of one stateful query: key-group files and small batch records."""

    def list_records(self) -> list[str]:
        """Names of the records (``commit-...json``, ``pending-...json``)."""
        ...

    def read_record(self, name: str) -> bytes | None:
        """The record, or None if there is none of that name."""
        ...

    def put_record(self, name: str, data: bytes) -> None:
        """Write (or replace) a record atomically."""
        ...

    def create_record(self, name: str, data: bytes) -> None:
        """Write a record atomically if none of that name exists, else ``FileExistsError``."""
        ...

    def put_output(self, name: str, data: bytes) -> None:
        """Keep a task attempt's batch output (exactly-once Kafka output), written atomically."""
        ...

    def read_output(self, name: str) -> bytes | None: ...

    def list_outputs(self) -> list[str]: ...

    def delete_output(self, name: str) -> None: ...

    def delete_record(self, name: str) -> None: ...


class TaskCheckpoint(Protocol):
    """What a task's attempt reports of its checkpoint (a task result or outcome)."""

    @property
    def token(self) -> str: ...
    @property
    def key_groups(self) -> tuple[int, ...]: ...
    @property
    def heads(self) -> Mapping[int, str]: ...


@dataclass(frozen=True)
class CommitRecord:
    """A committed batch: per task, the token of the attempt that is the truth and the key
    groups it held (a local copy is used only when both match); per key group, its chain's head
    (None: a format 1 record, whose chains are found by batch); the driver epoch and driver
    that committed it, and ``prev``, the record it started from."""

    batch: int
    tokens: Mapping[str, str]
    key_groups: Mapping[str, tuple[int, ...]]
    max_parallelism: int
    offsets: Mapping[str, int] = field(default_factory=dict)  # input partition -> next offset
    heads: Mapping[int, str] | None = None
    epoch: int = 0
    driver: str = ""
    prev: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # what a query keeps (a watermark)

    name: str = ""  # the record's file name (set by :func:`read_commit`, :func:`write_commit`)

    @classmethod
    def of(
        cls,
        batch: int,
        results: Mapping[str, TaskCheckpoint],
        max_parallelism: int,
        start: CommitRecord | None,
        offsets: Mapping[str, int] | None = None,
    ) -> CommitRecord:
        """The commit of ``batch`` from each task's result (its token, key groups and chain
        heads), started from ``start``."""
        return cls(
            batch,
            {t: r.token for t, r in results.items()},
            {t: tuple(r.key_groups) for t, r in results.items()},
            max_parallelism,
            offsets=dict(offsets or {}),
            heads={g: h for r in results.values() for g, h in r.heads.items()},
            prev=start.name if start is not None else None,
        )

    def to_bytes(self) -> bytes:
        document: dict[str, Any] = {
            "format": 1 if self.heads is None else 2,
            "batch": self.batch,
            "max_parallelism": self.max_parallelism,
            "tasks": {
                t: {"token": self.tokens[t], "key_groups": list(self.key_groups.get(t, ()))}
                for t in sorted(self.tokens)
            },
        }
        if self.offsets:
            document["offsets"] = dict(self.offsets)
        if self.heads is not None:
            document["heads"] = {str(g): h for g, h in sorted(self.heads.items())}
            document.update(epoch=self.epoch, driver=self.driver, prev=self.prev)
        if self.extra:
            document["extra"] = dict(self.extra)
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> CommitRecord:
        try:
            document: Any = json.loads(data)
            tasks = document["tasks"]
            return cls(
                batch=int(document["batch"]),
                tokens={t: str(v["token"]) for t, v in tasks.items()},
                key_groups={t: tuple(int(g) for g in v["key_groups"]) for t, v in tasks.items()},
                max_parallelism=int(document["max_parallelism"]),
                offsets={str(k): int(v) for k, v in document.get("offsets", {}).items()},
                heads=(
                    {int(g): str(h) for g, h in document["heads"].items()}
                    if "heads" in document
                    else None
                ),
                epoch=int(document.get("epoch", 0)),
                driver=str(document.get("driver", "")),
                prev=None if document.get("prev") is None else str(document["prev"]),
                extra=dict(document.get("extra", {})),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{where}: not a commit record ({exc!r})") from None


def _records(storage: Storage, kind: str) -> list[tuple[int, int, str]]:
    """(batch, epoch, name) of the records of ``kind``, oldest first (format 1: epoch 0)."""
    found = []
    for name in storage.list_records():
        match = _RECORD_RE.match(name)
        if match is not None and match.group(1) == kind:
            found.append((int(match.group(2)), int(match.group(3) or 0), name))
    return sorted(found)


def record_name(batch: int, epoch: int, attempt: str) -> str:
    """A commit record's name: ``commit-<batch:012d>-e<epoch:08d>-<attempt>.json`` (the attempt:
    a few hex digits, so a driver committing one batch twice never meets its own name)."""
    return f"commit-{batch:012d}-e{epoch:08d}-{attempt}.json"


def read_commit(storage: Storage, name: str) -> CommitRecord:
    """The commit record ``name``; a missing or unreadable one is a ``ValueError`` naming it."""
    data = storage.read_record(name)
    if data is None:
        raise ValueError(f"{name}: the commit record is missing")
    return replace(CommitRecord.from_bytes(data, name), name=name)


def latest_commit(storage: Storage, before: int | None = None) -> CommitRecord | None:
    """The latest commit record by its name: the highest batch (below ``before``), then the
    highest epoch. What the records alone say: the driver follows ZooKeeper's pointer and reads
    this only when ZooKeeper has none (a new ensemble) and for inspection."""
    for batch, _epoch, name in reversed(_records(storage, "commit")):
        if before is not None and batch >= before:
            continue
        data = storage.read_record(name)
        if data is not None:
            return replace(CommitRecord.from_bytes(data, name), name=name)
    return None


def write_commit(storage: Storage, record: CommitRecord) -> CommitRecord:
    """Create ``record`` under a fresh name (never overwriting one); the record with its name."""
    name = record_name(record.batch, record.epoch, uuid.uuid4().hex[:6])
    storage.create_record(name, record.to_bytes())
    return replace(record, name=name)


def commit_exists(storage: Storage, batch: int, epoch: int = 0) -> bool:
    """Whether a commit record of ``batch`` by driver ``epoch`` exists (0: any driver)."""
    for found_batch, found_epoch, _name in _records(storage, "commit"):
        if found_batch == batch and (epoch == 0 or found_epoch == epoch):
            return True
    return False


def prune_records(storage: Storage, keep: set[str], decided_upto: int) -> list[str]:
    """Delete the commit records of batches up to ``decided_upto`` not in ``keep`` (the chain
    of the latest commits), and the pending records of batches before the oldest kept one;
    returns the names deleted."""
    kept = [b for b, _e, n in _records(storage, "commit") if n in keep]
    oldest = min(kept) if kept else decided_upto + 1
    deleted = [
        name
        for batch, _epoch, name in _records(storage, "commit")
        if batch <= decided_upto and name not in keep
    ]
    deleted += [name for batch, _e, name in _records(storage, "pending") if batch < oldest]
    for name in deleted:
        storage.delete_record(name)
    return deleted


def output_name(batch: int, task: str, token: str) -> str:
    """The name a task attempt's kept output has (its batch, task and attempt token)."""
    return f"output-{batch:012d}-{quote(task, safe='')}-{token}.arrow"


def prune_outputs(storage: Storage, upto: int) -> int:
    """Delete the kept outputs of batches up to ``upto`` (published); how many."""
    deleted = 0
    for name in storage.list_outputs():
        parts = name.split("-")
        if len(parts) > 2 and parts[0] == "output" and parts[1].isdigit() and int(parts[1]) <= upto:
            storage.delete_output(name)
            deleted += 1
    return deleted


def write_pending(storage: Storage, batch: int, batch_time_ms: int) -> int:
    """The processing time of ``batch``: the one recorded by an earlier attempt, else
    ``batch_time_ms`` (recorded now)."""
    recorded = read_pending(storage, batch)
    if recorded is not None:
        return recorded
    data = json.dumps({"format": 1, "batch": batch, "batch_time_ms": batch_time_ms}).encode()
    storage.put_record(f"pending-{batch:012d}.json", data)
    return batch_time_ms


def read_pending(storage: Storage, batch: int) -> int | None:
    data = storage.read_record(f"pending-{batch:012d}.json")
    if data is None:
        return None
    document: Mapping[str, Any] = json.loads(data)
    return int(document["batch_time_ms"])
