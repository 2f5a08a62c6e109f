"""Which records each task of a Kafka query reads, and where its state lives (pure, no I/O).

The tasks are the job's ``group-by-partition`` tasks over its Kafka inputs (co-partitioned
topics: the same partition count, records keyed by the state key): task ``Partition p`` reads
partition p of every input topic; with SEP-32 elasticity (factor ``f``) the virtual task
``Partition p-b-f`` reads it too and keeps the keys of bucket ``b``. Each task keeps its state in
one key group, ``p x f + b``, so a task's state never mixes with another's (the partition a
record is in is Kafka's choice, not a hash of ours) and stays where it is when partitions are
added: ``state.max_parallelism`` bounds partitions x f.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from coordinator.config import JobConfig
from groupers import get_ssp_grouper
from locality.spark.kafka import KafkaPartition, OffsetRange
from metadata.model import TaskModel

__all__ = ["KafkaLayout", "KafkaLayoutError", "partitions_added"]


class KafkaLayoutError(ValueError):
    """The job's tasks cannot own Kafka partitions (the message says why)."""


@dataclass(frozen=True)
class KafkaLayout:
    """The tasks of a Kafka query: each one's partition and SEP-32 bucket (module docstring)."""

    topics: tuple[str, ...]
    partitions: int
    factor: int
    tasks: Mapping[str, tuple[int, int]]  # task -> (partition, bucket)

    @classmethod
    def of(
        cls,
        tasks: Collection[TaskModel],
        topics: Collection[str],
        partitions: int,
        max_parallelism: int,
    ) -> KafkaLayout:
        owned: dict[str, tuple[int, int]] = {}
        factor = 1
        for task in tasks:
            places = {(s.partition, max(s.key_bucket, 0)) for s in task.partitions}
            streams = {s.stream for s in task.partitions}
            if len(places) != 1 or streams != set(topics):
                raise KafkaLayoutError(
                    f"task {task.name!r} reads {sorted(str(s) for s in task.partitions)}: a Kafka "
                    "query's task owns one partition (and key bucket) of every input topic "
                    "(ssp_grouper: group-by-partition)"
                )
            (owned[task.name],) = places
            factor = max(factor, *(s.key_bucket + 1 for s in task.partitions))
        factor = 1 << (factor - 1).bit_length()
        if partitions * factor > max_parallelism:
            raise KafkaLayoutError(
                f"state.max_parallelism {max_parallelism} is below partitions x elasticity factor "
                f"({partitions} x {factor}): each task keeps its state in a key group of its own"
            )
        return cls(tuple(sorted(topics)), partitions, factor, owned)

    def key_groups(self) -> dict[str, tuple[int, ...]]:
        """Task -> its one key group."""
        return {t: (p * self.factor + b,) for t, (p, b) in self.tasks.items()}

    def buckets(self) -> dict[str, tuple[int, int]]:
        """Task -> (bucket, factor) of the keys it keeps (factor 1: every key)."""
        return {t: (b, self.factor) for t, (_, b) in self.tasks.items()}

    def input_partitions(self) -> list[KafkaPartition]:
        return [KafkaPartition(t, p) for t in self.topics for p in range(self.partitions)]

    def ranges(
        self, planned: Mapping[KafkaPartition, OffsetRange]
    ) -> dict[str, tuple[OffsetRange, ...]]:
        """Task -> the ranges it reads: its partition of every input topic."""
        return {
            task: tuple(planned[KafkaPartition(topic, p)] for topic in self.topics)
            for task, (p, _) in self.tasks.items()
        }


def partitions_added(configured: int, now: int, *, embedded: bool) -> bool:
    """Whether the input topics grew from ``configured`` partitions to ``now`` (each one added is
    a new task, which an embedded coordinator places); :class:`KafkaLayoutError` when they cannot
    be followed (fewer partitions, or an external coordinator, whose job config says how many)."""
    if now == configured:
        return False
    if now < configured or not embedded:
        raise KafkaLayoutError(
            f"the input topics have {now} partitions, the job config says {configured}: set "
            f"inputs[].partitions to {now} and restart the coordinator (partitions can be added, "
            "never removed)"
        )
    return True


def config_layout(config: JobConfig) -> KafkaLayout:
    """The layout of ``config``'s tasks over its Kafka topics (one partition count, a
    ``group-by-partition`` grouper); :class:`KafkaLayoutError` saying why there is none."""
    inputs = config.stream_inputs()
    counts = {i.stream: i.partitions for i in inputs}
    others = [f"{i.system}:{i.stream}" for i in inputs if i.system != "kafka"]
    if not inputs or others:
        raise KafkaLayoutError(
            f"the inputs must all be Kafka topics (system: kafka), got {others or 'none'}"
        )
    if len(set(counts.values())) != 1:
        raise KafkaLayoutError(f"the input topics are not co-partitioned (partitions {counts})")
    grouper = get_ssp_grouper(config.ssp_grouper.name, **dict(config.ssp_grouper.options))
    return KafkaLayout.of(
        grouper.group(inputs), tuple(counts), inputs[0].partitions, config.state.max_parallelism
    )
