"""Checkpoints of SEP-32 key buckets: input offsets per stream partition and key bucket (pure).

A stream partition's messages are split by key into ``factor`` key buckets (``factor`` a power of
two, the elasticity factor): bucket ``b`` holds the keys with ``stable_hash(key) mod factor == b``
(``groupers.keys``). A ``SystemStreamPartition`` with ``key_bucket == -1`` is the whole partition,
which is bucket 0 of factor 1. Bucket ``b`` of factor ``2f`` holds a subset of the keys of bucket
``b mod f`` of factor ``f``, so bucket ``c`` of factor ``F`` lies inside bucket ``b`` of factor
``f <= F`` exactly when ``c mod f == b``. The factor is not part of a ``SystemStreamPartition``:
callers pass it (the job's elasticity factor; SEP-32 task names ``Partition N-B-F`` carry it too).

**Offsets** are the *next offset to read* (Kafka's committed offset): checkpoint ``x`` for a bucket
says "every message of this bucket with an offset below ``x`` has been processed", and a task
resumes reading at ``x``. So ``0`` means "nothing processed yet, start at offset 0". ``None`` means
*no checkpoint*: the consumer falls back to its policy for a missing checkpoint (for example the
earliest offset). Offsets are ints in ``0..MAX_OFFSET`` (a signed 64-bit long, as in Kafka).

:class:`PartitionCheckpoint` holds the offsets of every bucket of one stream partition at one
factor. Changing the factor (:func:`rescale`) never claims more than is known:

- **split** (``new_factor > factor``): every child bucket inherits its parent's offset (child
  ``b`` gets ``offsets[b mod factor]``): the parent processed everything below its offset, its
  children's keys included;
- **merge** (``new_factor < factor``): the merged bucket gets the *minimum* of the offsets of the
  buckets it merges (``offsets[c]`` for every ``c`` with ``c mod new_factor == b``), so messages
  between the minimum and a bucket's own offset are processed again (at least once, SEP-32), and
  none is skipped. If any merged bucket has no checkpoint the merged bucket has none either: that
  bucket's keys must restart from the missing-checkpoint policy, and no offset taken from its
  siblings says anything about them (taking the minimum of the others could skip its messages).
  ``None`` is thus the lowest "offset" of all.

Any power-of-two ratio works (a split by 8, a merge by 4), and the rules compose: going through a
coarser factor on the way can only lower offsets (more replay), never raise them.

:func:`offset_for` gives the resume offset of one bucket at any factor (converting on the fly) and
:func:`with_offset` records a task's new offset: the checkpoint is converted to the writer's factor,
then the writer's bucket is set. Every value a checkpoint holds is thus either a writer's own claim
or derived from stored claims by the two rules above, each of which only ever weakens a claim; that
is why concurrent writers of sibling buckets, or a late writer still at the old factor, can cause
replays but never a skipped message (see ``docs/zookeeper.md``, "Checkpoints").

Stored as JSON (:func:`dump_checkpoint`, :func:`load_checkpoint`)::

    {"format": 1, "factor": 4, "offsets": [120, null, 98, 130]}

Readers ignore unknown fields and are strict about the rest: :class:`CorruptDataError` names the
field and what is wrong with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from metadata.errors import CorruptDataError

__all__ = [
    "FORMAT",
    "MAX_FACTOR",
    "MAX_OFFSET",
    "PartitionCheckpoint",
    "bucket_index",
    "check_factor",
    "check_offset",
    "dump_checkpoint",
    "load_checkpoint",
    "lowest",
    "offset_for",
    "rescale",
    "with_offset",
]

#: The format number of the stored JSON document.
FORMAT = 1
#: The largest elasticity factor a checkpoint accepts (keeps a document below about 100 KB).
MAX_FACTOR = 4096
#: The largest offset: a signed 64-bit long, like Kafka's offsets.
MAX_OFFSET = 2**63 - 1


def check_factor(factor: object, name: str = "factor") -> int:
    """``factor`` if it is a power of two in ``1..MAX_FACTOR``, else ValueError naming ``name``."""
    if isinstance(factor, bool) or not isinstance(factor, int):
        raise ValueError(f"{name} must be an integer power of two >= 1, got {factor!r}")
    if factor < 1 or factor & (factor - 1) or factor > MAX_FACTOR:
        raise ValueError(f"{name} must be a power of two in 1..{MAX_FACTOR}, got {factor}")
    return factor


def check_offset(offset: object, name: str = "offset") -> int:
    """``offset`` if it is an int in ``0..MAX_OFFSET``, else ValueError naming ``name``."""
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise ValueError(f"{name} must be an integer >= 0, got {offset!r}")
    if not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"{name} must be in 0..{MAX_OFFSET}, got {offset}")
    return offset


def bucket_index(key_bucket: int, factor: int) -> int:
    """The index of ``key_bucket`` among the ``factor`` buckets of a partition.

    ``key_bucket == -1`` (the whole partition) is bucket 0 and needs ``factor == 1``; any other
    bucket must lie in ``0..factor-1``. ValueError otherwise.
    """
    check_factor(factor)
    if isinstance(key_bucket, bool) or not isinstance(key_bucket, int):
        raise ValueError(f"key_bucket must be an integer, got {key_bucket!r}")
    if key_bucket == -1:
        if factor != 1:
            raise ValueError(
                f"key_bucket -1 is the whole partition (factor 1), but factor is {factor}"
            )
        return 0
    if not 0 <= key_bucket < factor:
        raise ValueError(
            f"key_bucket must be in 0..{factor - 1} for factor {factor}, got {key_bucket}"
        )
    return key_bucket


def lowest(offsets: Iterable[int | None]) -> int | None:
    """The minimum of ``offsets``, where None (no checkpoint) is below every offset."""
    given = list(offsets)
    if not given:
        raise ValueError("lowest() of no offsets")
    known = [offset for offset in given if offset is not None]
    return min(known) if len(known) == len(given) else None


@dataclass(frozen=True, slots=True)
class PartitionCheckpoint:
    """The checkpointed offsets of one stream partition: ``offsets[b]`` is key bucket ``b`` of
    ``factor`` (the next offset to read), None where that bucket has no checkpoint yet."""

    factor: int
    offsets: tuple[int | None, ...]

    def __post_init__(self) -> None:
        check_factor(self.factor)
        given: object = self.offsets  # callers may pass any sequence of offsets
        if not isinstance(given, tuple):
            if not isinstance(given, Sequence) or isinstance(given, str | bytes):
                raise ValueError(f"offsets must be a sequence, got {type(given).__name__}")
            object.__setattr__(self, "offsets", tuple(given))
        if len(self.offsets) != self.factor:
            raise ValueError(
                f"factor {self.factor} needs {self.factor} offsets, got {len(self.offsets)}"
            )
        for bucket, offset in enumerate(self.offsets):
            if offset is not None:
                check_offset(offset, f"offsets[{bucket}]")

    @classmethod
    def empty(cls, factor: int = 1) -> PartitionCheckpoint:
        """No bucket checkpointed yet."""
        return cls(check_factor(factor), (None,) * factor)

    @classmethod
    def whole(cls, offset: int) -> PartitionCheckpoint:
        """A checkpoint of the whole partition (factor 1)."""
        return cls(1, (check_offset(offset),))


def rescale(checkpoint: PartitionCheckpoint, new_factor: int) -> PartitionCheckpoint:
    """``checkpoint`` at ``new_factor``: a split inherits, a merge takes the minimum (None if any
    merged bucket has no checkpoint). See the module docstring."""
    check_factor(new_factor, "new_factor")
    old = checkpoint.offsets
    factor = checkpoint.factor
    if new_factor == factor:
        return checkpoint
    if new_factor > factor:
        return PartitionCheckpoint(new_factor, tuple(old[b % factor] for b in range(new_factor)))
    return PartitionCheckpoint(
        new_factor, tuple(lowest(old[b::new_factor]) for b in range(new_factor))
    )


def offset_for(checkpoint: PartitionCheckpoint | None, key_bucket: int, factor: int) -> int | None:
    """Where a task reading ``key_bucket`` of ``factor`` resumes: the bucket's offset in
    ``rescale(checkpoint, factor)`` (computed without converting the rest), None if there is no
    checkpoint for it. ``key_bucket == -1`` with ``factor == 1`` is the whole partition."""
    bucket = bucket_index(key_bucket, factor)
    if checkpoint is None:
        return None
    if factor >= checkpoint.factor:
        return checkpoint.offsets[bucket % checkpoint.factor]
    return lowest(checkpoint.offsets[bucket::factor])


def with_offset(
    checkpoint: PartitionCheckpoint | None, key_bucket: int, factor: int, offset: int
) -> PartitionCheckpoint:
    """``checkpoint`` (None: an empty one) converted to ``factor``, with ``key_bucket``'s offset
    set to ``offset``: what a task reading that bucket records after processing every message of
    its bucket below ``offset``. The offset may be lower than the stored one (a replay or a
    deliberate rewind): a checkpoint records what its writer says, and lower is always safe."""
    bucket = bucket_index(key_bucket, factor)
    check_offset(offset)
    current = (
        PartitionCheckpoint.empty(factor) if checkpoint is None else rescale(checkpoint, factor)
    )
    offsets = list(current.offsets)
    offsets[bucket] = offset
    return PartitionCheckpoint(factor, tuple(offsets))


# ---------------------------------------------------------------- JSON


def dump_checkpoint(checkpoint: PartitionCheckpoint) -> bytes:
    """The JSON document of ``checkpoint`` (compact, UTF-8)."""
    document = {"format": FORMAT, "factor": checkpoint.factor, "offsets": list(checkpoint.offsets)}
    return json.dumps(document, separators=(",", ":")).encode()


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise ValueError(f"duplicate field {key!r}")
        document[key] = value
    return document


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def load_checkpoint(data: bytes, path: str = "checkpoint") -> PartitionCheckpoint:
    """Parse a checkpoint document; :class:`CorruptDataError` (``path``, what is wrong) if it is
    not one. Unknown fields are ignored."""
    if not data:
        raise CorruptDataError(path, "checkpoint is empty (expected a JSON object)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptDataError(path, f"checkpoint is not UTF-8 text: {exc}") from None
    try:
        document = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as exc:  # json.JSONDecodeError and duplicate fields
        raise CorruptDataError(path, f"checkpoint is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise CorruptDataError(
            path, f"checkpoint should be a JSON object, got {type(document).__name__}"
        )
    for name in ("format", "factor", "offsets"):
        if name not in document:
            raise CorruptDataError(path, f"checkpoint has no {name!r} field")
    form = document["format"]
    if not _is_int(form) or form != FORMAT:
        raise CorruptDataError(path, f"format: expected {FORMAT}, got {form!r:.60}")
    factor = document["factor"]
    try:
        check_factor(factor)
    except ValueError as exc:
        raise CorruptDataError(path, str(exc)) from None
    offsets = document["offsets"]
    if not isinstance(offsets, list):
        raise CorruptDataError(path, f"offsets: expected a list, got {offsets!r:.60}")
    if len(offsets) != factor:
        raise CorruptDataError(
            path, f"offsets: factor {factor} needs {factor} offsets, got {len(offsets)}"
        )
    for bucket, offset in enumerate(offsets):
        if offset is None:
            continue
        if not _is_int(offset) or not 0 <= offset <= MAX_OFFSET:
            raise CorruptDataError(
                path,
                f"offsets[{bucket}]: expected null or an integer in 0..{MAX_OFFSET}, "
                f"got {offset!r:.60}",
            )
    return PartitionCheckpoint(factor, tuple(offsets))
