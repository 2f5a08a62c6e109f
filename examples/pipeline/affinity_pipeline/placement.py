"""Placement by a job model: the host-affinity grouper over the executors as processors.

A small stand-in for the coordinator's leader, for the pipeline, its tests and the benchmark: each
:meth:`JobModelPlacement.plan` reads the live processors (the executors registered by
:class:`coordinator.member.executors.ExecutorRegistrar`) and the task locality (where each task last
ran) from the :class:`metadata.zk.ZkMetadataStore`, asks the grouper for a job model, and publishes
a new version when the assignment changed. :meth:`JobModelPlacement.record` writes the task locality
of a finished batch back (only what changed). The barrier and leader election of the real
coordinator are left out: there is one driver.

With standby replicas (``grouper_options`` ``standby_replicas``, ``max_warmup_replicas``,
``acceptable_recovery_lag``), each plan also reads the standby lag reports of the live processors
(``store.standby_lag``, written after each batch by :mod:`affinity_pipeline.standby`) and hands
them to the grouper as ``task_state`` (as the leader does,
:func:`coordinator.protocol.leader_probing.task_state`): a lost task fails over to a caught-up
copy, and a move held back for warm-up is made once its target's copy reports a small enough lag.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from affinity_pipeline.events import INPUT_STREAM, INPUT_SYSTEM
from coordinator.protocol.leader_probing import task_state
from groupers import GrouperMetadata, get_grouper, get_ssp_grouper, validate
from groupers.measures import moved_tasks
from metadata.model import ContainerModel, JobModel, StreamInput, TaskModel
from metadata.zk import ZkMetadataStore

__all__ = ["JobModelPlacement", "PlanStep", "pipeline_tasks", "standby_copies"]


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
    deferred: tuple[str, ...] = ()  # moves balance wanted that warm-up held back in this plan

    @property
    def standby_copies(self) -> dict[str, tuple[str, ...]]:
        """Processor id -> the tasks it holds a standby copy of, in the model in force."""
        return standby_copies(self.model)


def standby_copies(model: JobModel | None) -> dict[str, tuple[str, ...]]:
    """Processor id -> the tasks it holds a standby copy of in ``model`` (none: empty)."""
    if model is None:
        return {}
    return {
        pid: tuple(sorted(c.standby_tasks))
        for pid, c in sorted(model.containers.items())
        if c.standby_tasks
    }


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
        options = dict(grouper_options or {})
        self.grouper = get_grouper(grouper, **options)
        # The same grouper without warm-up: what balance alone would do (for ``deferred``).
        self._unheld = (
            get_grouper(grouper, **{**options, "max_warmup_replicas": 0})
            if options.get("max_warmup_replicas")
            else None
        )
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
        in_force = {t: p for t, p in previous.items() if p in processors}
        metadata = GrouperMetadata(
            processor_locality=processors,
            task_locality=self.store.locality.read(),
            previous_task_to_processor=in_force,
        )
        live = sorted(processors)
        lags = self.store.standby_lag.read(live)
        metadata = replace(metadata, task_state=task_state(lags, in_force, live))
        containers = self.grouper.group(self.tasks, metadata)
        validate(self.tasks, metadata, containers)
        deferred = self._deferred(metadata, containers)
        candidate = JobModel(self.version + 1, {c.processor_id: c for c in containers})
        if self.model is not None and self.model.same_assignment(candidate):
            return PlanStep(self.model, False, (), previous, deferred)
        assignment = candidate.task_to_processor()
        moved = tuple(moved_tasks(previous, assignment, count_new=False))
        self.model = candidate
        return PlanStep(candidate, True, moved, assignment, deferred)

    def _deferred(
        self, metadata: GrouperMetadata, containers: Collection[ContainerModel]
    ) -> tuple[str, ...]:
        """The tasks balance alone would move that this answer keeps where they are."""
        if self._unheld is None:
            return ()
        kept = {n: c.processor_id for c in containers for n in c.tasks}
        balanced = {
            n: c.processor_id for c in self._unheld.group(self.tasks, metadata) for n in c.tasks
        }
        previous = metadata.previous_task_to_processor
        return tuple(
            sorted(n for n, p in balanced.items() if previous.get(n) == kept[n] and p != kept[n])
        )

    def record(self, task_locality: Mapping[str, str]) -> int:
        """Write where the tasks ran (differentially); returns the ZooKeeper writes."""
        return self.store.locality.write(task_locality)
