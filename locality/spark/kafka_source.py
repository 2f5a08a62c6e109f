"""Driver side: Spark's own Kafka source with its partitions pinned (``format("affinity-kafka")``).

``spark.readStream.format(KAFKA_FORMAT)`` is ``format("kafka")`` with every one of its options
(``kafka.bootstrap.servers``, ``subscribe``/``subscribePattern``/``assign``,
``startingOffsets``, ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``, ``failOnDataLoss``,
``includeHeaders``, ``kafka.*`` security settings, ...): the JVM class
``affinity.spark.PinnedKafkaProvider`` of affinity's jar delegates to Spark's
``KafkaSourceProvider`` (the connector's jars must be on ``spark.jars`` too), so Spark keeps the
offsets in its offset log and replays a batch as for any source. The one difference: when Spark
plans a micro-batch, each Kafka partition's input partition prefers the location this driver's
placement names (``executor_<host>_<id>``: that executor; a host: any executor on it), set
here before the batch (:func:`set_placement`). A partition not named keeps Kafka's own
preference (a hash of the partition over the executors).

The placement is one map per driver JVM, by topic-partition. An input partition reads it when
the scheduler asks where it prefers to run (when a job over the batch is submitted), so a
placement set in ``foreachBatch`` applies to that batch (Spark has planned the batch's partitions
before it calls the function). :func:`planned_locations` says what the scheduler was last told;
:func:`source_partitions` which Kafka partition each partition of a batch's DataFrame reads, and
:func:`source_ranges` the offsets it reads there.

**One input partition per affinity task.** With the option :data:`TASKS_OPTION`
(``affinity.tasksPerPartition``: the job's SEP-32 elasticity factor f, 1 without key buckets),
the source plans the tasks of a ``group-by-partition`` job instead: one input partition per
Kafka partition number p holding partition p of every subscribed topic (co-partitioned topics)
and every ``minPartitions`` split of it, f copies of it, copy b keeping the records of key bucket
b only (``stable_hash(key) mod f``, the Kafka key's bytes, a record without a key its offset's,
as :func:`groupers.keys.stable_hash`). Each copy is a :class:`PartitionGroup`, placed on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from locality.spark.kafka.client import KafkaPartition

__all__ = [
    "KAFKA_FORMAT",
    "PLAN_MARK",
    "RUN_OPTION",
    "TASKS_OPTION",
    "PartitionGroup",
    "SourcePart",
    "clear_placement",
    "is_pinned_kafka",
    "merge_ranges",
    "parse_key",
    "placement_key",
    "planned_locations",
    "set_placement",
    "source_partitions",
    "source_ranges",
]

#: The format name of the pinned Kafka source (``META-INF/services`` in affinity's jar).
KAFKA_FORMAT = "affinity-kafka"
#: What the source's scan and stream descriptions start with (a progress report's source).
PLAN_MARK = "affinity-kafka "
#: The source's option ending a ``Trigger.AvailableNow`` run after that many batches (unset: every
#: batch up to the offsets latest when the run began); a batch run again after a failure counts.
RUN_OPTION = "affinity.availableNowBatches"
#: The source's option planning one input partition per affinity task (module docstring).
TASKS_OPTION = "affinity.tasksPerPartition"
#: What a :class:`PartitionGroup`'s key starts with (no Kafka topic name has an ``@``).
GROUP_MARK = "@"


@dataclass(frozen=True)
class PartitionGroup:
    """An input partition of the source under :data:`TASKS_OPTION`: partition number
    ``partition`` of every topic (every split), the records of key bucket ``bucket`` of
    ``factor`` (the task ``Partition p`` or ``Partition p-b-f`` of ``group-by-partition``)."""

    partition: int
    bucket: int
    factor: int


#: What one input partition of the source reads: one Kafka partition, or an affinity task's group.
SourcePart = KafkaPartition | PartitionGroup


def placement_key(partition: SourcePart) -> str:
    """The registry's key of a topic-partition, ``topic:partition``, or of a group,
    ``@partition:bucket:factor``."""
    if isinstance(partition, PartitionGroup):
        return f"{GROUP_MARK}{partition.partition}:{partition.bucket}:{partition.factor}"
    return f"{partition.topic}:{partition.partition}"


def parse_key(key: str) -> SourcePart:
    """The topic-partition or group a registry key (:func:`placement_key`) names."""
    if key.startswith(GROUP_MARK):
        partition, bucket, factor = key[len(GROUP_MARK) :].split(":")
        return PartitionGroup(int(partition), int(bucket), int(factor))
    topic, _, number = key.rpartition(":")
    return KafkaPartition(topic, int(number))


def merge_ranges(entries: Iterable[str | None]) -> dict[KafkaPartition, tuple[int, int]]:
    """Each topic-partition's offsets ``[from, until)`` from the source's range entries (each
    ``topic:partition:from:until``, a group's comma separated; None: no range): the smallest
    ``from`` and largest ``until`` of its entries (a partition split by ``minPartitions`` reads
    adjoining ranges; a group's f copies repeat theirs)."""
    ranges: dict[KafkaPartition, tuple[int, int]] = {}
    for entry in entries:
        for part in entry.split(",") if entry else ():
            topic, number, start, until = part.rsplit(":", 3)
            key = KafkaPartition(topic, int(number))
            known = ranges.get(key, (int(start), int(until)))
            ranges[key] = (min(known[0], int(start)), max(known[1], int(until)))
    return ranges


def _registry(spark: Any) -> Any:
    return spark.sparkContext._jvm.affinity.spark.KafkaPlacement


def set_placement(spark: Any, locations: Mapping[SourcePart, str]) -> None:
    """Pin each topic-partition's (or group's) input partition to its location (``""``: Kafka's
    own preference), for the batches Spark plans from now on."""
    _registry(spark).set({placement_key(p): loc for p, loc in locations.items()})


def clear_placement(spark: Any) -> None:
    """Forget the placement (and what was planned): Kafka's own preferences apply again."""
    _registry(spark).clear()


def planned_locations(spark: Any) -> dict[SourcePart, str]:
    """Where the source last planned each topic-partition's (or group's) input partition
    (``""``: none)."""
    planned = _registry(spark).planned()
    return {parse_key(str(key)): str(planned.get(key)) for key in planned.keySet()}


def source_partitions(df: Any) -> list[SourcePart | None] | None:
    """The Kafka partition (or, under :data:`TASKS_OPTION`, the group) each of ``df``'s
    partitions reads, when ``df`` is a micro-batch of the pinned source under one-to-one steps
    only (``foreachBatch``'s DataFrame, a projection or ``mapInArrow`` of it); None otherwise.
    An entry is None for a partition holding none of the source's input partitions or several
    (a union)."""
    rdd = df._jdf.queryExecution().toRdd()
    keys = df.sparkSession.sparkContext._jvm.affinity.spark.KafkaPlacement.partitionKeys(rdd)
    if keys is None:
        return None
    return [parse_key(str(key)) if key is not None else None for key in keys]


def source_ranges(df: Any) -> dict[KafkaPartition, tuple[int, int]] | None:
    """The offsets ``[from, until)`` each topic-partition of ``df`` (a micro-batch of the pinned
    source, as for :func:`source_partitions`) reads in the batch; None when ``df`` is not one. A
    topic-partition with nothing new in the batch has no entry (Spark plans no partition); one
    read by several partitions (``minPartitions`` splits, a group's copies) has their ranges
    merged (:func:`merge_ranges`)."""
    rdd = df._jdf.queryExecution().toRdd()
    found = df.sparkSession.sparkContext._jvm.affinity.spark.KafkaPlacement.partitionRanges(rdd)
    if found is None:
        return None
    return merge_ranges(str(entry) if entry is not None else None for entry in found)


def is_pinned_kafka(df: Any) -> bool:
    """Whether ``df`` (a micro-batch's DataFrame, e.g. in ``foreachBatch``) reads the pinned
    Kafka source under one-to-one steps (:func:`source_partitions`)."""
    return source_partitions(df) is not None
