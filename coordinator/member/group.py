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
from dataclasses import dataclass
from typing import Any

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException

from coordinator.member.following import FollowActions, JoinAndWatch, Watches
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
    FenceDue,
    FetchLatestVersion,
    JoinBarrier,
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
    WatchBarrier,
    WatchVersions,
    WriteLocality,
)
from metadata.errors import MetadataError
from metadata.model import BarrierState, TaskModel
from metadata.zk import ZkMetadataStore

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


# (member or None: every member, event); None: stop; FLUSH: write the standby lag reports;
# a function: a watch's follow-up read, to run on the group's thread
_Item = tuple[str | None, MemberEvent] | str | Callable[[], None] | None


class MemberGroup(FollowActions, RegistrationActions, StandbyActions):
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
        log: Any = None,  # a structlog logger (default: affinity.member)
    ) -> None:
        self.client = client
        self.store = store
        self.on_start = on_start
        self.on_stop = on_stop
        self.on_start_standby = on_start_standby
        self.on_stop_standby = on_stop_standby
        self.log = (log if log is not None else structlog.get_logger("affinity.member")).bind(
            job=job
        )
        self.standby_lag = StandbyLagReports(store, self.log)
        self._register = register or self._register_in_store
        self._unregister = unregister or store.processors.unregister
        self._members: dict[str, _Member] = {}
        self._lock = threading.Lock()
        self._events: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._watches = Watches()
        self._parked: list[Callable[[], None]] = []  # follow-up reads waiting for a connection
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
                elif callable(item):
                    self._follow_up(item)
                else:
                    self._deliver(*item)
        finally:
            self.client.remove_listener(self._on_state)
            for pid in list(self._members):
                self._deliver(pid, Shutdown())
            self._unwatch()

    def _follow_up(self, read: Callable[[], None]) -> None:
        """Run a watch's follow-up read (:mod:`coordinator.member.following`) now, or, while the
        connection is down (kazoo fires every watch when it drops), once it is back: not
        blocking this thread in retries, so the members' fences stay on time (rule 7b)."""
        if self.client.connected:
            read()
        else:
            self._parked.append(read)

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
        if target is None and isinstance(event, (Connected, SessionLost)):
            parked, self._parked = self._parked, []
            for read in parked:
                read()  # (each one does nothing if its watch was dropped with the session)
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
            actions = _paired(member.machine.handle(pending.pop(0)))
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

    def _carry_out(self, member: _Member, action: MemberAction | JoinAndWatch) -> list[MemberEvent]:
        handler = getattr(self, _ACTION_HANDLERS[type(action)])
        result: list[MemberEvent] = handler(member, action)
        return result

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
        watches, self._watches = self._watches, Watches()
        for watch in [watches.version, *watches.barriers.values()]:
            if watch is not None:
                watch.stop()


def _paired(actions: list[MemberAction]) -> list[MemberAction | JoinAndWatch]:
    """``actions``, with a JoinBarrier followed by the WatchBarrier of its version as one
    :class:`JoinAndWatch` (carried out in one round trip)."""
    paired: list[MemberAction | JoinAndWatch] = []
    for action in actions:
        last = paired[-1] if paired else None
        if (
            isinstance(action, WatchBarrier)
            and isinstance(last, JoinBarrier)
            and last.version == action.version
        ):
            paired[-1] = JoinAndWatch(last, action)
        else:
            paired.append(action)
    return paired


_ACTION_HANDLERS: dict[type[MemberAction | JoinAndWatch], str] = {
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
    JoinAndWatch: "_join_and_watch",
    StopTasks: "_stop_tasks",
    StartTasks: "_start_tasks",
    **{StopStandbys: "_stop_standbys", StartStandbys: "_start_standbys"},
    WriteLocality: "_write_locality",
    ScheduleResync: "_schedule_resync",
    ScheduleFence: "_schedule_fence",
}
