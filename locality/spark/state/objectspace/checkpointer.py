"""Writing a checkpoint (see the package docstring, "Checkpoint" and "Deletion").

For each key group, in order: delete the files an ``upto_batch`` load abandoned (newest first);
if the key group is dirty, write **one** file (a delta, or a base when the compaction policy says
so or there is no base yet), mark it clean, then delete the generation the write superseded at
its previous checkpoint (base first). A *tagged* checkpoint (one attempt of a committed batch,
``tag`` its token) names its files with the batch and the tag, links each delta to the file it
follows, and deletes nothing: which attempt's files are the truth is the commit's to decide, and
the files no commit needs are removed later (:func:`.fileformat.garbage`). Imports
:mod:`.compaction`, :mod:`.fileformat`, :mod:`.keygroup`, :mod:`.storage` and :mod:`.encoding`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from locality.spark.state.objectspace.compaction import CompactionPolicy
from locality.spark.state.objectspace.encoding import ObjectSpaceError
from locality.spark.state.objectspace.fileformat import (
    FILE_RE,
    base_document,
    delta_document,
    file_name,
)
from locality.spark.state.objectspace.keygroup import KeyGroup
from locality.spark.state.objectspace.storage import CheckpointStorage

__all__ = ["CheckpointReport", "checkpoint_groups"]


@dataclass(frozen=True)
class CheckpointReport:
    """What one :meth:`ObjectSpace.checkpoint` did.

    ``bytes_written``: the sizes of the files written (deltas and bases). ``delta_bytes``: what
    deltas alone would have written (the changes; compaction keeps ``bytes_written`` amortized
    within ``(2 + 1/delta_ratio)`` of it). ``compacted``: key groups that wrote a base.
    """

    batch: int
    bytes_written: int
    files_written: int
    key_groups_written: tuple[int, ...]
    compacted: tuple[int, ...]
    delta_bytes: int
    files_deleted: int


@dataclass
class _Progress:
    """What a checkpoint has done so far."""

    written: list[int] = field(default_factory=list)
    compacted: list[int] = field(default_factory=list)
    bytes_written: int = 0
    files_written: int = 0
    delta_bytes: int = 0
    files_deleted: int = 0

    def report(self, batch: int) -> CheckpointReport:
        return CheckpointReport(
            batch=batch,
            bytes_written=self.bytes_written,
            files_written=self.files_written,
            key_groups_written=tuple(self.written),
            compacted=tuple(self.compacted),
            delta_bytes=self.delta_bytes,
            files_deleted=self.files_deleted,
        )


@dataclass(frozen=True)
class _NextFile:
    """The file a dirty key group writes: its name and bytes, and the delta's size."""

    name: str
    data: bytes
    delta_size: int
    compact: bool


def checkpoint_groups(
    storage: CheckpointStorage,
    groups: Sequence[KeyGroup],
    batch: int,
    policy: CompactionPolicy,
    max_parallelism: int,
    tag: str | None = None,
) -> CheckpointReport:
    """Checkpoint ``groups`` (in key-group order) at ``batch``; see the module docstring."""
    for group in groups:
        if group._dirty and batch <= group._batch:
            raise ObjectSpaceError(
                f"key group {group.key_group} is already checkpointed at batch {group._batch}: "
                f"cannot checkpoint batch {batch} (batches must increase)"
            )
    progress = _Progress()
    for group in groups:
        if tag is None:
            _checkpoint_group(storage, group, batch, policy, max_parallelism, progress)
        elif group._dirty:
            _write_tagged(storage, group, batch, policy, max_parallelism, tag, progress)
    return progress.report(batch)


def _write_tagged(
    storage: CheckpointStorage,
    group: KeyGroup,
    batch: int,
    policy: CompactionPolicy,
    max_parallelism: int,
    tag: str,
    progress: _Progress,
) -> None:
    """One file of a tagged checkpoint: named for the batch and the attempt, linked to the head
    it follows; nothing deleted."""
    chain = group._chain
    seq = chain.next_seq
    prev = chain.files[-1] if chain.files else None
    next_file = _next_file(group, batch, policy, max_parallelism, (tag, prev))
    storage.create_file(group.key_group, next_file.name, next_file.data)
    _advance(group, batch, seq, next_file, progress)
    chain.known, chain.superseded, chain.abandoned = True, [], []


