"""The processor client: one processor of a job, following its job models behind their barriers.

What it does is the member machine's (:mod:`coordinator.protocol.member`: register, stop what it
loses, join, start on DONE, resync after an error, stop everything on session loss); this class
is that machine's adapter for a single processor, :class:`~coordinator.member.group.MemberGroup`
with one member, under the callback signature ``affinity processor run`` uses.

One processor id, one processor (I3): a processor whose id an older live registration holds
waits ``duplicate_wait_s`` (give it the session timeout: a restarted processor's previous
registration expires within it) for that registration to go, running nothing; if it stays,
:meth:`ProcessorClient.run` removes its own and raises
:class:`~metadata.zk.DuplicateRegistration` naming the older node.

Usage::

    client = ProcessorClient(kazoo, store, "p-1", "zone-a/host-1", on_start=start, on_stop=stop,
                             capacity=2)   # takes twice the tasks of a capacity-1 processor
    client.run(stop_event)     # until stop_event is set
    client.report_standby_lag("Partition 3", 0)   # (the runtime, any thread) a standby caught up

``on_start_standby(version, tasks)`` and ``on_stop_standby(version, tasks)`` start and stop the
standby replicas the job model gives the processor.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Mapping

from kazoo.client import KazooClient

from coordinator.member.group import MemberGroup
from metadata.model import TaskModel
from metadata.zk import DuplicateRegistration, ZkMetadataStore

__all__ = ["ProcessorClient"]

OnStart = Callable[[int, Mapping[str, TaskModel]], None]
OnStop = Callable[[int | None, Mapping[str, TaskModel]], None]


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
        duplicate_wait_s: float = 10.0,
        capacity: int = 1,
        on_start_standby: OnStart | None = None,
        on_stop_standby: OnStop | None = None,
    ) -> None:
        self.processor_id = processor_id
        self.location_id = location_id
        self.host = host or socket.gethostname()

        def start(_pid: str, version: int | None, tasks: Mapping[str, TaskModel]) -> None:
            assert version is not None  # tasks start under a DONE version
            on_start(version, tasks)

        def stop(_pid: str, version: int | None, tasks: Mapping[str, TaskModel]) -> None:
            on_stop(version, tasks)

        self.refusal: DuplicateRegistration | None = None

        def refused(pid: str, node: str, older: str) -> None:
            self.refusal = DuplicateRegistration(pid, node, older)
            self.group.stop()

        def start_standby(_pid: str, version: int | None, tasks: Mapping[str, TaskModel]) -> None:
            if on_start_standby is not None:
                assert version is not None  # standbys start under a DONE version
                on_start_standby(version, tasks)

        def stop_standby(_pid: str, version: int | None, tasks: Mapping[str, TaskModel]) -> None:
            if on_stop_standby is not None:
                on_stop_standby(version, tasks)

        self.group = MemberGroup(
            client,
            store,
            on_start=start,
            on_stop=stop,
            on_start_standby=start_standby,
            on_stop_standby=stop_standby,
            job=job,
            duplicate_wait_s=duplicate_wait_s,
            on_refused=refused,
        )
        # Registered with the processor (absent: 1); the grouper balances by it.
        extra = {} if capacity == 1 else {"capacity": capacity}
        self.group.add(processor_id, location_id, self.host, **extra)
        self._machine = self.group.member(processor_id)

    @property
    def running(self) -> dict[str, TaskModel]:
        """The tasks this processor runs (all of version :attr:`running_version`)."""
        return dict(self._machine.running) if self._machine else {}

    @property
    def standbys(self) -> dict[str, TaskModel]:
        """The standby replicas this processor keeps warm."""
        return dict(self._machine.standbys) if self._machine else {}

    def report_standby_lag(self, task: str, lag: int) -> None:
        """How far this processor's standby copy of ``task`` is behind (an integer >= 0; 0:
        caught up), for the leader (``GrouperMetadata.task_state``): a warm-up replica's task
        moves here once it is caught up. Thread-safe; written only when it changes."""
        self.group.report_standby_lag(self.processor_id, task, lag)

    @property
    def running_version(self) -> int | None:
        return self._machine.running_version if self._machine else None

    def stop(self) -> None:
        self.group.stop()

    def run(self, stop: threading.Event | None = None) -> None:
        """Follow the job models until ``stop``; raises DuplicateRegistration if refused."""
        self.group.run(stop)
        if self.refusal is not None:
            raise self.refusal
