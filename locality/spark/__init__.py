"""locality.spark: Spark placement: executors as processors, stages pinned to executors,
executor locations.

- :mod:`~locality.spark.executors`: the live executors of a SparkContext (driver side);
- :mod:`~locality.spark.pinning`: :func:`run_pinned` / :func:`pinned_rdd`, one Spark task per
  affinity task with the preferred location the placement names, and the locality wait;
- :mod:`~locality.spark.provider`: executor side: which executor runs this worker and its
  location id (:class:`SparkExecutorLocationIdProvider`);
- :mod:`~locality.spark.locations`: an executor's location as the driver asks it (its host, or
  :class:`ProbedLocations`);
- :mod:`~locality.spark.jvm` / :mod:`~locality.spark.maven`: the project's jar, and jars from
  Maven Central (a Kafka broker's, Spark's Kafka connector); not imported here;
- :mod:`~locality.spark.kafka`: a task's Kafka partition: offsets, its range read straight from
  the broker, the sink (confluent-kafka); not imported here;
- :mod:`~locality.spark.kafka_source`: the pinned Kafka source (``format("affinity-kafka")``):
  its placement, set by the driver before a batch runs; not imported here;
- :mod:`~locality.spark.status`: what Spark's status store says (shuffle bytes so far); not
  imported here.

Registering executors as processors is the member's job: ``coordinator.member.executors``;
``stateful_foreach_batch`` (DESIGN.md "Spark streaming") is ``coordinator.streaming``, whose
executor side is :mod:`locality.spark.state`. This package imports nothing from ``coordinator``.
Inside, ``pinning`` uses ``executors`` and ``provider``, and ``locations`` uses all three;
nothing imports back. May import ``locality.base`` (and ``metadata.model``); never other
``metadata`` modules, ``groupers`` or ``coordinator``. Re-exports its modules' public names.
"""

from __future__ import annotations

from locality.spark.executors import DRIVER_ID, SparkExecutor, SparkExecutors
from locality.spark.locations import ProbedLocations, executor_host_location
from locality.spark.pinning import LOCALITY_WAIT_KEYS, PinnedRun, PinnedTask, pinned_rdd, run_pinned
from locality.spark.provider import (
    EXECUTOR_LOCATION_ENV,
    SparkExecutorLocationIdProvider,
    current_executor_host,
    current_executor_id,
)

__all__ = [
    "DRIVER_ID",
    "EXECUTOR_LOCATION_ENV",
    "LOCALITY_WAIT_KEYS",
    "PinnedRun",
    "PinnedTask",
    "ProbedLocations",
    "SparkExecutor",
    "SparkExecutorLocationIdProvider",
    "SparkExecutors",
    "current_executor_host",
    "current_executor_id",
    "executor_host_location",
    "pinned_rdd",
    "run_pinned",
]
