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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from locality.spark.kafka.client import KafkaPartition

__all__ = [
    "KAFKA_FORMAT",
    "PLAN_MARK",
    "clear_placement",
    "is_pinned_kafka",
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


def placement_key(partition: KafkaPartition) -> str:
    """The registry's key of a topic-partition: ``topic:partition``."""
    return f"{partition.topic}:{partition.partition}"


def _registry(spark: Any) -> Any:
    return spark.sparkContext._jvm.affinity.spark.KafkaPlacement


def set_placement(spark: Any, locations: Mapping[KafkaPartition, str]) -> None:
    """Pin each topic-partition's input partition to its location (``""``: Kafka's own
    preference), for the batches Spark plans from now on."""
    _registry(spark).set({placement_key(p): loc for p, loc in locations.items()})


def clear_placement(spark: Any) -> None:
    """Forget the placement (and what was planned): Kafka's own preferences apply again."""
    _registry(spark).clear()


def planned_locations(spark: Any) -> dict[KafkaPartition, str]:
    """Where the source last planned each topic-partition's input partition (``""``: none)."""
    planned = _registry(spark).planned()
    found: dict[KafkaPartition, str] = {}
    for key in planned.keySet():
        topic, _, number = str(key).rpartition(":")
        found[KafkaPartition(topic, int(number))] = str(planned.get(key))
    return found


def source_partitions(df: Any) -> list[KafkaPartition | None] | None:
    """The Kafka partition each of ``df``'s partitions reads, when ``df`` is a micro-batch of the
    pinned source under one-to-one steps only (``foreachBatch``'s DataFrame, a projection or
    ``mapInArrow`` of it); None otherwise. An entry is None for a partition reading no one
    Kafka partition (e.g. ``minPartitions`` split one)."""
    rdd = df._jdf.queryExecution().toRdd()
    keys = df.sparkSession.sparkContext._jvm.affinity.spark.KafkaPlacement.partitionKeys(rdd)
    if keys is None:
        return None
    found: list[KafkaPartition | None] = []
    for key in keys:
        topic, _, number = str(key).rpartition(":") if key is not None else ("", "", "")
        found.append(KafkaPartition(topic, int(number)) if number else None)
    return found


def source_ranges(df: Any) -> dict[KafkaPartition, tuple[int, int]] | None:
    """The offsets ``[from, until)`` each topic-partition of ``df`` (a micro-batch of the pinned
    source, as for :func:`source_partitions`) reads in the batch; None when ``df`` is not one. A
    topic-partition with nothing new in the batch has no entry (Spark plans no partition)."""
    rdd = df._jdf.queryExecution().toRdd()
    found = df.sparkSession.sparkContext._jvm.affinity.spark.KafkaPlacement.partitionRanges(rdd)
    if found is None:
        return None
    ranges: dict[KafkaPartition, tuple[int, int]] = {}
    for entry in found:
        if entry is not None:
            topic, number, start, until = str(entry).rsplit(":", 3)
            ranges[KafkaPartition(topic, int(number))] = (int(start), int(until))
    return ranges


def is_pinned_kafka(df: Any) -> bool:
    """Whether ``df`` (a micro-batch's DataFrame, e.g. in ``foreachBatch``) reads the pinned
    Kafka source under one-to-one steps (:func:`source_partitions`)."""
    return source_partitions(df) is not None
