"""The Spark driver's part in the barrier protocol: a member for each of its executors.

A Spark application's executors are the job's processors, but only the driver talks to
ZooKeeper. :class:`SparkDriverMember` registers every live executor as a processor
(:class:`~coordinator.member.executors.ExecutorRegistrar`; each at the location it reports
itself, ``ProbedLocations``, unless ``location_of`` says otherwise: on Kubernetes the
``zone/node`` of its pod's node) and plays each executor's member role
through the same member machine as ``affinity processor run``
(:class:`~coordinator.member.group.MemberGroup`): it joins each version's barrier for the
executors that version names, and once the barrier is DONE the executors' tasks "run" there:
:meth:`in_force` gives the task -> processor assignment every executor follows, and
:meth:`placement` the task -> executor id to pin a stage's tasks with
(:func:`locality.spark.run_pinned`). Task locality is written after DONE (I4). With standby
replicas, the assignment also names each task's standby copies, and
:meth:`report_standby_lag` reports how far each is behind.

Usage::

    with SparkDriverMember(kazoo, store, spark.sparkContext, job="clicks-1") as driver:
        driver.sync()                                   # executors -> processors
        assignment = driver.in_force(timeout_s=60)      # waits for a DONE model naming them all
        placement = driver.placement(assignment.task_to_processor)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient

from coordinator.member.executors import ExecutorRegistrar, SyncResult
from coordinator.member.group import MemberGroup
from locality.spark import SparkExecutor
from metadata.model import TaskModel
from metadata.zk import ZkMetadataStore

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["RESYNC_S", "DriverAssignment", "NotInForce", "SparkDriverMember", "executor_cores"]


def executor_cores(sc: SparkContext) -> int:
    """``spark.executor.cores`` (1 when unset or not a number): each executor's capacity."""
    value = str(sc.getConf().get("spark.executor.cores", "1") or "1")
    return int(value) if value.isdigit() and int(value) > 0 else 1


#: How often :meth:`SparkDriverMember.in_force` syncs again while no executor is registered.
RESYNC_S = 1.0


class NotInForce(TimeoutError):
    """No job model naming every registered executor reached DONE in time."""


@dataclass(frozen=True)
class DriverAssignment:
    """The version every registered executor runs, its task -> processor assignment and its
    standby copies (task -> the processors holding one; empty without ``standby_replicas``)."""

    version: int
    task_to_processor: Mapping[str, str]
    standbys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class SparkDriverMember:
    """The member role of a Spark driver's executors (see the module docstring)."""

    def __init__(
        self,
        client: KazooClient,
        store: ZkMetadataStore,
        sc: SparkContext,
        *,
        job: str = "",
        prefix: str | None = None,
        location_of: Callable[[SparkExecutor], str] | None = None,
        extra: Mapping[str, Any] | None = None,
        log: Any = None,  # the member group's structlog logger (default: affinity.member)
    ) -> None:
        self._changed = threading.Condition()
        self.group = MemberGroup(
            client,
            store,
            on_start=self._tasks_changed,
            on_stop=self._tasks_changed,
            job=job,
            log=log,
        )
        capacity = {"capacity": executor_cores(sc)}  # balance by capacity (DESIGN.md)
        self.registrar = ExecutorRegistrar.for_context(
            sc,
            store,
            prefix=prefix,
            location_of=location_of,
            extra={**capacity, **(extra or {})},
            members=self.group,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self.group.run, args=(self._stop,), name="affinity-driver-member", daemon=True
        )
        self._thread.start()

    def sync(self) -> SyncResult:
        """Executors -> processors: new executors become members, lost ones leave."""
        return self.registrar.sync()

    def in_force(self, timeout_s: float = 120.0, tasks: Collection[str] = ()) -> DriverAssignment:
        """Wait until every registered executor runs one DONE version (giving an executor to
        each of ``tasks``: a model from before an executor was lost leaves its tasks without
        one); its assignment.

        While no executor is registered, it syncs again every :data:`RESYNC_S`: an application's
        executors register with the driver seconds after its session starts (each a JVM its
        worker launches; on a busy machine, tens of seconds), so a query's first batch can begin
        before any has, and the sync before it finds none (or no probe reaches them yet). The
        executors then join as they come, within the same ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        next_sync = time.monotonic() + RESYNC_S
        while True:
            with self._changed:
                found = self._common_version(tasks)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise NotInForce(self._not_in_force(timeout_s))
                self._changed.wait(min(left, 0.2))
            if not self.registrar.registrations and time.monotonic() >= next_sync:
                self.sync()  # outside the lock: locating new executors runs Spark jobs
                next_sync = time.monotonic() + RESYNC_S

    def _not_in_force(self, timeout_s: float) -> str:
        registered = sorted(self.registrar.registrations)
        text = f"no job model in force for {registered} within {timeout_s:.0f}s"
        text += f" (members run {self._versions()})"
        if not registered:
            live = [e.executor_id for e in self.registrar.executors()]
            text += f"; no executor registered (live executors: {live})"
        return text

    def placement(self, task_to_processor: Mapping[str, str]) -> dict[str, str]:
        """Task -> executor id for :func:`locality.spark.run_pinned`."""
        return self.registrar.placement(task_to_processor)

    def report_standby_lag(self, processor_id: str, task: str, lag: int) -> None:
        """How far ``processor_id``'s standby copy of ``task`` is behind (0: at the latest
        commit); written to ZooKeeper for the leader's failover and warm-up decisions."""
        self.group.report_standby_lag(processor_id, task, lag)

    def close(self) -> None:
        """Stop following; every executor's member stops and unregisters."""
        self.registrar.stop()
        self._stop.set()
        self._thread.join(10)

    def __enter__(self) -> SparkDriverMember:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -------------------------------------------------------------------- helpers

    def _tasks_changed(self, _pid: str, _v: int | None, _t: Mapping[str, TaskModel]) -> None:
        with self._changed:
            self._changed.notify_all()

    def _versions(self) -> dict[str, int | None]:
        return {pid: version for pid, (version, _) in self.group.running().items()}

    def _common_version(self, tasks: Collection[str]) -> DriverAssignment | None:
        running = self.group.running()
        registered = set(self.registrar.registrations)
        versions = {running[pid][0] for pid in registered if pid in running}
        if not registered or registered - set(running) or len(versions) != 1:
            return None
        (version,) = versions
        if version is None:
            return None
        owners = {task: pid for pid in registered for task in running[pid][1]}
        if any(task not in owners for task in tasks):
            return None  # the model of a lost executor: the next one gives its tasks away
        held = self.group.standbys()
        if any(held.get(pid, (None,))[0] != version for pid in registered):
            return None  # a member is between its tasks and its standbys of this version
        copies: dict[str, list[str]] = {}
        for pid in sorted(registered):
            for task in held[pid][1]:
                copies.setdefault(task, []).append(pid)
        standbys = {task: tuple(pids) for task, pids in sorted(copies.items())}
        return DriverAssignment(version, owners, standbys)
