"""Placement by a job model: the host-affinity grouper over the executors as processors.

A small stand-in for the coordinator's leader, for the pipeline, its tests and the benchmark: each
:meth:`JobModelPlacement.plan` reads the live processors (the executors registered by
:class:`coordinator.member.executors.ExecutorRegistrar`) and the task locality (where each task last
ran) from the :class:`metadata.zk.ZkMetadataStore`, asks the grouper for a job model, and publishes
a new version when the assignment changed. :meth:`JobModelPlacement.record` writes the task locality
of a finished batch back (only what changed). The barrier and leader election of the real
coordinator are left out: there is one driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from affinity_pipeline.events import INPUT_STREAM, INPUT_SYSTEM
from groupers import GrouperMetadata, get_grouper, get_ssp_grouper, validate
from groupers.measures import moved_tasks
from metadata.model import JobModel, StreamInput, TaskModel
from metadata.zk import ZkMetadataStore

__all__ = ["JobModelPlacement", "PlanStep", "pipeline_tasks"]


def pipeline_tasks(num_tasks: int) -> list[TaskModel]:
    """The pipeline's task models: ``group-by-partition`` of its one input (``Partition i``)."""
    tasks = get_ssp_grouper("group-by-partition").group(
        [StreamInput(INPUT_SYSTEM, INPUT_STREAM, num_tasks)]
    )
    return sorted(tasks, key=lambda t: t.name)


@dataclass(frozen=True)
class PlanStep:
    """One planning round: the job model in force and what changed."""

    model: JobModel
    new_version: bool
    moved: tuple[str, ...] = ()  # tasks whose processor changed (tasks of lost processors too)
    task_to_processor: Mapping[str, str] = field(default_factory=dict)


class JobModelPlacement:
    """Job models from the ``grouper`` over the processors and task locality in ``store``."""

    def __init__(
        self,
        store: ZkMetadataStore,
        num_tasks: int,
        *,
        grouper: str = "host-affinity",
        grouper_options: Mapping[str, object] | None = None,
    ) -> None:
        self.store = store
        self.tasks = pipeline_tasks(num_tasks)
        self.grouper_name = grouper
        self.grouper = get_grouper(grouper, **dict(grouper_options or {}))
        self.model: JobModel | None = None

    @property
    def version(self) -> int:
        return -1 if self.model is None else self.model.version

    def plan(self) -> PlanStep:
        """Group the tasks over the live processors; a new version if the assignment changed."""
        processors = self.store.processors.locality()
        if not processors:
            raise RuntimeError("no live processors registered")
        previous = {} if self.model is None else self.model.task_to_processor()
        metadata = GrouperMetadata(
            processor_locality=processors,
            task_locality=self.store.locality.read(),
            previous_task_to_processor={t: p for t, p in previous.items() if p in processors},
        )
        containers = self.grouper.group(self.tasks, metadata)
        validate(self.tasks, metadata, containers)
        candidate = JobModel(self.version + 1, {c.processor_id: c for c in containers})
        if self.model is not None and self.model.same_assignment(candidate):
            return PlanStep(self.model, False, (), previous)
        assignment = candidate.task_to_processor()
        moved = tuple(moved_tasks(previous, assignment, count_new=False))
        self.model = candidate
        return PlanStep(candidate, True, moved, assignment)

    def record(self, task_locality: Mapping[str, str]) -> int:
        """Write where the tasks ran (differentially); returns the ZooKeeper writes."""
        return self.store.locality.write(task_locality)
