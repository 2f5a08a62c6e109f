"""``round-robin``: the balanced, locality-blind baseline.

Tasks in name order are dealt to processors in id order. Deterministic and balanced (max - min
<= 1), and it ignores both the previous assignment and locality, so any change of membership
reshuffles almost everything: it is the yardstick the benchmarks compare against.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from groupers.api import GrouperMetadata, build_containers, tasks_by_name
from metadata.model import ContainerModel, TaskModel

__all__ = ["RoundRobinGrouper"]


@dataclass(frozen=True)
class RoundRobinGrouper:
    """Task i (in name order) goes to processor i mod P (in id order)."""

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        by_name = tasks_by_name(tasks)
        processors = sorted(metadata.processor_locality)
        if not processors:
            return set()
        assignment: dict[str, list[str]] = {pid: [] for pid in processors}
        for index, name in enumerate(sorted(by_name)):
            assignment[processors[index % len(processors)]].append(name)
        return build_containers(assignment, by_name, metadata.processor_locality)
