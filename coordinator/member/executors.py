"""A Spark driver's executors as processors: :class:`ExecutorRegistrar` keeps one ZooKeeper
processor registration per live executor.

:meth:`ExecutorRegistrar.sync` registers new executors and unregisters lost ones. A replacement
executor has a new Spark id, so it is a new processor (``<prefix>-exec-<id>``) at the same
location. The location comes from ``location_of``: for a SparkContext
(:meth:`ExecutorRegistrar.for_context`) :class:`locality.spark.ProbedLocations` by default, which
asks each new executor for its own location (its ``AFFINITY_LOCATION_ID``; on Kubernetes the
``zone/node`` of its pod's node; else its host), so the location an executor is registered at is
the one its tasks report; ``executor_host_location`` registers the host as Spark knows it.
:meth:`ExecutorRegistrar.placement` turns a job model's task -> processor into the task ->
executor placement :func:`locality.spark.run_pinned` takes.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from locality.spark import ProbedLocations, SparkExecutor, SparkExecutors, executor_host_location
from locality.spark.locations import ExecutorLocations
from metadata.ids import location_id_problem
from metadata.zk import ZkMetadataStore

if TYPE_CHECKING:
    from pyspark import SparkContext

    from coordinator.member.group import MemberGroup

__all__ = ["ExecutorRegistrar", "Registration", "SyncResult"]

log = logging.getLogger("affinity.executors")


@dataclass(frozen=True, slots=True)
class Registration:
    """One executor registered as a processor."""

    processor_id: str
    executor: SparkExecutor
    location_id: str
    node: str  # the registration node ("" while a member group registers it)


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What one :meth:`ExecutorRegistrar.sync` changed (processor ids)."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()  # registered again: their node had vanished (session expiry)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.restored)


_PROCESSOR_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass
class ExecutorRegistrar:
    """Keeps one processor registration per live executor in a
    :class:`~metadata.zk.ZkMetadataStore`.

    ``executors`` is a callable returning the live executors (a :class:`SparkExecutors`);
    ``prefix`` names the processors ``<prefix>-exec-<executor id>`` (use the application id, so a
    restarted application's executors, whose ids start again at 0, are new processors);
    ``location_of`` gives an executor's location id (default here: its host; with a
    :class:`~locality.spark.locations.ExecutorLocations` such as ``ProbedLocations``, all the
    executors one sync finds are located at once, and an executor it could not reach yet is
    registered by a later sync; an error it raises fails the sync). ``extra`` is stored in
    every registration (``executor_id`` and ``spark_app`` are added). With ``members`` (a
    :class:`~coordinator.member.group.MemberGroup`), each executor becomes a member of that group,
    which registers it and plays its member role (the Spark driver's case,
    :class:`~coordinator.member.spark_driver.SparkDriverMember`); without, the registrar writes
    the registrations itself (registration only, no barrier).

    Call :meth:`sync` whenever the executors may have changed (before each batch, or every
    ``interval_s`` with :meth:`start`), and :meth:`close` at the end.
    """

    store: ZkMetadataStore
    executors: Callable[[], Sequence[SparkExecutor]]
    prefix: str
    location_of: Callable[[SparkExecutor], str] = executor_host_location
    extra: Mapping[str, Any] = field(default_factory=dict)
    members: MemberGroup | None = None

    def __post_init__(self) -> None:
        self.prefix = _PROCESSOR_ID_UNSAFE.sub("-", self.prefix).strip("-") or "spark"
        self._registered: dict[str, Registration] = {}
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @classmethod
    def for_context(
        cls,
        sc: SparkContext,
        store: ZkMetadataStore,
        *,
        prefix: str | None = None,
        location_of: Callable[[SparkExecutor], str] | None = None,
        extra: Mapping[str, Any] | None = None,
        members: MemberGroup | None = None,
    ) -> ExecutorRegistrar:
        """A registrar for ``sc``'s executors, processors named ``<app id>-exec-<id>``, each at
        the location it reports itself (``ProbedLocations(sc)``) unless ``location_of`` says."""
        return cls(
            store,
            SparkExecutors(sc),
            prefix or str(sc.applicationId),
            location_of if location_of is not None else ProbedLocations(sc),
            {"spark_app": str(sc.applicationId), **(extra or {})},
            members,
        )

    def processor_id(self, executor_id: str) -> str:
        return f"{self.prefix}-exec-{executor_id}"

    @property
    def registrations(self) -> dict[str, Registration]:
        """Processor id -> registration, as of the last :meth:`sync`."""
        with self._lock:
            return dict(self._registered)

    def processor_locality(self) -> dict[str, str]:
        """Processor id -> location id of the registered executors."""
        return {pid: r.location_id for pid, r in self.registrations.items()}

    def executor_of(self, processor_id: str) -> SparkExecutor | None:
        registration = self.registrations.get(processor_id)
        return None if registration is None else registration.executor

    def placement(self, task_to_processor: Mapping[str, str]) -> dict[str, str]:
        """Task -> executor id, from a job model's task -> processor id (for
        :func:`locality.spark.run_pinned`). Tasks of processors that are not registered executors
        are left out (no preference)."""
        registered = self.registrations
        return {
            task: registered[pid].executor.executor_id
            for task, pid in task_to_processor.items()
            if pid in registered
        }

    def sync(self) -> SyncResult:
        """Register new executors, unregister lost ones, re-register vanished nodes.

        New executors are located first (probing them runs Spark jobs: seconds), so that a
        replacement and the executor it replaces change the membership together, in one
        rebalance. If locating fails, the lost executors are still unregistered, then the error
        is raised."""
        with self._lock:
            live = {e.executor_id: e for e in self.executors()}
            staying = {
                r.executor.executor_id
                for r in self._registered.values()
                if live.get(r.executor.executor_id) == r.executor
            }
            new = [e for executor_id, e in live.items() if executor_id not in staying]
            try:
                locations = self._locate(new)
            except Exception:
                self._drop_lost(live)
                raise
            removed = self._drop_lost(live)
            restored = self._restore_vanished()
            added = []
            for executor in new:
                if executor.executor_id not in locations:
                    continue  # not reached yet: a later sync registers it
                registration = self._register(executor, locations[executor.executor_id])
                self._registered[registration.processor_id] = registration
                added.append(registration.processor_id)
            result = SyncResult(tuple(added), tuple(removed), tuple(restored))
        if result.changed:
            log.info("executors synced: +%s -%s restored %s", added, removed, restored)
        return result

    def _drop_lost(self, live: Mapping[str, SparkExecutor]) -> list[str]:
        """Unregister the executors that are not live (or changed); their processor ids."""
        removed = []
        for pid, registration in list(self._registered.items()):
            if live.get(registration.executor.executor_id) != registration.executor:
                self._unregister(registration)
                del self._registered[pid]
                removed.append(pid)
        return removed

    def _restore_vanished(self) -> list[str]:
        """Register again the executors whose node vanished (a session expiry)."""
        restored: list[str] = []
        if not self._registered or self.members is not None:  # members re-register themselves
            return restored
        alive_nodes = {r.node for r in self.store.processors.read()[0]}
        for pid, registration in list(self._registered.items()):
            if registration.node not in alive_nodes:
                self._registered[pid] = self._register(
                    registration.executor, registration.location_id
                )
                restored.append(pid)
        return restored

    def _locate(self, executors: Sequence[SparkExecutor]) -> dict[str, str]:
        """Executor id -> location of ``executors`` (those ``location_of`` could reach)."""
        if not executors:
            return {}
        if isinstance(self.location_of, ExecutorLocations):
            found = self.location_of.locate(executors)
        else:
            found = {e.executor_id: self.location_of(e) for e in executors}
        usable = {}
        for executor_id, location in found.items():
            problem = location_id_problem(location)
            if problem is None:
                usable[executor_id] = location
            else:  # not registered (it would take tasks it cannot record the locality of)
                log.warning("executor %s not registered: %s", executor_id, problem)
        return usable

    def _register(self, executor: SparkExecutor, location: str) -> Registration:
        pid = self.processor_id(executor.executor_id)
        extra = {**self.extra, "executor_id": executor.executor_id}
        if self.members is not None:
            self.members.add(pid, location, executor.host, **extra)
            return Registration(pid, executor, location, node="")
        node = self.store.processors.register(pid, location, host=executor.host, **extra)
        return Registration(pid, executor, location, node)

    def _unregister(self, registration: Registration) -> None:
        if self.members is not None:
            self.members.remove(registration.processor_id)
        else:
            self.store.processors.unregister(registration.node)

    def start(self, interval_s: float = 1.0) -> None:
        """Call :meth:`sync` every ``interval_s`` on a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.sync()
                except Exception:  # keep syncing; the next round retries
                    log.exception("executor sync failed")

        self._thread = threading.Thread(target=loop, name="affinity-executor-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()

    def close(self) -> None:
        """Stop syncing and unregister every executor this registrar registered."""
        self.stop()
        with self._lock:
            for registration in self._registered.values():
                self._unregister(registration)
            self._registered.clear()

    def __enter__(self) -> ExecutorRegistrar:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
