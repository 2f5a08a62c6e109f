"""locality.spark: Spark placement: executors as processors, stages pinned to executors,
executor locations.

- :mod:`~locality.spark.executors`: the live executors of a SparkContext (driver side);
- :mod:`~locality.spark.pinning`: :func:`run_pinned` / :func:`pinned_rdd`, one Spark task per
  affinity task with the preferred location the placement names, and the locality wait;
- :mod:`~locality.spark.provider`: executor side: which executor runs this worker and its
  location id (:class:`SparkExecutorLocationIdProvider`);
- :mod:`~locality.spark.locations`: an executor's location as the driver asks it (its host, or
  :class:`ProbedLocations`).

Registering executors as processors is the member's job: ``coordinator.member.executors``.
:func:`stateful_foreach_batch` (the API of DESIGN.md "Spark streaming") is a thin function that
imports its driver side, ``coordinator.member.streaming``, when called: the one import from
``locality`` up to ``coordinator`` (declared in pyproject.toml). Its executor side is
:mod:`locality.spark.state`.
Inside, ``pinning`` uses ``executors`` and ``provider``, and ``locations`` uses all three;
nothing imports back. May import ``locality.base`` (and ``metadata.model``); never other
``metadata`` modules, ``groupers`` or ``coordinator``. Re-exports its modules' public names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from locality.spark.executors import DRIVER_ID, SparkExecutor, SparkExecutors
from locality.spark.locations import ProbedLocations, executor_host_location
from locality.spark.pinning import LOCALITY_WAIT_KEYS, PinnedRun, PinnedTask, pinned_rdd, run_pinned
from locality.spark.provider import (
    EXECUTOR_LOCATION_ENV,
    SparkExecutorLocationIdProvider,
    current_executor_host,
    current_executor_id,
)

if TYPE_CHECKING:
    from coordinator.member.streaming import StatefulQuery

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
    "stateful_foreach_batch",
]


def stateful_foreach_batch(
    func: Callable[..., Any],
    *,
    key_columns: Iterable[str],
    output_schema: Any,
    state_schema: Any,
    sink: Callable[[Any, int], None],
    config: Any,
    **options: Any,
) -> StatefulQuery:
    """A ``foreachBatch`` handler running ``func`` (an ``applyInPandasWithState`` function:
    ``(key: tuple, pdfs: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]``) per key,
    each key's state kept local on the executor its job model names; each batch's output
    DataFrame goes to ``sink(df, batch_id)``. ``config``: the job config (a
    ``coordinator.config.JobConfig``). ``options``: ``timeout`` (``"NoTimeout"`` or
    ``"ProcessingTimeTimeout"``), ``storage`` (a :class:`locality.spark.state.Storage`),
    ``coordinator`` (``"embedded"``, the default: a coordinator replica in the driver; or
    ``"external"``: ``affinity coordinator run``), ``locality_wait``. See ``docs/spark.md``.
    """
    from coordinator.member.streaming import StatefulQuery

    return StatefulQuery(
        func,
        key_columns=key_columns,
        output_schema=output_schema,
        state_schema=state_schema,
        sink=sink,
        config=config,
        **options,
    )
