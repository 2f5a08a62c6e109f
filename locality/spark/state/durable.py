"""The durable side of the state store: checkpoint files per key group, and batch records.

A stateful query's durable directory (``state.checkpoint_dir``)::

    <root>/keygroups/kg-<group:05d>/base-<seq>.json | delta-<seq>.json   (objectspace chains)
    <root>/records/commit-<batch:012d>.json   a committed batch: each task's checkpoint token
    <root>/records/pending-<batch:012d>.json  a batch started: its processing time

The **driver** writes records: ``pending`` before a batch's tasks run (so every attempt of the
batch, also after an application restart, uses the same processing time) and ``commit`` after
every task checkpointed it and the sink took its output. The **tasks** write the key-group
chains. The latest commit is the state a batch starts from; a replayed batch id starts from the
latest commit *before* it.

Plugging in an object store
---------------------------
Everything goes through :class:`Storage`: the key-group file operations of
:class:`~locality.spark.state.objectspace.CheckpointStorage` (list a key group's files, read
one, create one atomically and never overwrite, delete one) and four record operations. An S3 /
GCS / Azure implementation maps a key group to a prefix, ``create_file`` to a conditional put
(``If-None-Match: *``: fails if the object exists; atomic by nature), ``list_files`` to a
listing of the prefix (strongly consistent on S3 since 2020), and ``put_record`` to a plain put.
Pass it as ``stateful_foreach_batch(..., storage=...)``; it is pickled to the executors with
each task, so it must be picklable (hold credentials by reference, not in the object).
:class:`DirectoryStateStorage` is the filesystem one (a shared mount, HDFS through FUSE, or one
machine in tests). Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from locality.spark.state.objectspace import CheckpointStorage, DirectoryStorage

__all__ = [
    "CommitRecord",
    "commit_exists",
    "forget_commits_from",
    "DirectoryStateStorage",
    "Storage",
    "latest_commit",
    "pin_pending_ranges",
    "read_pending",
    "write_commit",
    "write_pending",
]

_RECORD_RE = re.compile(r"^(commit|pending)-(\d{12})\.json$")
#: Commit and pending records kept (older ones are deleted as new ones are written).
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

    def delete_record(self, name: str) -> None: ...


class DirectoryStateStorage(DirectoryStorage):
    """:class:`Storage` in a directory: ``<root>/keygroups/`` and ``<root>/records/``."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        super().__init__(Path(root) / "keygroups", fsync=fsync)
        self.state_root = Path(root)
        self.records = Path(root) / "records"

    def list_records(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.records) if not n.startswith("."))
        except FileNotFoundError:
            return []

    def read_record(self, name: str) -> bytes | None:
        try:
            return (self.records / name).read_bytes()
        except FileNotFoundError:
            return None

    def put_record(self, name: str, data: bytes) -> None:
        self.records.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.records)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                if self.fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
            os.replace(tmp, self.records / name)
        finally:
            Path(tmp).unlink(missing_ok=True)

    def delete_record(self, name: str) -> None:
        (self.records / name).unlink(missing_ok=True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DirectoryStateStorage) and other.state_root == self.state_root

    def __hash__(self) -> int:
        return hash(self.state_root)

    def __repr__(self) -> str:
        return f"DirectoryStateStorage({str(self.state_root)!r})"


@dataclass(frozen=True)
class CommitRecord:
    """A committed batch: per task, the token of the checkpoint its successful attempt wrote
    and the key groups it held (a local copy is used only when both match)."""

    batch: int
    tokens: Mapping[str, str]
    key_groups: Mapping[str, tuple[int, ...]]
    max_parallelism: int
    offsets: Mapping[str, int] = field(default_factory=dict)  # input partition -> next offset

    def to_bytes(self) -> bytes:
        document: dict[str, Any] = {
            "format": 1,
            "batch": self.batch,
            "max_parallelism": self.max_parallelism,
            "tasks": {
                t: {"token": self.tokens[t], "key_groups": list(self.key_groups.get(t, ()))}
                for t in sorted(self.tokens)
            },
        }
        if self.offsets:
            document["offsets"] = dict(self.offsets)
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
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{where}: not a commit record ({exc!r})") from None


def _records(storage: Storage, kind: str) -> list[tuple[int, str]]:
    found = []
    for name in storage.list_records():
        match = _RECORD_RE.match(name)
        if match is not None and match.group(1) == kind:
            found.append((int(match.group(2)), name))
    return sorted(found)


def latest_commit(storage: Storage, before: int | None = None) -> CommitRecord | None:
    """The latest committed batch (``before``: the latest one below that batch id)."""
    for batch, name in reversed(_records(storage, "commit")):
        if before is not None and batch >= before:
            continue
        data = storage.read_record(name)
        if data is not None:
            return CommitRecord.from_bytes(data, name)
    return None


def write_commit(storage: Storage, record: CommitRecord) -> None:
    """Record ``record`` and drop all but the last :data:`KEEP_RECORDS` records of each kind."""
    storage.put_record(_commit_name(record.batch), record.to_bytes())
    for kind in ("commit", "pending"):
        for _batch, name in _records(storage, kind)[:-KEEP_RECORDS]:
            storage.delete_record(name)


def commit_exists(storage: Storage, batch: int) -> bool:
    """Whether ``batch`` is committed (its commit record exists)."""
    return storage.read_record(_commit_name(batch)) is not None


def forget_commits_from(storage: Storage, batch: int) -> list[int]:
    """Delete the commit records of ``batch`` and later (Spark runs ``batch`` again: it was
    committed here but not in Spark's own commit log); returns the batches forgotten. The
    checkpoint files those commits named are past the commit the batch now starts from: its
    tasks delete them before writing (``ObjectSpace.adopt_abandoned``)."""
    forgotten = [b for b, _ in _records(storage, "commit") if b >= batch]
    for old in forgotten:
        storage.delete_record(_commit_name(old))
    return forgotten


def _commit_name(batch: int) -> str:
    return f"commit-{batch:012d}.json"


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


def pin_pending_ranges(
    storage: Storage, batch: int, planned: Mapping[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """The input ranges of ``batch`` (input partition -> [start, end) offsets): those an earlier
    attempt recorded in the batch's pending record, else ``planned`` (recorded now), so a batch
    run again reads exactly the records it read before. The pending record must exist
    (:func:`write_pending` first)."""
    name = f"pending-{batch:012d}.json"
    data = storage.read_record(name)
    if data is None:
        raise ValueError(f"{name}: no pending record for batch {batch} (write_pending first)")
    document: dict[str, Any] = json.loads(data)
    recorded = document.get("ranges")
    if recorded is not None:
        return {str(k): (int(v[0]), int(v[1])) for k, v in recorded.items()}
    document["ranges"] = {k: [int(a), int(b)] for k, (a, b) in sorted(planned.items())}
    storage.put_record(name, json.dumps(document).encode())
    return {k: (int(a), int(b)) for k, (a, b) in planned.items()}
