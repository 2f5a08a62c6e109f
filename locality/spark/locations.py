"""Where an executor is, as the driver asks: the ``location_of`` functions an executor
registrar takes (``coordinator.member.executors.ExecutorRegistrar``).

- :func:`executor_host_location`: the executor's host, as Spark knows it (on Kubernetes: the
  pod's address, new with every pod; use it only where the host is the machine);
- :class:`ProbedLocations`: asks each executor for its own location
  (:class:`~locality.spark.provider.SparkExecutorLocationIdProvider`, the provider the
  executor's tasks use too, so the location an executor is registered at is the one its tasks
  report) with pinned probe tasks, all new executors in one Spark job (:meth:`locate`).

A module of its own because it both runs pinned tasks (:mod:`locality.spark.pinning`) and uses
the executor-side provider (:mod:`locality.spark.provider`), which pinning itself needs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from locality.base import LocationError
from locality.spark.executors import SparkExecutor
from locality.spark.pinning import run_pinned
from locality.spark.provider import EXECUTOR_LOCATION_ENV, SparkExecutorLocationIdProvider

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["ExecutorLocations", "ProbedLocations", "executor_host_location"]

log = logging.getLogger(__name__)


def executor_host_location(executor: SparkExecutor) -> str:
    """The location of an executor as its host (the default of a bare registrar)."""
    return executor.host


@runtime_checkable
class ExecutorLocations(Protocol):
    """A ``location_of`` that can also locate many executors at once (a registrar uses
    :meth:`locate` for the executors one sync finds, when its ``location_of`` has it)."""

    def __call__(self, executor: SparkExecutor) -> str: ...

    def locate(self, executors: Sequence[SparkExecutor]) -> dict[str, str]: ...


def _probe(_task: str, var: str) -> tuple[bool, str]:
    """On an executor: ``(True, location)``, or ``(False, why not)`` (the answer travels back
    as a result, not a task failure Spark would retry on other executors)."""
    try:
        return True, SparkExecutorLocationIdProvider(var).location_id()
    except LocationError as exc:
        return False, str(exc)


class ProbedLocations:
    """``location_of`` for an executor registrar that asks each executor for its own
    location (:class:`SparkExecutorLocationIdProvider` with ``var``) with pinned probe tasks.

    A probe that ran on another executor (it can, after ``locality_wait``) answers for the
    executor that ran it; the executors no probe reached are asked again, up to ``attempts``
    rounds. An executor that cannot tell its location (on Kubernetes: the API refused, is down,
    or the pod has no node) is an error, :class:`LocationError` naming the executor and the
    cause: never a silent fallback to the executor's host.
    """

    def __init__(
        self,
        sc: SparkContext,
        *,
        var: str = EXECUTOR_LOCATION_ENV,
        locality_wait: str = "10s",
        attempts: int = 3,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.sc = sc
        self.var = var
        self.locality_wait = locality_wait
        self.attempts = attempts

    def locate(self, executors: Sequence[SparkExecutor]) -> dict[str, str]:
        """Executor id -> location of each of ``executors`` a probe reached (one Spark job per
        round). Executors no probe reached in ``attempts`` rounds (busy or lost) are left out
        and logged; raises :class:`LocationError` when an executor answers that it cannot tell."""
        wanted = {e.executor_id: e for e in executors}
        found: dict[str, str] = {}
        for _ in range(self.attempts):
            missing = sorted(set(wanted) - set(found))
            if not missing:
                break
            tasks = {f"probe-{eid}": self.var for eid in missing}
            run = run_pinned(
                self.sc,
                tasks,
                {f"probe-{eid}": eid for eid in missing},
                _probe,
                locality_wait=self.locality_wait,
                description=f"affinity: location of executors {', '.join(missing)}",
            )
            for task in run.tasks.values():
                ran_on = task.executor_id
                if ran_on is None or ran_on not in wanted or ran_on in found:
                    continue
                ok, answer = task.result
                if not ok:
                    raise LocationError(
                        f"executor {ran_on} ({wanted[ran_on].host}) cannot tell its location: "
                        f"{answer}"
                    )
                found[ran_on] = answer
        unreached = sorted(set(wanted) - set(found))
        if unreached:
            log.warning(
                "no location probe ran on executor(s) %s in %d round(s); asking again later",
                unreached,
                self.attempts,
            )
        return found

    def __call__(self, executor: SparkExecutor) -> str:
        found = self.locate([executor])
        if executor.executor_id not in found:
            raise LocationError(
                f"no location probe ran on executor {executor.executor_id} ({executor.host}) in "
                f"{self.attempts} round(s) of {self.locality_wait}: it is busy or lost, and its "
                "location is unknown"
            )
        return found[executor.executor_id]
