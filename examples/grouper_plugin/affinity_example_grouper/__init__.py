"""An example grouper plugin: each task stays on its previous processor while that processor has
room (ceil(T/P) tasks, or ``cap`` when given), else goes to the least loaded processor.

Simpler than the built-in ``host-affinity`` (it ignores locations and is not movement-optimal)
and meant as a template: a frozen dataclass whose options are its fields, a pure ``group``
method, and the conformance kit in its tests (``groupers.testing.check_grouper``).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection
from dataclasses import dataclass

from groupers import GrouperError, GrouperMetadata
from metadata.model import ContainerModel, FrozenMap, TaskModel

__all__ = ["StickyLeastLoadedGrouper"]


@dataclass(frozen=True)
class StickyLeastLoadedGrouper:
    """Previous processor while it has room, else the least loaded one (ties: smallest id)."""

    cap: int | None = None

    def __post_init__(self) -> None:
        if self.cap is not None and (not isinstance(self.cap, int) or self.cap < 1):
            raise GrouperError(f"cap must be a whole number >= 1, got {self.cap!r}")

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        processors = sorted(metadata.processor_locality)
        if not processors:
            return set()
        by_name = {task.name: task for task in tasks}
        names = sorted(by_name)
        cap = self.cap or -(-len(names) // len(processors))
        cap = max(cap, -(-len(names) // len(processors)))  # never below what fits everything
        assigned: dict[str, list[str]] = {pid: [] for pid in processors}
        leftovers: list[str] = []
        for name in names:
            previous = metadata.previous_task_to_processor.get(name)
            if previous in assigned and len(assigned[previous]) < cap:
                assigned[previous].append(name)
            else:
                leftovers.append(name)
        heap = [(len(assigned[pid]), pid) for pid in processors]
        heapq.heapify(heap)
        for name in leftovers:
            load, pid = heapq.heappop(heap)
            assigned[pid].append(name)
            heapq.heappush(heap, (load + 1, pid))
        return {
            ContainerModel(
                pid,
                metadata.processor_locality[pid],
                FrozenMap({name: by_name[name] for name in sorted(assigned[pid])}),
            )
            for pid in processors
        }
