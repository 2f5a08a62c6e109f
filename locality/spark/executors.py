"""The live executors of a Spark application, as the driver sees them.

:class:`SparkExecutors` lists them (``executor_id``, ``host``) from
``sc._jsc.sc().statusStore().executorList(True)``, without the driver; :class:`SparkExecutor` is
one of them, and its :attr:`~SparkExecutor.task_location` is the preferred-location string that
pins a Spark task to it.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["DRIVER_ID", "SparkExecutor", "SparkExecutors"]

#: The executor id Spark gives the driver (excluded from :meth:`SparkExecutors.list`).
DRIVER_ID = "driver"


@dataclass(frozen=True, slots=True)
class SparkExecutor:
    """One live executor of the application, as the driver knows it."""

    executor_id: str
    host: str

    @property
    def task_location(self) -> str:
        """The preferred-location string that pins a task to this executor (process-local)."""
        return f"executor_{self.host}_{self.executor_id}"


def _host_of(host_port: str) -> str:
    """``host`` of ``host:port`` (an executor being registered may not have its port yet)."""
    if host_port.startswith("["):  # [v6::addr]:port
        return host_port[1:].split("]", 1)[0]
    host, sep, port = host_port.rpartition(":")
    if sep and port.isdigit() and host.count(":") == 0:
        return host
    return host_port


def _executor_sort_key(executor: SparkExecutor) -> tuple[int, int | str]:
    eid = executor.executor_id
    return (0, int(eid)) if eid.isdigit() else (1, eid)


class SparkExecutors:
    """The live executors of one SparkContext (from Spark's status store, driver excluded)."""

    def __init__(self, sc: SparkContext) -> None:
        self.sc = sc

    @property
    def application_id(self) -> str:
        return str(self.sc.applicationId)

    def list(self) -> builtins.list[SparkExecutor]:
        """The live executors, sorted by id (numerically)."""
        summaries = self.sc._jsc.sc().statusStore().executorList(True)
        executors = []
        for i in range(summaries.size()):
            summary = summaries.apply(i)
            executor_id = str(summary.id())
            if executor_id == DRIVER_ID or not summary.isActive():
                continue
            executors.append(SparkExecutor(executor_id, _host_of(str(summary.hostPort()))))
        return sorted(executors, key=_executor_sort_key)

    def __call__(self) -> builtins.list[SparkExecutor]:
        return self.list()

    def by_id(self) -> dict[str, SparkExecutor]:
        return {e.executor_id: e for e in self.list()}

    def wait_for(
        self,
        count: int,
        *,
        timeout_s: float = 120.0,
        poll_s: float = 0.25,
        hosts: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
    ) -> builtins.list[SparkExecutor]:
        """Wait until at least ``count`` executors are live (not counting the ids in
        ``exclude``; with ``hosts``, at least one on each of those hosts) and return them all.
        Raises ``TimeoutError`` naming what is live."""
        excluded = set(exclude)
        wanted_hosts = set(hosts or ())
        deadline = time.monotonic() + timeout_s
        while True:
            live = self.list()
            counted = [e for e in live if e.executor_id not in excluded]
            if len(counted) >= count and wanted_hosts <= {e.host for e in counted}:
                return live
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"waited {timeout_s}s for {count} executors"
                    + (f" on {sorted(wanted_hosts)}" if wanted_hosts else "")
                    + f"; live: {[(e.executor_id, e.host) for e in live]}"
                )
            time.sleep(poll_s)
