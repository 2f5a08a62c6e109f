"""Driver side: one shuffle whose reduce partitions run on the executors a placement names.

Spark places the reduce tasks of a shuffle by where the map output lies (hosts only), and
PySpark cannot give a partition a preferred location. :func:`pinned_shuffle` does it with one
small JVM class (``affinity.spark.PinnedRDD``, :mod:`locality.spark.jvm`):

1. ``df.repartitionById(len(tasks), partition_column)``: row r goes to partition
   ``r[partition_column]``, so partition i holds task i's rows. Its shuffle origin is
   ``REPARTITION_BY_NUM``, which adaptive execution never coalesces: partition i stays task i.
   A pyspark before 4.1 has no ``repartitionById``: :func:`repartition_by_id` hash-partitions
   by a key of partition i's (:func:`partition_keys`: an int whose Spark hash, Murmur3 with
   seed 42, is i modulo the partition count), the same rows in the same partitions;
2. the shuffled plan's RDD (``queryExecution().toRdd()``) is wrapped by ``PinnedRDD``, one to
   one, each partition preferring its task's location (``executor_<host>_<id>`` or a host,
   :func:`locality.spark.pinning.resolve_locations`). The DAGScheduler asks an RDD's own
   preference before its parents', so the pin wins over the shuffle's host preference;
3. ``internalCreateDataFrame`` turns it back into a DataFrame. Narrow steps after it
   (``mapInArrow``, ``mapInPandas``, ``sortWithinPartitions``, filters) keep the pin; another
   exchange does not.

The rows move once, between executors; the driver sees only the plan and one location string
per task. Delay scheduling still applies (:class:`locality.spark.pinning.LocalityWait`). With
adaptive execution on, building the RDD runs the shuffle's map stage at once (a job of its own).
Needs a classic session started with the jar (:func:`locality.spark.jvm.require_classes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from locality.spark.executors import SparkExecutor
from locality.spark.pinning import resolve_locations

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "PinnedShuffle",
    "partition_keys",
    "pin_partitions",
    "pinned_shuffle",
    "repartition_by_id",
    "spark_hash_int",
]

_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class PinnedShuffle:
    """A shuffled DataFrame whose partition i is task ``tasks[i]``, pinned where ``locations[i]``
    says (``""``: no preference)."""

    frame: DataFrame
    tasks: tuple[str, ...]
    locations: tuple[str, ...]
    unplaceable: tuple[str, ...]  # tasks whose placement named no live executor or host


def pin_partitions(df: DataFrame, locations: Sequence[str]) -> DataFrame:
    """``df`` with partition i preferring ``locations[i]`` (one per partition of ``df``'s RDD)."""
    from pyspark.sql import DataFrame

    spark: Any = df.sparkSession
    jvm = spark.sparkContext._jvm
    rdd = df._jdf.queryExecution().toRdd()
    pinned = jvm.affinity.spark.PinnedRDD(rdd, list(locations))
    frame = spark._jsparkSession.internalCreateDataFrame(pinned, df._jdf.schema(), False)
    return DataFrame(frame, spark)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an int column (``Murmur3_x86_32.hashInt``, a signed 32-bit int)."""
    k1 = _rotl((value & _MASK) * 0xCC9E2D51 & _MASK, 15) * 0x1B873593 & _MASK
    h1 = _rotl(seed & _MASK ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK ^ 4
    h1 = (h1 ^ (h1 >> 16)) * 0x85EBCA6B & _MASK
    h1 = (h1 ^ (h1 >> 13)) * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def partition_keys(partitions: int) -> list[int]:
    """For each partition i of ``partitions``, the smallest int >= 0 that Spark's hash
    partitioning (``pmod(hash(key), partitions)``) sends to partition i."""
    keys: dict[int, int] = {}
    candidate = 0
    while len(keys) < partitions:
        keys.setdefault(spark_hash_int(candidate) % partitions, candidate)
        candidate += 1
    return [keys[i] for i in range(partitions)]


def repartition_by_id(df: DataFrame, partitions: int, column: str) -> DataFrame:
    """``df.repartitionById(partitions, column)`` (pyspark 4.1+), or on an older pyspark the
    same partitions by hash partitioning on partition ``column``'s key (:func:`partition_keys`)."""
    if hasattr(df, "repartitionById"):
        return df.repartitionById(partitions, column)
    from pyspark.sql import functions as sf

    keys = sf.array(*[sf.lit(k) for k in partition_keys(partitions)])
    return df.repartition(partitions, sf.element_at(keys, sf.col(column) + 1))


def pinned_shuffle(
    df: DataFrame,
    partition_column: str,
    tasks: Sequence[str],
    placement: Mapping[str, str],
    executors: Sequence[SparkExecutor],
) -> PinnedShuffle:
    """Shuffle ``df`` so that partition i holds the rows whose ``partition_column`` is i (an
    integer in ``[0, len(tasks))``), and pin partition i to where ``placement`` puts
    ``tasks[i]`` (an executor id or a host; absent: no preference)."""
    if not tasks:
        raise ValueError("pinned_shuffle needs at least one task")
    preferred, unplaceable = resolve_locations(placement, tasks, executors)
    locations = tuple((preferred[task] or [""])[0] for task in tasks)
    shuffled = repartition_by_id(df, len(tasks), partition_column)
    return PinnedShuffle(
        frame=pin_partitions(shuffled, locations),
        tasks=tuple(tasks),
        locations=locations,
        unplaceable=tuple(unplaceable),
    )
