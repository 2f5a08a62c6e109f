"""The processor client: registers a processor and follows the job models behind their barriers.

Protocol (DESIGN.md "Data flow", invariants I3 and I4):

1. Register under ``processors/`` (ephemeral) with the processor's location id.
2. On every new job-model version ``v``: read this processor's container of it (its container
   view: a few KB, not the whole model); stop the tasks it no longer gives this
   processor (``on_stop``); if ``v`` names this processor, join barrier ``v``.
   A version that leaves this processor's tasks as they are stops nothing. When the manifest
   says this processor keeps every task it runs (it runs the version the model was planned
   against and is not among the processors that lose a task), there is nothing to stop, so it
   joins first and reads its tasks while the others join.
3. When barrier ``v`` is DONE, start the tasks that are new to this processor (``on_start``) and
   write their task locality (the store writes only what changed). If it is TIMED_OUT, start
   nothing and wait for the next version, which the leader generates at once.
4. Tasks therefore run only under a DONE version, and the running set changes only when a
   barrier is DONE: a processor never runs two versions at once (I3), and locality is written
   after DONE by the owner (I4).
5. If the ZooKeeper session is lost, the registration and barrier membership are gone and the
   leader may give the tasks to others: the client stops every task at once, registers again
   when a new session is up, and re-syncs from the latest version.

Events from kazoo's threads (watches, connection state) only go onto a queue; one thread does
the work, so the callbacks never block kazoo.
"""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException

from metadata.errors import MetadataError
from metadata.model import TaskModel
from metadata.zk import NotFound, ZkMetadataStore

__all__ = ["ProcessorClient"]

OnStart = Callable[[int, Mapping[str, TaskModel]], None]
OnStop = Callable[[int | None, Mapping[str, TaskModel]], None]


@dataclass(frozen=True)
class _Version:
    version: int | None


@dataclass(frozen=True)
class _Barrier:
    version: int
    state: str | None


@dataclass(frozen=True)
class _Session:
    state: str


