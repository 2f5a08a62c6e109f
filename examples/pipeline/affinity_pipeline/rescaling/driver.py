"""The driver: plans each batch with ``host-affinity`` over the executors registered in
ZooKeeper, runs it pinned, then commits offsets and task locality; the factor may change
between batches while the application keeps running."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from affinity_pipeline.events import Output, generate_batch, merge_outputs
from affinity_pipeline.rescaling.executor import ElasticInput, SlotOutcome, process_elastic_task
from affinity_pipeline.rescaling.slots import (
    ElasticConfig,
    elastic_tasks,
    split_events,
    task_slots,
    task_ssp,
)
from groupers import GrouperMetadata, get_grouper, validate
from groupers.keys import check_factor
from locality.spark import run_pinned
from metadata.model import JobModel

if TYPE_CHECKING:  # the driver's side only: executors need not have kazoo or structlog
    from pyspark import SparkContext

    from coordinator.member.executors import ExecutorRegistrar
    from metadata.zk import ZkMetadataStore

__all__ = ["ElasticBatch", "ElasticPipeline"]


@dataclass(frozen=True)
class ElasticBatch:
    """One batch of the elastic pipeline."""

    batch: int
    factor: int
    model: JobModel
    outcomes: Mapping[str, SlotOutcome]
    placement: Mapping[str, str]  # task -> executor id asked for
    ran_on: Mapping[str, str | None]  # task -> executor id it ran on
    resume_offsets: Mapping[str, int]
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def outputs(self) -> list[Output]:
        return merge_outputs({t: o.outputs for t, o in self.outcomes.items()})

    @property
    def bytes_restored(self) -> int:
        return sum(o.bytes_restored for o in self.outcomes.values())

    @property
    def checkpoint_bytes(self) -> int:
        return sum(o.checkpoint_bytes for o in self.outcomes.values())

    @property
    def full_snapshot_bytes(self) -> int:
        return sum(o.full_snapshot_bytes for o in self.outcomes.values())


class ElasticPipeline:
    """The driver: plans each batch with host-affinity over the registered executors, runs it
    pinned, then commits offsets and task locality. :meth:`rescale` changes the factor between
    batches while the application keeps running."""

    def __init__(
        self,
        sc: SparkContext,
        config: ElasticConfig,
        store: ZkMetadataStore,
        registrar: ExecutorRegistrar,
        *,
        factor: int = 1,
        locality_wait: str = "30s",
    ) -> None:
        self.sc = sc
        self.config = config
        self.store = store
        self.registrar = registrar
        self.factor = check_factor(factor)
        self.locality_wait = locality_wait
        self.grouper = get_grouper("host-affinity")
        self.model: JobModel | None = None
        self.next_batch = 0

    def rescale(self, factor: int) -> None:
        """Run the next batches as ``factor`` virtual tasks per partition."""
        elastic_tasks(self.config, factor)  # checks the factor
        self.factor = factor

    def plan(self) -> JobModel:
        """A job model of the current factor's tasks over the registered executors."""
        self.registrar.sync()
        processors = self.store.processors.locality()
        if not processors:
            raise RuntimeError("no executors registered")
        tasks = elastic_tasks(self.config, self.factor)
        previous = self.model
        metadata = GrouperMetadata(
            processor_locality=processors,
            task_locality=self.store.locality.read(),
            previous_task_to_processor={}
            if previous is None
            else {t: p for t, p in previous.task_to_processor().items() if p in processors},
            previous_task_to_ssps={}
            if previous is None
            else {name: task.partitions for name, task in previous.tasks.items()},
        )
        containers = self.grouper.group(tasks, metadata)
        validate(tasks, metadata, containers)
        version = 0 if previous is None else previous.version + 1
        self.model = JobModel(version, {c.processor_id: c for c in containers})
        return self.model

    def run_batch(self) -> ElasticBatch:
        start = time.perf_counter()
        batch, factor = self.next_batch, self.factor
        model = self.plan()
        tasks = {t.name: t for t in elastic_tasks(self.config, factor)}
        offsets = {
            name: self.store.checkpoints.read(task_ssp(task), factor) or 0
            for name, task in tasks.items()
        }
        events = split_events(generate_batch(batch, self.config.events), factor, self.config)
        inputs = {
            name: ElasticInput(
                self.config,
                batch,
                offsets[name],
                factor,
                tuple(task_slots(task, factor, self.config)),
                tuple(events[name]),
            )
            for name, task in tasks.items()
        }
        placement = self.registrar.placement(model.task_to_processor())
        run = run_pinned(
            self.sc,
            inputs,
            placement,
            process_elastic_task,
            locality_wait=self.locality_wait,
            description=f"elastic pipeline: batch {batch} at factor {factor}",
        )
        outcomes = run.results
        self.store.checkpoints.write_many({task_ssp(t): batch + 1 for t in tasks.values()}, factor)
        self.store.locality.write({t: o.location for t, o in outcomes.items()})
        self.next_batch = batch + 1
        return ElasticBatch(
            batch=batch,
            factor=factor,
            model=model,
            outcomes=outcomes,
            placement=placement,
            ran_on={t: o.executor_id for t, o in outcomes.items()},
            resume_offsets=offsets,
            seconds=time.perf_counter() - start,
        )
