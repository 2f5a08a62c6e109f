"""Where an executor is, as the driver asks: the ``location_of`` functions an executor
registrar takes (``coordinator.member.executors.ExecutorRegistrar``).

- :func:`executor_host_location`: the executor's host (the default);
- :class:`ProbedLocations`: asks each executor for its own location
  (:class:`~locality.spark.provider.SparkExecutorLocationIdProvider`) with one pinned probe task.

A module of its own because it both runs pinned tasks (:mod:`locality.spark.pinning`) and uses
the executor-side provider (:mod:`locality.spark.provider`), which pinning itself needs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from locality.spark.executors import SparkExecutor
from locality.spark.pinning import run_pinned
from locality.spark.provider import (
    EXECUTOR_LOCATION_ENV,
    SparkExecutorLocationIdProvider,
    current_executor_id,
)

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["ProbedLocations", "executor_host_location"]

log = logging.getLogger(__name__)


def executor_host_location(executor: SparkExecutor) -> str:
    """The default location of an executor: its host."""
    return executor.host


def _probe(_task: str, var: str) -> tuple[str | None, str]:
    return current_executor_id(), SparkExecutorLocationIdProvider(var).location_id()


class ProbedLocations:
    """``location_of`` for an executor registrar that asks each executor for its own
    location (:class:`SparkExecutorLocationIdProvider` with ``var``), with one pinned probe task.

    A probe that ran on another executor (it can, after ``locality_wait``) is retried up to
    ``attempts`` times; then the executor's host is used and a warning logged.
    """

    def __init__(
        self,
        sc: SparkContext,
        *,
        var: str = EXECUTOR_LOCATION_ENV,
        locality_wait: str = "10s",
        attempts: int = 3,
    ) -> None:
        self.sc = sc
        self.var = var
        self.locality_wait = locality_wait
        self.attempts = attempts

    def __call__(self, executor: SparkExecutor) -> str:
        var = self.var
        for _ in range(self.attempts):
            run = run_pinned(
                self.sc,
                {"probe": var},
                {"probe": executor.executor_id},
                _probe,
                locality_wait=self.locality_wait,
                description=f"affinity: location of executor {executor.executor_id}",
            )
            ran_on, location = run.results["probe"]
            if ran_on == executor.executor_id:
                return location
        log.warning("could not probe executor %s; using its host", executor.executor_id)
        return executor.host
