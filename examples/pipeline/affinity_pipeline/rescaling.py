"""The reference pipeline, elastic: SEP-32 virtual tasks that split and merge while it runs.

The input is the same generated events (:func:`affinity_pipeline.events.generate_batch`) on
``partitions`` input partitions: a key's partition is ``crc32(key) mod partitions`` (the
producer's partitioner). Tasks are the virtual tasks of ``group-by-partition`` with an
elasticity factor ``f`` (``Partition p-b-f``; ``Partition p`` for ``f = 1``): task ``(p, b, f)``
runs the keys of partition ``p`` with ``key_bucket(key, f) == b``, filtered at run time
(:func:`split_events`).

**State** is kept per *slot*, ``p * M + key_group(key, M)`` (``M`` key groups per partition), in
an :class:`affinity_pipeline.objectspace.ObjectSpace` (a map ``key -> [count, sum]`` per slot).
For a power of two ``f <= M`` a key's bucket is its key group mod ``f``, so a slot lies wholly in
one task at every factor, and a rescaled task owns exactly a set of slots
(:func:`task_slots`): a split child a subset of its parent's, a merged task the union of its
parents'. Checkpoints are differential and keyed by slot (one shared
:class:`~affinity_pipeline.objectspace.DirectoryStorage` under ``<checkpoint_dir>/slots``), so
whoever owns a slot next continues its chain.

**Locality.** After each batch a task leaves a local copy of each of its slots at its location
(``<local_store_dir>/<location>/slots/slot-<n>``, the batch it is at and the slot's serialized
space). Running batch ``b``, a slot whose local copy is at ``b - 1`` is **warm**; any other slot is
**cold** and is loaded from the checkpoints at the committed batch (its bytes count as restored).

**Offsets** (``metadata.checkpoints``): after batch ``b`` every task's stream partition and key
bucket gets offset ``b + 1`` in ZooKeeper (``ZkMetadataStore.write_checkpoints``); before a batch
the driver reads each task's resume offset at the current factor (a split child inherits its
parent's, a merged task the minimum of its parents') and the task checks that it is the batch it
runs: in this lockstep pipeline they agree, so no event is skipped or counted twice.

**Placement**: the ``host-affinity`` grouper over the executors registered in ZooKeeper, with
the previous job model's tasks and stream partitions, so split children start where their
parent ran and a merged task goes where most of its parents' state is.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from affinity_pipeline.events import (
    INPUT_STREAM,
    INPUT_SYSTEM,
    Output,
    PipelineConfig,
    generate_batch,
    merge_outputs,
)
from affinity_pipeline.objectspace import JSON, DirectoryStorage, ObjectSpace
from groupers import GrouperMetadata, get_grouper, get_ssp_grouper, validate
from groupers.keygroups import key_group
from groupers.keys import check_factor, key_bucket
from locality.spark import (
    EXECUTOR_LOCATION_ENV,
    SparkExecutorLocationIdProvider,
    current_executor_id,
    run_pinned,
)
from metadata.model import JobModel, StreamInput, SystemStreamPartition, TaskModel

if TYPE_CHECKING:  # the driver's side only: executors need not have kazoo or structlog
    from pyspark import SparkContext

    from coordinator.member.executors import ExecutorRegistrar
    from metadata.zk import ZkMetadataStore

__all__ = [
    "ElasticBatch",
    "ElasticConfig",
    "ElasticPipeline",
    "SlotOutcome",
    "elastic_tasks",
    "process_elastic_task",
    "slot_of",
    "split_events",
    "task_slots",
]


@dataclass(frozen=True)
class ElasticConfig:
    """Plain values (they travel to the executors); see the module docstring."""

    local_store_dir: str
    checkpoint_dir: str
    partitions: int = 8
    groups_per_partition: int = 128
    num_keys: int = 600
    events_per_batch: int = 2000
    seed: int = 7

    def __post_init__(self) -> None:
        check_factor(self.groups_per_partition, "groups_per_partition")
        if self.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {self.partitions}")

    @property
    def events(self) -> PipelineConfig:
        """The generator's configuration (the same events as the reference pipeline's)."""
        return PipelineConfig(
            self.local_store_dir,
            self.checkpoint_dir,
            num_tasks=self.partitions,
            num_keys=self.num_keys,
            events_per_batch=self.events_per_batch,
            seed=self.seed,
        )

    @property
    def slots(self) -> int:
        return self.partitions * self.groups_per_partition


def partition_of(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


def slot_of(key: str, config: ElasticConfig) -> int:
    """The slot holding ``key``'s state: ``partition * M + key_group(key, M)``."""
    groups = config.groups_per_partition
    return partition_of(key, config.partitions) * groups + key_group(key, groups)


def elastic_tasks(config: ElasticConfig, factor: int) -> list[TaskModel]:
    """The virtual tasks at ``factor`` (``group-by-partition`` with that elasticity factor)."""
    if check_factor(factor) > config.groups_per_partition:
        raise ValueError(f"factor {factor} exceeds {config.groups_per_partition} key groups")
    grouper = get_ssp_grouper("group-by-partition", elasticity_factor=factor)
    tasks = grouper.group([StreamInput(INPUT_SYSTEM, INPUT_STREAM, config.partitions)])
    return sorted(tasks, key=lambda t: t.name)


def _ssp(task: TaskModel) -> SystemStreamPartition:
    (ssp,) = task.partitions
    return ssp


