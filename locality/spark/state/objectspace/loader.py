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
from locality.spark.state.objectspace.fileformat import FileReader, parse_name, scan
from locality.spark.state.objectspace.keygroup import KeyGroup
from locality.spark.state.objectspace.storage import CheckpointStorage

__all__ = ["LoadReport", "load_from_head", "load_group", "load_groups"]


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
    heads: Mapping[int, str] | None = None,
) -> tuple[dict[int, KeyGroup], LoadReport]:
    """Load each of ``groups`` (sorted, distinct) and report what was read: from the chains
    ending at ``heads`` (a group absent from it: empty), else the newest state up to ``upto``."""
    loaded: dict[int, KeyGroup] = {}
    total_bytes = 0
    total_files = 0
    for g in groups:
        if heads is not None:
            group, read_bytes, read_files = load_from_head(
                storage, g, max_parallelism, heads.get(g)
            )
        else:
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
        _check_parallelism(document, location, max_parallelism)
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


def load_from_head(
    storage: CheckpointStorage, group_id: int, max_parallelism: int, head: str | None
) -> tuple[KeyGroup, int, int]:
    """(the key group, bytes read, files read) of the chain that ends at ``head`` (a commit
    names it; None: the key group has no committed checkpoint). The chain is followed back
    through each tagged delta's ``prev`` (an untagged one's is the file of seq - 1) to its base;
    files not on it, whoever wrote them, are never read. A file missing from the chain is
    :class:`CorruptCheckpointError` naming it."""
    group = KeyGroup(group_id)
    group._chain.known = True
    reader = FileReader(storage, group_id)
    if head is None:
        return group, 0, 0
    links = _follow_back(storage, reader, group_id, head)
    chain = group._chain
    for index, (name, document, size, location) in enumerate(links):
        batch = int_field(document, "batch", location)
        if index == 0:
            _check_parallelism(document, location, max_parallelism)
            chain.base_seq, chain.base_bytes = int_field(document, "seq", location), size
        else:
            if document.get("base") != chain.base_seq:
                raise CorruptCheckpointError(
                    location, f"extends base {document.get('base')!r}, not base {chain.base_seq}"
                )
            if batch <= group._batch:
                raise CorruptCheckpointError(
                    location, f"its batch {batch} does not follow batch {group._batch}"
                )
            chain.delta_bytes += size
            chain.delta_count += 1
        group._apply(document.get("objects"), location, delta=index > 0)
        group._batch = batch
        chain.files.append(name)
    for obj in group._objects.values():  # the replayed state is the checkpointed state
        obj._clean()
    chain.next_seq = int_field(links[-1][1], "seq", links[-1][3]) + 1
    return group, reader.bytes_read, reader.files_read


def _follow_back(
    storage: CheckpointStorage, reader: FileReader, group_id: int, head: str
) -> list[tuple[str, dict[str, object], int, str]]:
    """The chain's files from its base to ``head``: (name, document, size, location)."""
    links: list[tuple[str, dict[str, object], int, str]] = []
    name: str | None = head
    listed: list[str] | None = None
    while name is not None:
        parsed = parse_name(name)
        location = storage.describe(group_id, name)
        if parsed is None:
            raise CorruptCheckpointError(location, "not the name of a checkpoint file")
        if links and parsed.seq != int_field(links[-1][1], "seq", links[-1][3]) - 1:
            raise CorruptCheckpointError(location, f"seq {parsed.seq} breaks the chain")
        try:
            document, size, location = reader.read(name, parsed.kind, parsed.seq)
        except FileNotFoundError:
            raise CorruptCheckpointError(
                location, f"missing: the committed chain of key group {group_id} needs it"
            ) from None
        links.append((name, document, size, location))
        if parsed.kind == "base":
            break
        prev = document.get("prev")
        if prev is None and parsed.tag is None:  # an untagged delta: the file of seq - 1
            listed = storage.list_files(group_id) if listed is None else listed
            prev = _untagged_at(listed, parsed.seq - 1)
        if not isinstance(prev, str):
            raise CorruptCheckpointError(location, f"key group {group_id}: no file before it")
        name = prev
    links.reverse()
    return links


def _untagged_at(names: list[str], seq: int) -> str | None:
    for name in names:
        parsed = parse_name(name)
        if parsed is not None and parsed.tag is None and parsed.seq == seq:
            return name
    return None


def _check_parallelism(document: dict[str, object], location: str, max_parallelism: int) -> None:
    if int_field(document, "max_parallelism", location, minimum=1) != max_parallelism:
        raise CorruptCheckpointError(
            location,
            f"written with max_parallelism {document['max_parallelism']}, not {max_parallelism}",
        )
