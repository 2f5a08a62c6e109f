"""The lag reports of a member group's standby replicas (``store.standby_lag``).

The runtime says how far behind each standby copy is (:meth:`StandbyLagReports.report`, any
thread); the group's thread writes the reports (:meth:`StandbyLagReports.flush`) through the
store's differential write, so a report that changes nothing writes nothing, and many reports
made between two flushes go in one batch (the last one per task wins). Only copies the member
holds are written: a report for a standby stopped meanwhile is dropped, and a stopped standby's
entry is removed. A member registering clears what an earlier life of its processor left (an
earlier session not expired yet).

A write that fails (ZooKeeper unreachable for longer than the store retries) is logged and its
reports kept for the next flush (the next report asks for one); it never stops the member. A
removal that fails is logged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

from kazoo.exceptions import KazooException

from coordinator.protocol.member_events import MemberEvent, StartStandbys, StopStandbys
from metadata.errors import MetadataError
from metadata.model import TaskModel
from metadata.zk import ZkMetadataStore

__all__ = ["FLUSH", "StandbyActions", "StandbyLagReports"]

#: The item a member group's queue gets when lag reports wait to be written.
FLUSH = "flush standby lag"

OnTasks = Callable[[str, int | None, Mapping[str, TaskModel]], None]


class StandbyLagReports:
    """Pending lag reports of the standbys each processor of a group holds."""

    def __init__(self, store: ZkMetadataStore, log: Any) -> None:
        self._store = store
        self._log = log
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, int]] = {}
        self._held: dict[str, set[str]] = {}
        self._flush_asked = False
        #: Write operations the flushes applied (0 for reports that changed nothing).
        self.writes = 0

    def report(self, processor_id: str, task: str, lag: int) -> bool:
        """Note the lag of ``processor_id``'s copy of ``task`` (any thread); True when no flush
        is asked for yet (the caller then asks the group's thread for one)."""
        if isinstance(lag, bool) or not isinstance(lag, int) or lag < 0:
            raise ValueError(f"lag of {task!r} must be an integer >= 0, got {lag!r}")
        with self._lock:
            self._pending.setdefault(processor_id, {})[task] = lag
            ask, self._flush_asked = not self._flush_asked, True
        return ask

    def registered(self, processor_id: str) -> None:
        """A member (re)registered: its processor holds no copy yet; clear older reports."""
        with self._lock:
            self._held[processor_id] = set()
            self._pending.pop(processor_id, None)
        try:  # (best effort: the entries are ephemeral, an earlier session's go with it)
            self.writes += self._store.standby_lag.clear(processor_id)
        except (MetadataError, KazooException) as exc:
            self._log.warning(
                "processor.standby_lag_clear_failed", processor=processor_id, error=repr(exc)
            )

    def started(self, processor_id: str, tasks: Collection[str]) -> None:
        with self._lock:
            self._held.setdefault(processor_id, set()).update(tasks)

    def stopped(self, processor_id: str, tasks: Collection[str]) -> None:
        """The member stopped these standbys: forget their reports, remove their entries."""
        with self._lock:
            self._held.setdefault(processor_id, set()).difference_update(tasks)
            pending = self._pending.get(processor_id, {})
            for task in tasks:
                pending.pop(task, None)
        try:
            self.writes += self._store.standby_lag.remove(processor_id, tasks)
        except (MetadataError, KazooException) as exc:
            self._log.warning(
                "processor.standby_lag_remove_failed", processor=processor_id, error=repr(exc)
            )

    def flush(self) -> None:
        """Write the pending reports of held copies (on the group's thread)."""
        with self._lock:
            pending, self._pending, self._flush_asked = self._pending, {}, False
            held = {pid: set(tasks) for pid, tasks in self._held.items()}
        for processor_id, lags in pending.items():
            mine = {t: lag for t, lag in lags.items() if t in held.get(processor_id, ())}
            try:
                written = self._store.standby_lag.write(processor_id, mine)
            except (MetadataError, KazooException) as exc:
                self._log.warning(
                    "processor.standby_lag_write_failed", processor=processor_id, error=repr(exc)
                )
                with self._lock:
                    newer = self._pending.setdefault(processor_id, {})
                    self._pending[processor_id] = {**mine, **newer}
                continue
            self.writes += written
            self._log.debug(
                "processor.standby_lag_written",
                processor=processor_id,
                reports=len(mine),
                writes=written,
            )


class StandbyActions:
    """The member group's part for standby replicas (a mixin of
    :class:`~coordinator.member.group.MemberGroup`): carrying out :class:`StartStandbys` and
    :class:`StopStandbys`, and taking the runtime's lag reports."""

    standby_lag: StandbyLagReports
    on_start_standby: OnTasks | None
    on_stop_standby: OnTasks | None
    _events: Any  # the group's queue

    def report_standby_lag(self, processor_id: str, task: str, lag: int) -> None:
        """The lag of ``processor_id``'s standby copy of ``task`` (0: caught up; any thread)."""
        if self.standby_lag.report(processor_id, task, lag):
            self._events.put(FLUSH)

    def _stop_standbys(self, member: Any, action: StopStandbys) -> list[MemberEvent]:
        pid = member.machine.processor_id
        if self.on_stop_standby is not None:
            self.on_stop_standby(pid, action.version, action.tasks)
        self.standby_lag.stopped(pid, list(action.tasks))
        member.log.info("processor.standbys_stopped", tasks=len(action.tasks), reason=action.reason)
        return []

    def _start_standbys(self, member: Any, action: StartStandbys) -> list[MemberEvent]:
        pid = member.machine.processor_id
        self.standby_lag.started(pid, list(action.tasks))
        if self.on_start_standby is not None:
            self.on_start_standby(pid, action.version, action.tasks)
        member.log.info(
            "processor.standbys_started", version=action.version, tasks=len(action.tasks)
        )
        return []