def _checkpoint_group(
    storage: CheckpointStorage,
    group: KeyGroup,
    batch: int,
    policy: CompactionPolicy,
    max_parallelism: int,
    progress: _Progress,
) -> None:
    _delete_abandoned(storage, group, progress)
    if not group._dirty:
        return
    _claim(storage, group)
    chain = group._chain
    seq = chain.next_seq
    next_file = _next_file(group, batch, policy, max_parallelism)
    storage.create_file(group.key_group, next_file.name, next_file.data)
    to_delete = chain.superseded
    _advance(group, batch, seq, next_file, progress)
    _delete_superseded(storage, group, to_delete, progress)


def _advance(
    group: KeyGroup, batch: int, seq: int, next_file: _NextFile, progress: _Progress
) -> None:
    """The file is published: the key group is at ``batch`` on storage."""
    chain = group._chain
    group._written(batch)
    chain.next_seq = seq + 1
    if next_file.compact:
        chain.superseded = chain.files
        chain.files = [next_file.name]
        chain.base_seq, chain.base_bytes = seq, len(next_file.data)
        chain.delta_bytes = chain.delta_count = 0
        progress.compacted.append(group.key_group)
    else:
        chain.superseded = []
        chain.files.append(next_file.name)
        chain.delta_bytes += len(next_file.data)
        chain.delta_count += 1
    progress.written.append(group.key_group)
    progress.bytes_written += len(next_file.data)
    progress.files_written += 1
    progress.delta_bytes += next_file.delta_size


def _delete_abandoned(storage: CheckpointStorage, group: KeyGroup, progress: _Progress) -> None:
    """Newest first: what is left is always a consistent chain."""
    chain = group._chain
    while chain.abandoned:
        storage.delete_file(group.key_group, chain.abandoned[0])
        chain.abandoned.pop(0)
        progress.files_deleted += 1


def _claim(storage: CheckpointStorage, group: KeyGroup) -> None:
    """A key group new in this space: its storage must hold no chain yet."""
    chain = group._chain
    if chain.known:
        return
    g = group.key_group
    existing = [n for n in storage.list_files(g) if FILE_RE.match(n)]
    if existing:
        raise ObjectSpaceError(
            f"key group {g} is new in this object space but storage already holds "
            f"{storage.describe(g, existing[0])}: load it (ObjectSpace.load) instead"
        )
    chain.known = True


def _next_file(
    group: KeyGroup,
    batch: int,
    policy: CompactionPolicy,
    max_parallelism: int,
    tagged: tuple[str, str | None] | None = None,
) -> _NextFile:
    """The delta of the dirty objects, or a base when the policy says so (or there is none);
    ``tagged``: (the attempt's tag, the file the delta follows)."""
    chain = group._chain
    g, seq = group.key_group, chain.next_seq
    tag, prev = tagged if tagged is not None else (None, None)
    delta = delta_document(g, seq, chain.base_seq, batch, group._delta_objects(), prev)
    compact = chain.base_seq is None or policy.should_compact(
        base_bytes=chain.base_bytes,
        delta_bytes=chain.delta_bytes + len(delta),
        delta_count=chain.delta_count + 1,
    )
    if not compact:
        return _NextFile(file_name("delta", seq, batch, tag), delta, len(delta), compact=False)
    base = base_document(g, seq, batch, max_parallelism, group._full_objects())
    return _NextFile(file_name("base", seq, batch, tag), base, len(delta), compact=True)


def _delete_superseded(
    storage: CheckpointStorage, group: KeyGroup, to_delete: list[str], progress: _Progress
) -> None:
    """Base first: no base without its deltas. On failure the rest stays to delete."""
    chain = group._chain
    for index, old in enumerate(to_delete):
        try:
            storage.delete_file(group.key_group, old)
        except BaseException:
            chain.superseded = to_delete[index:] + chain.superseded
            raise
        progress.files_deleted += 1
