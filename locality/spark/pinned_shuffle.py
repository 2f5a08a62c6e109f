"""Driver side: one shuffle whose reduce partitions run on the executors a placement names.

Spark places the reduce tasks of a shuffle by where the map output lies (hosts only), and
PySpark cannot give a partition a preferred location. :func:`pinned_shuffle` does it with one
small JVM class (``affinity.spark.PinnedRDD``, :mod:`locality.spark.jvm`):

1. ``df.repartitionById(len(tasks), partition_column)``: row r goes to partition
   ``r[partition_column]``, so partition i holds task i's rows. Its shuffle origin is
   ``REPARTITION_BY_NUM``, which adaptive execution never coalesces: partition i stays task i;
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

__all__ = ["PinnedShuffle", "pin_partitions", "pinned_shuffle"]


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
    shuffled = df.repartitionById(len(tasks), partition_column)
    return PinnedShuffle(
        frame=pin_partitions(shuffled, locations),
        tasks=tuple(tasks),
        locations=locations,
        unplaceable=tuple(unplaceable),
    )
