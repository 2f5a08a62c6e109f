"""The member adapter: drives one :class:`~coordinator.protocol.member.MemberMachine` per
processor over ZooKeeper, for one processor (``affinity processor run``) or for many (a Spark
driver acting for its executors).

The machines decide; this class only turns ZooKeeper into events and carries out actions. One
thread does all the work: kazoo's watch callbacks and connection listener only put events on a
queue, so they never block kazoo. The group keeps one version watch and one barrier watch per
version for all its members, and reads each manifest once per version.

Usage::

    group = MemberGroup(client, store, on_start=start, on_stop=stop, job="clicks-1")
    group.add("p-1", "zone-a/host-1", host="host-1")
    group.run(stop_event)      # until stop_event is set: follows job models behind barriers

``on_start(processor_id, version, tasks)`` and ``on_stop(processor_id, version, tasks)`` run on
the group's thread, as do ``on_start_standby`` and ``on_stop_standby`` (same signature) for the
standby replicas; :meth:`MemberGroup.report_standby_lag` (any thread) reports a standby's lag
(:mod:`coordinator.member.standby_lag`).

With ``duplicate_wait_s`` set, a member whose id an older live registration holds waits that
long for it to go, then gives up (``on_refused(processor_id, node, older)``); without it (a Spark
driver: its executors' ids are its own) registrations are not compared.
While the connection is down, each member stops its tasks before the server could expire the
session (the member machine's rule 7b); ``fence_after_s`` defaults to a quarter of the client's
session timeout.
``register(processor_id, location_id, host, extra) -> node`` and ``unregister(node)`` default to
the store's processor registry; a Spark driver passes its executor registrar's.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException

from coordinator.member.registration import RegistrationActions
from coordinator.member.standby_lag import StandbyActions, StandbyLagReports
from coordinator.protocol.member import (
    FENCED,
    RECHECK_DELAY_S,
    UNEXPECTED_LOSS,
    MemberMachine,
    fence_delay,
)
from coordinator.protocol.member_events import (
    BarrierDecided,
    CheckRegistration,
    Connected,
    ConnectionSuspended,
    ContainerRead,
    FenceDue,
    FetchLatestVersion,
    JoinBarrier,
    ManifestMissing,
    ManifestRead,
    MemberAction,
    MemberEvent,
    MemberState,
    ReadContainer,
    ReadManifest,
    Register,
    RegistrationRefused,
    ResyncDue,
    ScheduleFence,
    ScheduleResync,
    SessionLost,
    Shutdown,
    StartStandbys,
    StartTasks,
    StopStandbys,
    StopTasks,
    StoreFailed,
    Unregister,
    VersionAnnounced,
    WatchBarrier,
    WatchVersions,
    WriteLocality,
)
from metadata.errors import MetadataError
from metadata.model import BarrierState, TaskModel
from metadata.zk import Manifest, NotFound, Watch, ZkMetadataStore

__all__ = ["MemberGroup", "OnTasks"]

#: ``(processor_id, version, tasks)``: tasks to start (version: the DONE one) or to stop
#: (version: the one they ran under).
OnTasks = Callable[[str, int | None, Mapping[str, TaskModel]], None]
RegisterFn = Callable[[str, str, str, Mapping[str, Any]], str]
#: ``(processor_id, its node, the older registration's node)``: the member gave up.
OnRefused = Callable[[str, str, str], None]


@dataclass
class _Member:
    machine: MemberMachine
    location_id: str
    host: str
    extra: Mapping[str, Any]
    node: str | None = None
    log: Any = None


@dataclass
class _Watches:
    version: Watch | None = None
    barriers: dict[int, Watch] = field(default_factory=dict)
    barrier_states: dict[int, BarrierState | None] = field(default_factory=dict)  # last seen
    manifests: dict[int, Manifest] = field(default_factory=dict)


# (member or None: every member, event); None: stop; FLUSH: write the standby lag reports
_Item = tuple[str | None, MemberEvent] | str | None


class MemberGroup(RegistrationActions, StandbyActions):
    """Processors of one job following its job models (see the module docstring)."""

    def __init__(
        self,
        client: KazooClient,
        store: ZkMetadataStore,
        *,
        on_start: OnTasks,
        on_stop: OnTasks,
        job: str = "",
        register: RegisterFn | None = None,
        unregister: Callable[[str], None] | None = None,
        duplicate_wait_s: float | None = None,
        on_refused: OnRefused | None = None,
        on_start_standby: OnTasks | None = None,
        on_stop_standby: OnTasks | None = None,
        fence_after_s: float | None = None,
    ) -> None:
        self.client = client
        self.store = store
        self.on_start = on_start
        self.on_stop = on_stop
        self.on_start_standby = on_start_standby
        self.on_stop_standby = on_stop_standby
        self.log = structlog.get_logger("affinity.member").bind(job=job)
        self.standby_lag = StandbyLagReports(store, self.log)
        self._register = register or self._register_in_store
        self._unregister = unregister or store.processors.unregister
        self._members: dict[str, _Member] = {}
        self._lock = threading.Lock()
        self._events: queue.Queue[_Item] = queue.Queue()
        self._watches = _Watches()
        self._duplicate_wait_s = duplicate_wait_s
        self._on_refused = on_refused
        timeout_s = getattr(client, "_session_timeout", 10_000) / 1000  # what kazoo was given
        self._fence_after_s = fence_delay(timeout_s) if fence_after_s is None else fence_after_s

    # -------------------------------------------------------------------- membership

    def add(self, processor_id: str, location_id: str, host: str = "", **extra: Any) -> None:
        """A new member: it registers as soon as the session is up (thread-safe)."""
        wait = self._duplicate_wait_s
        patience = 0 if wait is None else max(0, math.ceil(wait / RECHECK_DELAY_S))
        machine = MemberMachine(processor_id, patience=patience, fence_after_s=self._fence_after_s)
        log = self.log.bind(processor=processor_id, location=location_id)
        with self._lock:
            self._members[processor_id] = _Member(machine, location_id, host, extra, log=log)
        self._events.put((processor_id, Connected()))

    def remove(self, processor_id: str) -> None:
        """Stop the member's tasks and unregister it (thread-safe)."""
        self._events.put((processor_id, Shutdown()))

    def running(self) -> dict[str, tuple[int | None, dict[str, TaskModel]]]:
        """Processor id -> (the DONE version it runs, its tasks)."""
        with self._lock:
            members = list(self._members.items())
        return {pid: (m.machine.running_version, dict(m.machine.running)) for pid, m in members}

    def standbys(self) -> dict[str, tuple[int | None, frozenset[str]]]:
        """Processor id -> (the DONE version its standby copies follow, their task names)."""
        with self._lock:
            members = list(self._members.items())
        return {
            pid: (m.machine.standby_version, frozenset(m.machine.standbys)) for pid, m in members
        }

    def member(self, processor_id: str) -> MemberMachine | None:
        with self._lock:
            found = self._members.get(processor_id)
        return None if found is None else found.machine

    # -------------------------------------------------------------------- lifecycle

    def stop(self) -> None:
        self._events.put(None)

    def run(self, stop: threading.Event | None = None) -> None:
        """Follow the job models until :meth:`stop` (or ``stop`` is set)."""
        if stop is not None:
            threading.Thread(target=self._stop_when, args=(stop,), daemon=True).start()
        self.client.add_listener(self._on_state)
        self.store.ensure_layout()
        try:
            while (item := self._events.get()) is not None:
                if isinstance(item, str):
                    self.standby_lag.flush()
                else:
                    self._deliver(*item)
        finally:
            self.client.remove_listener(self._on_state)
            for pid in list(self._members):
                self._deliver(pid, Shutdown())
            self._unwatch()

    def _stop_when(self, stop: threading.Event) -> None:
        stop.wait()
        self.stop()

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._events.put((None, SessionLost()))
        elif state == KazooState.SUSPENDED:
            self._events.put((None, ConnectionSuspended()))
        elif state == KazooState.CONNECTED:
            self._events.put((None, Connected()))

    # -------------------------------------------------------------------- events

    def _deliver(self, target: str | None, event: MemberEvent) -> None:
        with self._lock:
            members = (
                list(self._members.values())
                if target is None
                else [m for pid, m in self._members.items() if pid == target]
            )
        if isinstance(event, SessionLost):
            self._unwatch()
        for member in members:
            self._note(member, event)
            self._feed(member, event)
            if isinstance(event, Shutdown):
                with self._lock:
                    self._members.pop(member.machine.processor_id, None)

    def _note(self, member: _Member, event: MemberEvent) -> None:
        """Log what the machine is about to hear that an operator wants to see."""
        machine = member.machine
        if isinstance(event, SessionLost) and machine.state != MemberState.UNREGISTERED:
            member.log.warning("processor.session_lost", tasks=len(machine.running))
        elif (
            isinstance(event, BarrierDecided)
            and event.state == BarrierState.TIMED_OUT
            and event.version == machine.target_version
        ):
            member.log.warning("processor.barrier_timed_out", version=event.version)

    def _feed(self, member: _Member, event: MemberEvent) -> None:
        pending = [event]
        while pending:
            actions = member.machine.handle(pending.pop(0))
            for action in actions:
                try:
                    pending += self._carry_out(member, action)
                except (MetadataError, KazooException) as exc:
                    member.log.warning(
                        "member.store_error", action=type(action).__name__, error=repr(exc)
                    )
                    pending.append(StoreFailed(repr(exc)))
                    break

    # -------------------------------------------------------------------- actions

    def _carry_out(self, member: _Member, action: MemberAction) -> list[MemberEvent]:
        handler = getattr(self, _ACTION_HANDLERS[type(action)])
        result: list[MemberEvent] = handler(member, action)
        return result

    def _watch_versions(self, member: _Member, _action: WatchVersions) -> list[MemberEvent]:
        if self._watches.version is None:
            self.store.sync()  # the watch's first read must not come from a lagging server
            self._watches.version = self.store.job_models.watch_version(
                lambda v: self._events.put((None, VersionAnnounced(v)))
            )
            return []  # the watch fires at once with the latest version, for every member
        return self._fetch_latest_version(member, FetchLatestVersion())

    def _fetch_latest_version(self, _m: _Member, _a: FetchLatestVersion) -> list[MemberEvent]:
        self.store.sync()  # not an old version from a lagging follower (SAMZA-2301)
        return [VersionAnnounced(self.store.job_models.latest_version())]

    def _read_manifest(self, _member: _Member, action: ReadManifest) -> list[MemberEvent]:
        version = action.version
        manifest = self._watches.manifests.get(version)
        if manifest is None:
            try:
                manifest = self.store.job_models.read_manifest(version)
            except NotFound:
                return [ManifestMissing(version)]
            self._watches.manifests = {version: manifest}  # only the newest is worth keeping
        gaining = None if manifest.gaining is None else frozenset(manifest.gaining)
        return [ManifestRead(version, manifest.base, frozenset(manifest.losing), gaining)]

    def _read_container(self, member: _Member, action: ReadContainer) -> list[MemberEvent]:
        version = action.version
        manifest = self._watches.manifests.get(version)
        container = self.store.job_models.read_container(
            version, member.machine.processor_id, manifest=manifest
        )
        if container is None:
            member.log.info("processor.not_in_model", version=version)
        if container is None:
            return [ContainerRead(version, None)]
        return [ContainerRead(version, container.tasks, container.standby_tasks)]

    def _join_barrier(self, member: _Member, action: JoinBarrier) -> list[MemberEvent]:
        self.store.barriers.join(action.version, member.machine.processor_id)
        member.log.info("processor.joined_barrier", version=action.version, early=action.early)
        return []

    def _watch_barrier(self, _member: _Member, action: WatchBarrier) -> list[MemberEvent]:
        """Watch barrier ``v`` (one watch for the group). A member that asks again for a watch
        the group holds (it resynced in the same session) hears the state last seen at once:
        the watch fires only on changes, and a decision it already delivered would never come
        again."""
        version, watches = action.version, self._watches
        if version in watches.barriers:
            seen = watches.barrier_states.get(version)
            return [] if seen is None else [BarrierDecided(version, seen)]

        def on_state(state: str | None) -> None:
            decided = BarrierState(state) if state in set(BarrierState) else None
            watches.barrier_states[version] = decided
            self._events.put((None, BarrierDecided(version, decided)))

        watches.barriers[version] = self.store.barriers.watch_state(version, on_state)
        for old in [v for v in watches.barriers if v < version]:
            watches.barriers.pop(old).stop()
            watches.barrier_states.pop(old, None)
        return []

    def _stop_tasks(self, member: _Member, action: StopTasks) -> list[MemberEvent]:
        if action.reason == UNEXPECTED_LOSS:
            member.log.error("processor.manifest_disagrees", leaving=sorted(action.tasks)[:10])
        elif action.reason == FENCED:
            member.log.warning("processor.fenced", tasks=len(action.tasks))
        self.on_stop(member.machine.processor_id, action.version, action.tasks)
        member.log.info("processor.stopped", tasks=len(action.tasks), reason=action.reason)
        return []

    def _start_tasks(self, member: _Member, action: StartTasks) -> list[MemberEvent]:
        if action.tasks:
            self.on_start(member.machine.processor_id, action.version, action.tasks)
        member.log.info(
            "processor.running",
            version=action.version,
            tasks=len(action.running),
            started=len(action.tasks),
        )
        return []

    def _write_locality(self, member: _Member, action: WriteLocality) -> list[MemberEvent]:
        written = self.store.locality.write(dict.fromkeys(action.tasks, member.location_id))
        member.log.debug("processor.locality_written", version=action.version, writes=written)
        return []

    def _schedule_fence(self, member: _Member, action: ScheduleFence) -> list[MemberEvent]:
        self._later(action.after_s, member, FenceDue(action.suspension))
        return []

    def _schedule_resync(self, member: _Member, action: ScheduleResync) -> list[MemberEvent]:
        self._later(action.after_s, member, ResyncDue())
        return []

    def _later(self, after_s: float, member: _Member, event: MemberEvent) -> None:
        """Put ``event`` for ``member`` on the queue after ``after_s`` seconds."""
        item = (member.machine.processor_id, event)
        timer = threading.Timer(after_s, self._events.put, args=(item,))
        timer.daemon = True
        timer.start()

    # -------------------------------------------------------------------- helpers

    def _unwatch(self) -> None:
        watches, self._watches = self._watches, _Watches()
        for watch in [watches.version, *watches.barriers.values()]:
            if watch is not None:
                watch.stop()


_ACTION_HANDLERS: dict[type[MemberAction], str] = {
    Register: "_register_member",
    Unregister: "_unregister_member",
    CheckRegistration: "_check_registration",
    RegistrationRefused: "_refused",
    WatchVersions: "_watch_versions",
    FetchLatestVersion: "_fetch_latest_version",
    ReadManifest: "_read_manifest",
    ReadContainer: "_read_container",
    JoinBarrier: "_join_barrier",
    WatchBarrier: "_watch_barrier",
    StopTasks: "_stop_tasks",
    StartTasks: "_start_tasks",
    **{StopStandbys: "_stop_standbys", StartStandbys: "_start_standbys"},
    WriteLocality: "_write_locality",
    ScheduleResync: "_schedule_resync",
    ScheduleFence: "_schedule_fence",
}
