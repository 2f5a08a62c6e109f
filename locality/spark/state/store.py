"""One task's keyed state on an executor: a local copy at a stable path, differential
checkpoints to durable storage, and the rule that decides which one a batch starts from.

Where a task's state comes from, in order (:func:`open_task_state`):

1. **memory**: the object space the same Python worker kept after the task's previous batch
   (Spark reuses Python workers), if it is at the batch this one starts from, with the token of
   that batch's commit record;
2. **local**: the host's local copy, ``<local_dir>/<scope>/<location>/``: a mirror of the
   task's key-group files (``keygroups/``, written with every checkpoint) and
   ``tasks/<task>.json`` (the batch and token it is at, and the one before: the mirror can still
   give the state before the latest checkpoint, so a retried or replayed batch stays warm). The
   path holds no application or executor id, so it outlives executor JVMs and application
   restarts; the location is the executor's location id, so executors on different hosts of one
   machine keep apart. Used only if it holds the batch and token of the commit the batch starts
   from (the latest committed checkpoint before it), read along the commit's chain heads;
3. **restored**: otherwise the key groups are loaded from durable storage along the commit's
   chain heads, copying each file read into the local mirror; its bytes are counted;
4. **new**: nothing was committed yet.

Either way the space is then attached to a :class:`TeeStorage` (durable first, then the local
mirror), and the files no commit needs are deleted from both: those of batches the start commit
decided that are not on its chains (attempts that lost, generations a compaction superseded;
:meth:`ObjectSpace.collect_garbage`). Files of later batches are left alone: another attempt of
this batch may be writing them. :func:`save_task_state` checkpoints the batch under this
attempt's token (one delta or base per changed key group, named for the batch and the token, so
two attempts of one batch never touch each other's files), records the token in the local copy
and keeps the space in memory. The driver commits the batch with the tokens and chain heads the
tasks return; a commit record of format 1 (no heads) is still loaded the old way, by batch.

Standard library only (runs on executors).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from locality.spark.state.durable import Storage
from locality.spark.state.objectspace import (
    CheckpointReport,
    CompactionPolicy,
    DirectoryStorage,
    ObjectSpace,
    ObjectSpaceError,
)
from locality.spark.state.objectspace.storage import CheckpointStorage

__all__ = [
    "OpenReport",
    "StartPoint",
    "StoreSpec",
    "TeeStorage",
    "forget_memory",
    "local_root",
    "meta_path",
    "new_token",
    "open_task_state",
    "read_meta",
    "save_task_state",
    "write_meta",
]

#: Where a task's state came from (see the module docstring).
SOURCES = ("memory", "local", "restored", "new")


@dataclass(frozen=True)
class StoreSpec:
    """The store of one stateful query (the same for all its tasks; pickled to executors)."""

    storage: Storage
    local_dir: str
    scope: str  # the query's name in local paths: the job folder, e.g. "clicks-1"
    max_parallelism: int
    delta_ratio: float = 1.0

    @property
    def policy(self) -> CompactionPolicy:
        return CompactionPolicy(delta_ratio=self.delta_ratio)


@dataclass(frozen=True)
class OpenReport:
    """How a task's state was opened: from where, and how many bytes each source gave."""

    source: str
    bytes_restored: int  # read from durable storage
    bytes_local: int  # read from the local copy on disk
    seconds: float

    @property
    def warm(self) -> bool:
        return self.source in ("memory", "local")


class TeeStorage:
    """Durable storage with a local mirror: writes and deletes go to both (durable first), lists
    and reads to the durable one. The mirror may hold stale files; they are replaced."""

    def __init__(self, durable: CheckpointStorage, mirror: DirectoryStorage) -> None:
        self.durable = durable
        self.mirror = mirror

    def list_files(self, key_group: int) -> list[str]:
        return self.durable.list_files(key_group)

    def read_file(self, key_group: int, name: str) -> bytes:
        return self.durable.read_file(key_group, name)

    def create_file(self, key_group: int, name: str, data: bytes) -> None:
        self.durable.create_file(key_group, name, data)
        self.copy_to_mirror(key_group, name, data)

    def copy_to_mirror(self, key_group: int, name: str, data: bytes) -> None:
        self.mirror.delete_file(key_group, name)
        self.mirror.create_file(key_group, name, data)

    def delete_file(self, key_group: int, name: str) -> None:
        self.durable.delete_file(key_group, name)
        self.mirror.delete_file(key_group, name)

    def describe(self, key_group: int, name: str) -> str:
        return self.durable.describe(key_group, name)


class _CopyingReader(TeeStorage):
    """Reads from durable storage and copies every file read into the mirror (a restore)."""

    def read_file(self, key_group: int, name: str) -> bytes:
        data = self.durable.read_file(key_group, name)
        self.copy_to_mirror(key_group, name, data)
        return data


# (storage, local root, task) -> (batch, token, key groups, space): this Python worker's copies
_MEMORY: dict[tuple[str, str, str], tuple[int, str, tuple[int, ...], ObjectSpace]] = {}


def forget_memory() -> None:
    """Drop every in-memory copy (tests: simulate a new Python worker)."""
    _MEMORY.clear()


def local_root(spec: StoreSpec, location: str) -> Path:
    """``<local_dir>/<scope>/<location>``: this host's local copies of the query's state."""
    return Path(spec.local_dir) / quote(spec.scope, safe="") / quote(location, safe="")


