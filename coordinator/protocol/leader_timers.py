"""The leader machine's decisions that time makes due (a mixin of
:class:`~coordinator.protocol.leader.LeaderMachine`, pure like it): when a dirty job is
rebalanced (debounce and grace), a barrier's timeout and who it benches, a benched processor's
return, and probing rebalances with the rechecks that start them
(:mod:`coordinator.protocol.leader_probing`)."""

from __future__ import annotations

from coordinator.protocol.leader_events import (
    Action,
    CoordinatorSettings,
    MarkBarrier,
    ProcessorBenched,
    ProcessorReadmitted,
    RecheckFinished,
    RemoveOldVersions,
    RunRecheck,
    ScheduleWakeup,
)
from coordinator.protocol.leader_policy import (
    Bench,
    PendingBarrier,
    Vanished,
    debounce_due,
    grace_until,
)
from coordinator.protocol.leader_probing import settled
from coordinator.protocol.leader_trigger import RebalanceCause, Trigger
from groupers import GrouperMetadata
from metadata.model import BarrierState, JobModel, TaskModel

__all__ = ["LeaderTimers"]


class LeaderTimers:
    """Clock-driven rules of the leader machine (its fields are the machine's)."""

    settings: CoordinatorSettings
    processors: dict[str, str]
    in_force: JobModel | None
    pending: PendingBarrier | None
    dirty_since: float | None
    last_change: float | None
    vanished: dict[str, Vanished]
    bench: Bench
    retry: bool
    probing: bool
    probe_at: float | None
    tasks: tuple[TaskModel, ...]
    rechecking: tuple[int, GrouperMetadata] | None

    def _retention(self) -> RemoveOldVersions:
        raise NotImplementedError

    def _dirty(self, now: float) -> None:
        raise NotImplementedError

    def _run(self, cause: RebalanceCause) -> list[Action]:
        raise NotImplementedError

    def _due(self, now: float) -> float | None:
        """When the dirty job should be rebalanced (None: it is not dirty), grace included."""
        s = self.settings
        due = debounce_due(self.dirty_since, self.last_change, s.debounce_s, s.debounce_max_s)
        if due is None:
            return None
        known = self.in_force.containers if self.in_force else {}
        wait = grace_until(self.vanished, self.processors, known, s.processor_grace_s, now)
        return due if wait is None else max(due, wait)

    def _time_out(self, pending: PendingBarrier, now: float) -> list[Action]:
        """Mark the pending barrier TIMED_OUT, bench who let its deadline pass (when others
        joined), and make the job due at once."""
        self.pending = None
        actions: list[Action] = [
            MarkBarrier(pending.model.version, BarrierState.TIMED_OUT, now - pending.published_at),
            self._retention(),
        ]
        if now >= pending.deadline and pending.joined:
            missing = pending.expected - pending.joined
            benched = self.bench.missed(missing, self.processors, now)
            actions += [
                ProcessorBenched(pid, pending.model.version, misses, until)
                for pid, (misses, until) in benched.items()
            ]
        settle = max(self.settings.debounce_s, self.settings.debounce_max_s)
        self.dirty_since = self.last_change = now - settle
        self.retry = True
        return actions

    def _readmit(self, now: float) -> list[Action]:
        released = self.bench.release(self.processors, now)
        if any(pid in self.processors for pid in released):
            self._dirty(now)
        return [ProcessorReadmitted(pid, why) for pid, why in released.items()]

    def _probe(self, now: float) -> list[Action]:
        """An IDLE leader whose model in force is not settled rebalances every interval."""
        interval = self.settings.probing_interval_s
        if not self.probing or interval <= 0 or self.in_force is None:
            return []
        if self.probe_at is None:
            self.probe_at = now + interval
        if now < self.probe_at:
            return [ScheduleWakeup(self.probe_at)]
        return self._run(RebalanceCause(Trigger.PROBING, now, 0.0))

    def _recheck(self, model: JobModel, metadata: GrouperMetadata | None) -> list[Action]:
        """Ask whether ``model`` (in force, answered to ``metadata``) is the grouper's fixed
        point; until the answer, it is taken as settled. Unknown ``metadata``: probe once."""
        self.probing = metadata is None
        self.rechecking = None
        if metadata is None or self.settings.probing_interval_s <= 0:
            return []
        self.rechecking = (model.version, metadata)
        return [RunRecheck(self.tasks, model, metadata)]

    def _recheck_finished(self, event: RecheckFinished) -> None:
        in_force, asked = self.in_force, self.rechecking
        if in_force is None or asked is None or not asked[0] == event.version == in_force.version:
            return  # superseded meanwhile: another model in force, or another recheck asked
        self.rechecking = None
        final = settled(
            self.tasks, asked[1], in_force.containers, event.answer, question=event.question
        )
        self.probing, self.probe_at = not final, None
