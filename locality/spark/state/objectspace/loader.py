"""Loading key groups from their chains (see the package docstring, "Load and crash safety").

Per key group: take the newest base (with ``upto``: the newest whose batch is ``<= upto``),
replay the deltas with consecutive seqs after it (with ``upto``: while their batch is
``<= upto``), then record where the chain stands: older generations are *superseded*, files past
the loaded position *abandoned*. Imports :mod:`.fileformat`, :mod:`.keygroup`, :mod:`.storage`
and :mod:`.encoding`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from locality.spark.state.objectspace.encoding import (
    CorruptCheckpointError,
    ObjectSpaceError,
    int_field,
)
from locality.spark.state.objectspace.fileformat import FileReader, scan
from locality.spark.state.objectspace.keygroup import KeyGroup
from locality.spark.state.objectspace.storage import CheckpointStorage

__all__ = ["LoadReport", "load_group", "load_groups"]


@dataclass(frozen=True)
class LoadReport:
    """What one :meth:`ObjectSpace.load` read; ``batches``: key group -> the batch its state is
    at (-1: no checkpoint)."""

    bytes_read: int
    files_read: int
    batches: Mapping[int, int]


def load_groups(
    storage: CheckpointStorage,
    groups: Iterable[int],
    max_parallelism: int,
    upto: int | None,
) -> tuple[dict[int, KeyGroup], LoadReport]:
    """Load each of ``groups`` (sorted, distinct) and report what was read."""
    loaded: dict[int, KeyGroup] = {}
    total_bytes = 0
    total_files = 0
    for g in groups:
        group, read_bytes, read_files = load_group(storage, g, max_parallelism, upto)
        loaded[g] = group
        total_bytes += read_bytes
        total_files += read_files
    report = LoadReport(
        bytes_read=total_bytes,
        files_read=total_files,
        batches={g: group.batch for g, group in loaded.items()},
    )
    return loaded, report


def load_group(
    storage: CheckpointStorage, group_id: int, max_parallelism: int, upto: int | None
) -> tuple[KeyGroup, int, int]:
    """(the key group, bytes read, files read)."""
    bases, deltas = scan(storage, group_id)
    reader = FileReader(storage, group_id)
    group = KeyGroup(group_id)
    group._chain.known = True
    every = {**bases, **deltas}
    base_seq = _load_base(reader, group, bases, max_parallelism, upto)
    if base_seq is None:
        _without_base(storage, group, bases, every, upto)
        return group, reader.bytes_read, reader.files_read
    seq = _replay_deltas(reader, group, deltas, base_seq, upto)
    _settle_chain(storage, group, every, base_seq, seq)
    return group, reader.bytes_read, reader.files_read


def _load_base(
    reader: FileReader,
    group: KeyGroup,
    bases: Mapping[int, str],
    max_parallelism: int,
    upto: int | None,
) -> int | None:
    """Apply the newest base at or before ``upto``; its seq (None: there is none)."""
    chain = group._chain
    for seq in sorted(bases, reverse=True):
        document, size, location = reader.read(bases[seq], "base", seq)
        batch = int_field(document, "batch", location)
        if int_field(document, "max_parallelism", location, minimum=1) != max_parallelism:
            raise CorruptCheckpointError(
                location,
                f"written with max_parallelism {document['max_parallelism']}, "
                f"not {max_parallelism}",
            )
        if upto is not None and batch > upto:
            continue
        group._apply(document.get("objects"), location, delta=False)
        group._batch = batch
        chain.base_seq, chain.base_bytes, chain.files = seq, size, [bases[seq]]
        return seq
    return None


def _without_base(
    storage: CheckpointStorage,
    group: KeyGroup,
    bases: Mapping[int, str],
    every: Mapping[int, str],
    upto: int | None,
) -> None:
    """No base to start from: the key group is empty (no files, or every file is past
    ``upto``), or its chain cannot be loaded (an error)."""
    if not every:
        return
    group_id = group.key_group
    oldest = min(every)
    if oldest != 0 or 0 not in bases:
        where = storage.describe(group_id, every[oldest])
        if not bases:
            raise CorruptCheckpointError(where, f"key group {group_id} has deltas but no base")
        raise ObjectSpaceError(
            f"key group {group_id} has no checkpoint at or before batch {upto}: its oldest "
            f"file is {where} (older checkpoints were deleted)"
        )
    # every checkpoint of the key group is past ``upto``: it was empty then
    group._chain.abandoned = [every[s] for s in sorted(every, reverse=True)]


def _replay_deltas(
    reader: FileReader,
    group: KeyGroup,
    deltas: Mapping[int, str],
    base_seq: int,
    upto: int | None,
) -> int:
    """Apply the deltas with consecutive seqs after the base (up to ``upto``); the seq of the
    first file not applied."""
    chain = group._chain
    seq = base_seq + 1
    while seq in deltas:
        document, size, location = reader.read(deltas[seq], "delta", seq)
        batch = int_field(document, "batch", location)
        if document.get("base") != base_seq:
            raise CorruptCheckpointError(
                location, f"extends base {document.get('base')!r}, not base {base_seq}"
            )
        if batch <= group._batch:
            raise CorruptCheckpointError(
                location, f"its batch {batch} does not follow batch {group._batch}"
            )
        if upto is not None and batch > upto:
            break
        group._apply(document.get("objects"), location, delta=True)
        group._batch = batch
        chain.delta_bytes += size
        chain.delta_count += 1
        chain.files.append(deltas[seq])
        seq += 1
    return seq


def _settle_chain(
    storage: CheckpointStorage,
    group: KeyGroup,
    every: Mapping[int, str],
    base_seq: int,
    seq: int,
) -> None:
    """Check nothing is missing past the loaded position, mark the replayed state clean and
    record the chain's next seq, abandoned and superseded files."""
    later = sorted(s for s in every if s >= seq)
    if later and seq not in every:
        raise CorruptCheckpointError(
            storage.describe(group.key_group, every[later[0]]),
            f"key group {group.key_group}: file seq {seq} is missing before it (chain broken)",
        )
    for obj in group._objects.values():  # the replayed state is the checkpointed state
        obj._clean()
    chain = group._chain
    chain.next_seq = seq
    chain.abandoned = [every[s] for s in reversed(later)]
    chain.superseded = [every[s] for s in sorted(every) if s < base_seq]
