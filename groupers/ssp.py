"""SSP groupers: turn a job's inputs into task models (Samza's SystemStreamPartitionGrouper).

- ``group-by-partition``: task ``Partition N`` holds partition N of every input that has one;
  its changelog partition is N.
- ``group-by-ssp``: one task per stream partition, named
  ``SystemStreamPartition [system, stream, N]``; changelog partitions number the tasks in sorted
  order.

Both are pure: the output depends only on the set of inputs.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from groupers.api import GrouperError
from metadata.model import StreamInput, SystemStreamPartition, TaskModel

__all__ = ["GroupByPartition", "GroupBySsp", "partition_task_name", "ssp_task_name"]


def partition_task_name(partition: int) -> str:
    return f"Partition {partition}"


def ssp_task_name(ssp: SystemStreamPartition) -> str:
    return f"SystemStreamPartition [{ssp.system}, {ssp.stream}, {ssp.partition}]"


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
class GroupByPartition:
    """Task ``Partition N`` = partition N of every input."""

    def group(self, inputs: Collection[object]) -> set[TaskModel]:
        streams = _checked(inputs)
        by_partition: dict[int, set[SystemStreamPartition]] = {}
        for stream in streams:
            for n in range(stream.partitions):
                by_partition.setdefault(n, set()).add(
                    SystemStreamPartition(stream.system, stream.stream, n)
                )
        return {
            TaskModel(partition_task_name(n), frozenset(ssps), n)
            for n, ssps in by_partition.items()
        }


@dataclass(frozen=True)
class GroupBySsp:
    """One task per stream partition."""

    def group(self, inputs: Collection[object]) -> set[TaskModel]:
        streams = _checked(inputs)
        ssps = sorted(
            SystemStreamPartition(s.system, s.stream, n)
            for s in streams
            for n in range(s.partitions)
        )
        return {
            TaskModel(ssp_task_name(ssp), frozenset({ssp}), index) for index, ssp in enumerate(ssps)
        }