class ProcessorClient:
    """One processor of a job: ``run(stop)`` until ``stop`` is set (see the module docstring)."""

    def __init__(
        self,
        client: KazooClient,
        store: ZkMetadataStore,
        processor_id: str,
        location_id: str,
        *,
        on_start: OnStart,
        on_stop: OnStop,
        host: str | None = None,
        job: str = "",
    ) -> None:
        self.client = client
        self.store = store
        self.processor_id = processor_id
        self.location_id = location_id
        self.host = host or socket.gethostname()
        self.on_start = on_start
        self.on_stop = on_stop
        self.log = structlog.get_logger("affinity.processor").bind(
            job=job, processor=processor_id, location=location_id
        )
        self.running: dict[str, TaskModel] = {}
        self.running_version: int | None = None
        self._target: tuple[int, dict[str, TaskModel]] | None = None
        self._seen_version = -1
        self._node: str | None = None
        self._events: queue.Queue[_Version | _Barrier | _Session | None] = queue.Queue()
        self._watches: list[Any] = []
        self._needs_registration = True

    # -------------------------------------------------------------------- lifecycle

    def _stop_when(self, stop: threading.Event) -> None:
        stop.wait()
        self.stop()

    def stop(self) -> None:
        self._events.put(None)

    def run(self, stop: threading.Event | None = None) -> None:
        if stop is not None:
            threading.Thread(
                target=self._stop_when, args=(stop,), name="stop-watcher", daemon=True
            ).start()
        self.client.add_listener(self._on_state)
        self.store.ensure_layout()
        try:
            while True:
                if self._needs_registration and self.client.connected:
                    self._register()
                try:
                    item = self._events.get(timeout=1.0)
                except queue.Empty:
                    continue
                if item is None:
                    break
                try:
                    self._handle(item)
                except (MetadataError, KazooException) as exc:
                    # The store is unhappy (connection, a race with retention): re-sync soon,
                    # following the latest version even if it is the one that just failed
                    # (seen already), after a pause so that a lasting error does not spin.
                    self.log.warning("processor.store_error", error=repr(exc))
                    self._seen_version = -1
                    retry = threading.Timer(1.0, self._events.put, args=(_Version(None),))
                    retry.daemon = True
                    retry.start()
        finally:
            self.client.remove_listener(self._on_state)
            for watch in self._watches:
                watch.stop()
            if self.running:
                self._stop_tasks(dict(self.running))
            if self._node is not None and self.client.connected:
                try:
                    self.store.unregister_processor(self._node)
                except (MetadataError, KazooException) as exc:
                    self.log.warning("processor.unregister_failed", error=repr(exc))

    def _on_state(self, state: str) -> None:
        self._events.put(_Session(state))

    def _register(self) -> None:
        self._node = self.store.register_processor(self.processor_id, self.location_id, self.host)
        self._needs_registration = False
        self.log.info("processor.registered", node=self._node)
        for watch in self._watches:
            watch.stop()
        self._watches = [self.store.watch_version(lambda v: self._events.put(_Version(v)))]

    # -------------------------------------------------------------------- events

    def _handle(self, item: _Version | _Barrier | _Session) -> None:
        if isinstance(item, _Session):
            if item.state == KazooState.LOST:
                # Our tasks may be given to others now: stop them all before anything else.
                self.log.warning("processor.session_lost")
                if self.running:
                    self._stop_tasks(dict(self.running))
                self._target = None
                self._seen_version = -1
                self._node = None
                self._needs_registration = True
            return
        if isinstance(item, _Version):
            version = item.version
            if version is None:
                version = self.store.read_latest_version()
            if version is None or version <= self._seen_version:
                return
            self._seen_version = version
            self._follow(version)
            return
        target = self._target
        if target is None or item.version != target[0]:
            return
        if item.state == "DONE":
            self._target = None
            self._start(target[0], target[1])
        elif item.state == "TIMED_OUT":
            self._target = None
            self.log.warning("processor.barrier_timed_out", version=item.version)

    def _follow(self, version: int) -> None:
        try:
            manifest = self.store.read_manifest(version)
        except NotFound:
            return  # superseded and removed already: a newer version event follows
        log = self.log.bind(version=version)
        early = bool(self.running) and manifest.keeps_everything(
            self.processor_id, self.running_version
        )
        if early:
            # Nothing of ours moves (the manifest says so against the version we run): join at
            # once, and read our tasks while the others join.
            self.store.join_barrier(version, self.processor_id)
        container = self.store.read_container(version, self.processor_id, manifest=manifest)
        mine = dict(container.tasks) if container is not None else {}
        leaving = {n: t for n, t in self.running.items() if mine.get(n) != t}
        if leaving:
            if early:
                log.error("processor.manifest_disagrees", leaving=sorted(leaving)[:10])
            self._stop_tasks(leaving)
        if container is None:
            self._target = None
            log.info("processor.not_in_model")
            return
        self._target = (version, mine)
        if not early:
            self.store.join_barrier(version, self.processor_id)
        log.info("processor.joined_barrier", tasks=len(mine), stopped=len(leaving), early=early)

        def on_barrier(state: str | None) -> None:
            self._events.put(_Barrier(version, state))

        self._watches.append(self.store.watch_barrier_state(version, on_barrier))

    def _stop_tasks(self, tasks: Mapping[str, TaskModel]) -> None:
        self.on_stop(self.running_version, tasks)
        for name in tasks:
            self.running.pop(name, None)
        self.log.info("processor.stopped", tasks=len(tasks))

    def _start(self, version: int, mine: dict[str, TaskModel]) -> None:
        arriving = {n: t for n, t in mine.items() if self.running.get(n) != t}
        self.running_version = version
        if arriving:
            self.on_start(version, arriving)
        self.running = dict(mine)
        written = self.store.write_task_locality({name: self.location_id for name in mine})
        self.log.info(
            "processor.running",
            version=version,
            tasks=len(mine),
            started=len(arriving),
            locality_writes=written,
        )