def task_slots(task: TaskModel, factor: int, config: ElasticConfig) -> list[int]:
    """The slots a task owns: its partition's key groups ``g`` with ``g mod factor == bucket``."""
    ssp = _ssp(task)
    bucket = max(ssp.key_bucket, 0)
    base = ssp.partition * config.groups_per_partition
    return [base + g for g in range(config.groups_per_partition) if g % factor == bucket]


def split_events(
    events: Iterable[tuple[str, int]], factor: int, config: ElasticConfig
) -> dict[str, list[tuple[str, int]]]:
    """Events by virtual task (every task present): partition, then SEP-32 key bucket."""
    tasks = elastic_tasks(config, factor)
    by_ssp = {(_ssp(t).partition, max(_ssp(t).key_bucket, 0)): t.name for t in tasks}
    by_task: dict[str, list[tuple[str, int]]] = {t.name: [] for t in tasks}
    for key, value in events:
        name = by_ssp[(partition_of(key, config.partitions), key_bucket(key, factor))]
        by_task[name].append((key, value))
    return by_task


# ---------------------------------------------------------------- the executor side


@dataclass(frozen=True)
class ElasticInput:
    config: ElasticConfig
    batch: int
    resume_offset: int
    factor: int
    slots: tuple[int, ...]
    events: tuple[tuple[str, int], ...]
    location_env: str = EXECUTOR_LOCATION_ENV


@dataclass(frozen=True)
class SlotOutcome:
    """What one task did in one batch."""

    task: str
    batch: int
    location: str
    executor_id: str | None
    outputs: tuple[Output, ...]
    warm_slots: tuple[int, ...]
    cold_slots: tuple[int, ...]
    bytes_restored: int
    checkpoint_bytes: int
    full_snapshot_bytes: int
    seconds: float


def _local_path(config: ElasticConfig, location: str, slot: int) -> Path:
    return Path(config.local_store_dir) / quote(location, safe="") / "slots" / f"slot-{slot:06d}"


def _read_local(path: Path) -> tuple[int, bytes] | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    header, _, body = data.partition(b"\n")
    return (int(header), body) if header.strip().lstrip(b"-").isdigit() else None


def _write_local(path: Path, batch: int, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(str(batch).encode() + b"\n" + data)
    tmp.replace(path)


def _pair(value: JSON) -> tuple[int, int]:
    if (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], int)
        and isinstance(value[1], int)
    ):
        return value[0], value[1]
    raise ValueError(f"a state entry should be [count, sum], got {value!r:.60}")


def process_elastic_task(task: str, payload: ElasticInput) -> SlotOutcome:
    """Run one virtual task for one batch (on an executor): its slots warm from the local
    copies or cold from the checkpoints, the events, a differential checkpoint, local copies."""
    start = time.perf_counter()
    config, batch = payload.config, payload.batch
    if payload.resume_offset != batch:
        raise RuntimeError(
            f"{task}: the checkpointed offset is {payload.resume_offset}, the batch is {batch}"
        )
    location = SparkExecutorLocationIdProvider(payload.location_env).location_id()
    storage = DirectoryStorage(Path(config.checkpoint_dir) / "slots", fsync=False)
    space = ObjectSpace(config.slots, storage=storage)
    warm: list[int] = []
    cold: list[int] = []
    restored = 0
    if batch == 0:
        space.merge(ObjectSpace(config.slots, payload.slots, storage=storage))
    else:
        for slot in payload.slots:
            local = _read_local(_local_path(config, location, slot))
            if local is not None and local[0] == batch - 1:
                space.merge(ObjectSpace.from_bytes(local[1], storage=storage))
                warm.append(slot)
            else:
                cold.append(slot)
        if cold:
            loaded, report = ObjectSpace.load(
                storage, cold, max_parallelism=config.slots, upto_batch=batch - 1
            )
            space.merge(loaded)
            restored = report.bytes_read
    touched: dict[str, tuple[int, int]] = {}
    for key, value in payload.events:
        counts = space.group(slot_of(key, config)).get_map("counts", create=True)
        count, total = _pair(counts.get(key, [0, 0]))
        counts[key] = [count + 1, total + value]  # a new value: stored values are not mutated
        touched[key] = (count + 1, total + value)
    outputs = [(key, count, total) for key, (count, total) in sorted(touched.items())]
    checkpoint = space.checkpoint(batch)
    full = len(json.dumps(space.snapshot(), separators=(",", ":")))
    for slot in payload.slots:
        _write_local(_local_path(config, location, slot), batch, space.extract([slot]).to_bytes())
    return SlotOutcome(
        task=task,
        batch=batch,
        location=location,
        executor_id=current_executor_id(),
        outputs=tuple(outputs),
        warm_slots=tuple(warm),
        cold_slots=tuple(cold),
        bytes_restored=restored,
        checkpoint_bytes=checkpoint.bytes_written,
        full_snapshot_bytes=full,
        seconds=time.perf_counter() - start,
    )


# ---------------------------------------------------------------- the driver


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
        processors = self.store.read_processor_locality()
        if not processors:
            raise RuntimeError("no executors registered")
        tasks = elastic_tasks(self.config, self.factor)
        previous = self.model
        metadata = GrouperMetadata(
            processor_locality=processors,
            task_locality=self.store.read_task_locality(),
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
            name: self.store.read_checkpoint(_ssp(task), factor) or 0
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
        self.store.write_checkpoints({_ssp(t): batch + 1 for t in tasks.values()}, factor)
        self.store.write_task_locality({t: o.location for t, o in outcomes.items()})
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