def meta_path(root: Path, task: str) -> Path:
    return root / "tasks" / f"{quote(task, safe='')}.json"


def read_meta(root: Path, task: str) -> tuple[tuple[int, ...], list[tuple[int, str]]]:
    """(key groups, [(batch, token), ...]): the batches the local copy can give, newest first."""
    try:
        document = json.loads(meta_path(root, task).read_bytes())
        versions = [(int(b), str(t)) for b, t in document["versions"]]
        return tuple(int(g) for g in document["key_groups"]), versions
    except (OSError, ValueError, KeyError, TypeError):
        return (), []


def write_meta(root: Path, task: str, batch: int, token: str, groups: Sequence[int]) -> None:
    """Record that the local copy is at ``batch`` (``token``); it can still give the newest
    earlier batch it held (a retried or replayed batch starts from it)."""
    held_groups, versions = read_meta(root, task)
    earlier = [v for v in versions if v[0] < batch][:1] if held_groups == tuple(groups) else []
    document = {"key_groups": list(groups), "versions": [[batch, token], *map(list, earlier)]}
    path = meta_path(root, task)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps(document))
    os.replace(tmp, path)


@dataclass(frozen=True)
class StartPoint:
    """The commit a task's batch starts from: its batch (-1: none), the task's token there (None:
    none), and the chain heads of the task's key groups (None: a format 1 commit, loaded by
    batch)."""

    batch: int
    token: str | None
    heads: Mapping[int, str] | None

    def load_options(self) -> dict[str, Any]:
        if self.heads is None:
            return {"upto_batch": self.batch}
        return {"heads": self.heads}


def open_task_state(
    spec: StoreSpec,
    task: str,
    key_groups: Sequence[int],
    start: StartPoint,
    location: str,
) -> tuple[ObjectSpace, OpenReport]:
    """The task's state at the commit ``start``, attached to durable storage and the local
    mirror, with the files no commit needs deleted. See the module docstring."""
    began = time.perf_counter()
    groups = tuple(sorted(key_groups))
    root = local_root(spec, location)
    mirror = DirectoryStorage(root / "keygroups", fsync=False)
    tee = TeeStorage(spec.storage, mirror)
    wanted = (start.batch, start.token, groups)
    cache_key = (repr(spec.storage), str(root), task)
    cached = _MEMORY.pop(cache_key, None)
    if start.token is not None and cached is not None and cached[:3] == wanted:
        space, source, restored, local = cached[3], "memory", 0, 0
    else:
        space, source, restored, local = _from_disk(spec, root, task, groups, start, tee)
    space.attach(tee)
    if start.heads is None:
        space.adopt_abandoned()  # a format 1 commit: its chains are found by batch
    else:
        space.collect_garbage(start.batch, spec.storage, mirror)
    return space, OpenReport(source, restored, local, time.perf_counter() - began)


def _from_disk(
    spec: StoreSpec,
    root: Path,
    task: str,
    groups: tuple[int, ...],
    start: StartPoint,
    tee: TeeStorage,
) -> tuple[ObjectSpace, str, int, int]:
    """(space, source, bytes restored, bytes read locally): the local copy if it matches."""
    held_groups, versions = read_meta(root, task)
    options = start.load_options()
    if start.token is not None and held_groups == groups and (start.batch, start.token) in versions:
        try:
            space, report = ObjectSpace.load(
                tee.mirror,
                groups,
                max_parallelism=spec.max_parallelism,
                policy=spec.policy,
                **options,
            )
            for g, names in space.abandoned().items():  # a failed attempt's files, here only
                for name in names:
                    tee.mirror.delete_file(g, name)
            return space, "local", 0, report.bytes_read
        except (ObjectSpaceError, OSError, ValueError):
            pass  # a damaged local copy: restore instead
    meta_path(root, task).unlink(missing_ok=True)
    for g in groups:
        shutil.rmtree(tee.mirror.folder(g), ignore_errors=True)
    space, report = ObjectSpace.load(
        _CopyingReader(spec.storage, tee.mirror),
        groups,
        max_parallelism=spec.max_parallelism,
        policy=spec.policy,
        **options,
    )
    source = "new" if start.batch < 0 else "restored"
    return space, source, report.bytes_read, 0


def new_token() -> str:
    """A fresh attempt token: 16 lowercase hex digits (in file names and commit records)."""
    return uuid.uuid4().hex[:16]


def save_task_state(
    spec: StoreSpec, task: str, space: ObjectSpace, batch: int, location: str, token: str
) -> CheckpointReport:
    """Checkpoint ``batch`` under this attempt's ``token`` (durable, then the local mirror),
    record the local copy and keep the space in memory; the driver puts the token and the
    space's :meth:`ObjectSpace.heads` in the batch's commit record."""
    report = space.checkpoint(batch, tag=token)
    root = local_root(spec, location)
    groups = space.key_groups
    write_meta(root, task, batch, token, groups)
    cache_key = (repr(spec.storage), str(root), task)
    for key in [k for k, v in _MEMORY.items() if k[:2] == cache_key[:2] and v[0] < batch - 1]:
        del _MEMORY[key]  # tasks this worker no longer runs
    _MEMORY[cache_key] = (batch, token, groups, space)
    return report
