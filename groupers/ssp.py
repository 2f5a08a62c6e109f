"""SSP groupers: turn a job's inputs into task models (Samza's SystemStreamPartitionGrouper).

- ``group-by-partition``: task ``Partition N`` holds partition N of every input that has one;
  its changelog partition is N.
- ``group-by-ssp``: one task per stream partition, named
  ``SystemStreamPartition [system, stream, N]``; changelog partitions number the tasks in sorted
  order.

With ``elasticity_factor=f > 1`` (SEP-32 virtual tasks; ``f`` a power of two) each task becomes
``f`` virtual tasks, one per key bucket ``b`` in ``0..f-1``, each holding key bucket ``b`` of the
original task's partitions (``SystemStreamPartition(..., key_bucket=b)``). Names carry the bucket
and the factor, so a name never means two different SSP sets across factor changes:

- ``group-by-partition``: ``Partition {p}-{b}-{f}`` (SEP-32: "Partition_0-1-2"); changelog
  partition ``p * f + b``;
- ``group-by-ssp``: ``SystemStreamPartition [system, stream, p, b]-{f}`` (the SSP's four-part
  form, decorated with the factor as SEP-32 decorates virtual task names); changelog partitions
  number the tasks in sorted SSP order.

Factor 1 keeps the names and partitions (``key_bucket=-1``) exactly as before.

Both are pure: the output depends only on the set of inputs.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from groupers.api import GrouperError
from groupers.keys import check_factor
from metadata.model import StreamInput, SystemStreamPartition, TaskModel

__all__ = ["GroupByPartition", "GroupBySsp", "partition_task_name", "ssp_task_name"]


def partition_task_name(partition: int, key_bucket: int = -1, factor: int = 1) -> str:
    """``Partition N``, or for a virtual task ``Partition N-B-F`` (SEP-32)."""
    if factor == 1 and key_bucket in (-1, 0):
        return f"Partition {partition}"
    return f"Partition {partition}-{key_bucket}-{factor}"


def ssp_task_name(ssp: SystemStreamPartition, factor: int = 1) -> str:
    """``SystemStreamPartition [s, t, N]``, or ``SystemStreamPartition [s, t, N, B]-F``."""
    if ssp.key_bucket == -1:
        return f"SystemStreamPartition [{ssp.system}, {ssp.stream}, {ssp.partition}]"
    return (
        f"SystemStreamPartition [{ssp.system}, {ssp.stream}, {ssp.partition}, {ssp.key_bucket}]"
        f"-{factor}"
    )


def _factor(value: object) -> int:
    try:
        return check_factor(value, "elasticity_factor")
    except ValueError as exc:
        raise GrouperError(str(exc)) from None


def _buckets(factor: int) -> range:
    """Key buckets of a factor: ``-1`` (whole partition) for 1, else ``0..factor-1``."""
    return range(-1, 0) if factor == 1 else range(factor)


def _checked(inputs: Collection[object]) -> list[StreamInput]:
    checked: list[StreamInput] = []
    seen: set[tuple[str, str]] = set()
    for item in inputs:
        if not isinstance(item, StreamInput):
            raise GrouperError(f"expected StreamInput, got {type(item).__name__}")
        key = (item.system, item.stream)
        if key in seen:
            raise GrouperError(f"input {item.system}.{item.stream} is listed twice")
        seen.add(key)
        checked.append(item)
    return checked


@dataclass(frozen=True)
class _ElasticSspGrouper:
    """What both SSP groupers share: the elasticity factor (checked once)."""

    elasticity_factor: int = 1

    def __post_init__(self) -> None:
        _factor(self.elasticity_factor)


@dataclass(frozen=True)
class GroupByPartition(_ElasticSspGrouper):
    """Task ``Partition N`` = partition N of every input (``Partition N-B-F``: key bucket B)."""

    def group(self, inputs: Collection[object]) -> set[TaskModel]:
        streams = _checked(inputs)
        factor = self.elasticity_factor
        by_task: dict[tuple[int, int], set[SystemStreamPartition]] = {}
        for stream in streams:
            for n in range(stream.partitions):
                for b in _buckets(factor):
                    by_task.setdefault((n, b), set()).add(
                        SystemStreamPartition(stream.system, stream.stream, n, b)
                    )
        return {
            TaskModel(partition_task_name(n, b, factor), frozenset(ssps), n * factor + max(b, 0))
            for (n, b), ssps in by_task.items()
        }


@dataclass(frozen=True)
class GroupBySsp(_ElasticSspGrouper):
    """One task per stream partition (per key bucket of it when the factor is > 1)."""

    def group(self, inputs: Collection[object]) -> set[TaskModel]:
        streams = _checked(inputs)
        factor = self.elasticity_factor
        ssps = sorted(
            SystemStreamPartition(s.system, s.stream, n, b)
            for s in streams
            for n in range(s.partitions)
            for b in _buckets(factor)
        )
        return {
            TaskModel(ssp_task_name(ssp, factor), frozenset({ssp}), index)
            for index, ssp in enumerate(ssps)
        }
