"""Slots and virtual tasks: which slot holds a key, which tasks exist at a factor, which slots
a task owns and which events it runs. Pure; imports ``groupers``, ``metadata.model`` and the
pipeline's events."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from affinity_pipeline.events import INPUT_STREAM, INPUT_SYSTEM, PipelineConfig
from groupers import get_ssp_grouper
from groupers.keygroups import key_group
from groupers.keys import check_factor, key_bucket
from metadata.model import StreamInput, SystemStreamPartition, TaskModel

__all__ = [
    "ElasticConfig",
    "elastic_tasks",
    "partition_of",
    "slot_of",
    "split_events",
    "task_slots",
    "task_ssp",
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


def task_ssp(task: TaskModel) -> SystemStreamPartition:
    (ssp,) = task.partitions
    return ssp


def task_slots(task: TaskModel, factor: int, config: ElasticConfig) -> list[int]:
    """The slots a task owns: its partition's key groups ``g`` with ``g mod factor == bucket``."""
    ssp = task_ssp(task)
    bucket = max(ssp.key_bucket, 0)
    base = ssp.partition * config.groups_per_partition
    return [base + g for g in range(config.groups_per_partition) if g % factor == bucket]


def split_events(
    events: Iterable[tuple[str, int]], factor: int, config: ElasticConfig
) -> dict[str, list[tuple[str, int]]]:
    """Events by virtual task (every task present): partition, then SEP-32 key bucket."""
    tasks = elastic_tasks(config, factor)
    by_ssp = {(task_ssp(t).partition, max(task_ssp(t).key_bucket, 0)): t.name for t in tasks}
    by_task: dict[str, list[tuple[str, int]]] = {t.name: [] for t in tasks}
    for key, value in events:
        name = by_ssp[(partition_of(key, config.partitions), key_bucket(key, factor))]
        by_task[name].append((key, value))
    return by_task
