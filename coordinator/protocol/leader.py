"""The coordinator's decisions, as a state machine with no I/O.

Theory of operation
===================

Like h11, this module never touches the network, a clock or a thread: the caller (the kazoo
adapter in :mod:`coordinator.leader.service`, or a test) feeds it **events** and carries out the
**actions** it returns. Every rule below is therefore testable without ZooKeeper, and a
hypothesis state-machine test drives it with random event sequences.

Roles. A replica is a *follower* until :class:`LeadershipGained`, and goes back to being one on
:class:`LeadershipLost`. A follower returns no action for any event (so events delivered late
from a lost session, SAMZA-1695, do nothing), and every write the adapter makes for a leader is
fenced by the leader epoch in ZooKeeper, so a deposed leader's write fails there too.

The job model in force is the last one whose barrier reached DONE. At most one newer version is
*pending* (published, barrier NEW) at a time.

Rebalance, step by step (the policies are in :mod:`coordinator.protocol.leader_policy`):

1. :class:`MembershipChanged` records the live processors and marks the job *dirty*; it is
   rebalanced after ``debounce_ms`` of quiet, never later than ``debounce_max_ms`` after the
   first change (SAMZA-2633), at a :class:`ScheduleWakeup`.
2. A vanished processor of the model in force is *given grace* (``processor_grace_ms``, Helix's
   delayed rebalance) unless a new processor appeared at its location.
3. When due (no barrier pending, no grouper running): :class:`RunGrouper`; the adapter answers
   :class:`GrouperFinished` with containers, or with an error (a timeout included).
4. An error, or an answer that fails :func:`groupers.validate` or makes checking it raise
   (``check_answer``), publishes nothing: :class:`GrouperFailed` (I5). A valid answer that would
   take away every task of the model in force is refused (:class:`ModelRefused`) unless
   ``allow_dropping_all_tasks``. An answer equal to the model in force is a no-op
   (:class:`RebalanceSkipped`, SAMZA-2638) unless a newer version timed out since (processors
   may have stopped tasks for it). Otherwise :class:`PublishJobModel`: version ``latest + 1``,
   its barrier expecting every processor it names (I1, I2), its deadline counted from
   :class:`Published` (when the adapter finished publishing), planned against the version in force
   (``base``), naming who loses a task (:func:`~coordinator.protocol.rules.losing_processors`)
   and who gains one (:func:`~coordinator.protocol.rules.gaining_processors`).
5. :class:`BarrierUpdated`: when every expected processor joined, :class:`MarkBarrier` DONE and
   the model is in force. At the deadline (or at once when an expected processor vanished),
   TIMED_OUT, and it generates again at once from the living (SAMZA-2663). A live processor that
   let the deadline pass while others joined is *benched* (``Bench``, :class:`ProcessorBenched`):
   left out of the next models until its cool-down ends or it registers again
   (:class:`ProcessorReadmitted`), so one silent processor cannot stall every rebalance.
6. Once a barrier is decided, :class:`RemoveOldVersions` applies retention, never below the
   model in force (:func:`~coordinator.protocol.rules.retention_floor`).
7. Recovery (:mod:`coordinator.protocol.leader_recovery`): a new leader that could not read the
   model in force or the version pointer falls back to the newest model that reads clean (or
   none) and owes a new version (trigger ``model in force unreadable``, :class:`InForceUnreadable`).
8. Probing (:mod:`coordinator.protocol.leader_probing`): with ``probing_interval_s`` set, a
   model that comes into force (DONE), or an answer found equal to the model in force, is
   rechecked (:class:`RunRecheck`, answered by :class:`RecheckFinished`): after the barrier,
   so the second grouper run never delays a publish or a DONE. A model that is not the
   grouper's fixed point (warm-ups pending, moves held back) leaves the job *probing*: while
   IDLE it rebalances again every ``probing_interval_s`` (trigger ``probing``), until an answer
   is settled. An answer equal to the model in force publishes nothing.

States. The machine's fields (leader, dirty, running, pending) give one :class:`LeaderState` at a
time; ``TRANSITIONS`` (beside the vocabulary, in ``leader_events``) lists, for each state and
event, the states it may move to, and every ``handle`` checks its own move against it (so does
the stateful test).

Times are seconds (floats) from any monotonic clock; the caller passes ``now`` with each event.
The machine's time never goes backward: an adapter stamps events in more than one thread (a
barrier's watch fires while the publish call is still returning), so an event stamped before one
already handled counts as handled at that later time (a barrier may be DONE 0 s after its
publish completed, never less).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from coordinator.protocol.leader_events import (
    TRANSITIONS,
    Action,
    BarrierUpdated,
    CoordinatorSettings,
    Event,
    GrouperFailed,
    GrouperFinished,
    InForceUnreadable,
    LeadershipGained,
    LeadershipLost,
    LeaderState,
    LocalityChanged,
    MarkBarrier,
    MembershipChanged,
    ModelInForce,
    ModelRefused,
    Published,
    RebalanceSkipped,
    RecheckFinished,
    RemoveOldVersions,
    RunGrouper,
    ScheduleWakeup,
)
from coordinator.protocol.leader_policy import (
    BadAnswer,
    Bench,
    PendingBarrier,
    Vanished,
    check_answer,
    drop_all_reason,
    drops_every_task,
    grouper_metadata,
    note_vanished,
    publish_action,
    task_locations,
)
from coordinator.protocol.leader_recovery import Repair, repair_for
from coordinator.protocol.leader_timers import LeaderTimers
from coordinator.protocol.leader_trigger import RebalanceCause, rebalance_cause
from coordinator.protocol.rules import retention_floor, tasks_match
from groupers import GrouperMetadata
from metadata.model import BarrierState, FrozenMap, JobModel, TaskModel

__all__ = ["TRANSITIONS", "LeaderMachine", "LeaderState"]  # (both from leader_events)


L = LeaderState


@dataclass
class LeaderMachine(LeaderTimers):
    """The leader's state machine: ``handle(event) -> list[Action]`` (see the module docstring)."""

    tasks: tuple[TaskModel, ...]
    settings: CoordinatorSettings = field(default_factory=CoordinatorSettings)
    config: Mapping[str, str] = field(default_factory=dict)

    leader: bool = False
    processors: dict[str, str] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)  # live processor id -> capacity
    task_locality: dict[str, str] = field(default_factory=dict)
    in_force: JobModel | None = None
    latest_version: int = 0
    pending: PendingBarrier | None = None
    running: int | None = None  # request id of the grouper run in flight
    running_metadata: GrouperMetadata | None = None  # what that run was given
    requests: int = 0
    dirty_since: float | None = None
    last_change: float | None = None
    vanished: dict[str, Vanished] = field(default_factory=dict)
    bench: Bench = field(init=False)
    retry: bool = False  # the last barrier timed out: the next grouper run is its retry
    running_cause: RebalanceCause | None = None  # why the grouper in flight runs
    probing: bool = False  # the model in force is not the grouper's fixed point
    probe_at: float | None = None  # when the next probing rebalance is due
    #: the model in force whose recheck is asked (RunRecheck) and what its answer was given
    rechecking: tuple[int, GrouperMetadata] | None = None
    #: the model in force (or the version pointer) could not be read: a new version is owed
    repair: Repair | None = None
    clock: float = -math.inf  # the latest time handled: the machine's time never goes back

    def __post_init__(self) -> None:
        self.bench = Bench(self.settings.exclusion_s)

    # ------------------------------------------------------------------------ entry point

    @property
    def state(self) -> LeaderState:
        if not self.leader:
            return L.FOLLOWER
        if self.pending is not None:
            return L.BARRIER
        if self.running is not None:
            return L.GROUPING
        return L.IDLE if self.dirty_since is None else L.DEBOUNCING

    @property
    def eligible(self) -> dict[str, str]:
        """The live processors a new model may name: every one not benched."""
        return self.bench.eligible(self.processors)

    def handle(self, event: Event) -> list[Action]:
        if event.now < self.clock:
            event = replace(event, now=self.clock)  # stamped in another thread, handled late
        self.clock = event.now
        before = self.state
        actions = self._dispatch(event)
        allowed = TRANSITIONS.get((before, type(event)), frozenset({before}))
        if self.state not in allowed:
            raise AssertionError(f"{before} --{type(event).__name__}--> {self.state}")
        return actions

    def _dispatch(self, event: Event) -> list[Action]:
        if isinstance(event, LeadershipGained):
            return self._gain(event)
        if isinstance(event, LeadershipLost):
            self._reset()
            return []
        if not self.leader:
            return []  # a follower (or a deposed leader's late event) decides nothing
        if isinstance(event, MembershipChanged):
            self._membership(event.processors, event.capacity, event.now)
        elif isinstance(event, LocalityChanged):
            self.task_locality = dict(event.task_locality)
            return []
        elif isinstance(event, BarrierUpdated):
            actions = self._barrier(event)
            return actions + self._tick(event.now)
        elif isinstance(event, GrouperFinished):
            actions = self._grouper_finished(event)
            if self.repair is not None and self.pending is None and self.running is None:
                self._dirty(event.now)  # the repair is still owed: try again after the debounce
            return actions + self._tick(event.now)
        elif isinstance(event, Published):
            return self._published(event)
        elif isinstance(event, RecheckFinished):
            self._recheck_finished(event)
        return self._tick(event.now)

    # ------------------------------------------------------------------------ transitions

    def _reset(self) -> None:
        self.leader = False
        self.pending = None
        self.running = None
        self.running_metadata = None
        self.dirty_since = None
        self.last_change = None
        self.vanished.clear()
        self.bench.clear()
        self.retry, self.running_cause = False, None
        self.probing, self.probe_at, self.rechecking = False, None, None
        self.repair = None

    def _gain(self, event: LeadershipGained) -> list[Action]:
        self._reset()
        self.leader = True
        self.processors = dict(event.processors)
        self.capacity = dict(event.capacity)
        self.task_locality = dict(event.task_locality)
        self.in_force = event.in_force
        self.probing = event.in_force is not None  # unknown: probe once (if probing is on)
        self.latest_version = max(
            event.latest.version if event.latest else 0,
            event.in_force.version if event.in_force else 0,
            event.version_floor,
        )
        # Unreadable models (coordinator.protocol.leader_recovery): a new version is owed.
        self.repair = repair_for(event.unreadable, event.in_force)
        actions: list[Action] = [InForceUnreadable.of(self.repair)] if self.repair else []
        actions += [MarkBarrier(v, BarrierState.TIMED_OUT, 0.0) for v in event.abandoned]
        latest = event.latest
        if (
            latest is not None
            and event.latest_barrier == BarrierState.NEW
            and (self.in_force is None or latest.version > self.in_force.version)
        ):
            # A rebalance was in flight when the previous leader went: see it through.
            expected = frozenset(latest.containers)
            deadline = event.now + self.settings.barrier_timeout_s
            self.pending = PendingBarrier(  # final or not: unknown, so it probes once
                latest, expected, deadline, event.now, event.latest_participants
            )
            actions += self._barrier(
                BarrierUpdated(event.now, latest.version, event.latest_participants)
            )
        in_force, repair = self.in_force, self.repair is not None
        if (
            repair
            or in_force is None
            or set(in_force.containers) != set(self.processors)
            or not tasks_match(in_force, event.tasks)
        ):
            self.dirty_since = self.last_change = event.now
        self._note_vanished(event.now)
        return actions + self._tick(event.now)

    def _membership(
        self, processors: Mapping[str, str], capacity: Mapping[str, int], now: float
    ) -> None:
        if dict(processors) == self.processors and dict(capacity) == self.capacity:
            return
        self.processors, self.capacity = dict(processors), dict(capacity)
        self._dirty(now)
        self._note_vanished(now)

    def _dirty(self, now: float) -> None:
        if self.dirty_since is None:
            self.dirty_since = now
        self.last_change = now

    def _note_vanished(self, now: float) -> None:
        note_vanished(self.vanished, self.in_force, self.processors, now)

    def _barrier(self, event: BarrierUpdated) -> list[Action]:
        pending = self.pending
        if pending is None or event.version != pending.model.version:
            return []
        pending.joined = frozenset(event.participants)
        self.bench.joined(pending.joined)
        if pending.expected <= pending.joined:
            self.pending = None
            self.in_force = pending.model
            if self.repair is not None and pending.model.version > self.repair.above:
                self.repair = None  # a version above everything unreadable is in force
            self.probe_at = None
            recheck = self._recheck(pending.model, pending.metadata)
            # The processors now write their tasks' locations (I4): the same as the model's.
            self.task_locality.update(task_locations(pending.model))
            self._note_vanished(event.now)
            return [
                MarkBarrier(
                    pending.model.version, BarrierState.DONE, event.now - pending.published_at
                ),
                self._retention(),
                ModelInForce(pending.model),
                *recheck,
            ]
        return []

    def _grouper_finished(self, event: GrouperFinished) -> list[Action]:
        if event.request != self.running or self.running_metadata is None:
            return []  # an answer to a request this leadership did not make
        metadata, cause = self.running_metadata, self.running_cause
        self.running = self.running_metadata = self.running_cause = None
        if dict(metadata.processor_locality) != self.eligible:
            # Membership changed while the grouper ran: its answer is stale, not wrong. The job
            # is dirty again, so the next tick generates from the current membership.
            return [RebalanceSkipped("membership changed while the grouper ran")]
        if event.error is not None:
            return [GrouperFailed(event.request, event.error)]
        try:
            containers = check_answer(self.tasks, metadata, event.containers)
        except BadAnswer as exc:
            return [GrouperFailed(event.request, str(exc))]
        candidate = JobModel(self.latest_version + 1, FrozenMap(containers), FrozenMap(self.config))
        in_force = self.in_force
        unchanged = in_force is not None and candidate.same_assignment(in_force)
        if unchanged and in_force is not None and not self._owed(in_force):
            # Still as the grouper wants it? Recheck the model in force against this question.
            recheck = self._recheck(in_force, metadata)
            return [RebalanceSkipped("the new assignment equals the model in force"), *recheck]
        if drops_every_task(in_force, candidate) and not self.settings.allow_dropping_all_tasks:
            assert in_force is not None
            return [ModelRefused(event.request, drop_all_reason(in_force, candidate))]
        return [self._publish(candidate, metadata, event.now, cause)]

    def _owed(self, in_force: JobModel) -> bool:
        """A new version is owed even if it equals ``in_force``: a newer version timed out since
        (processors may have stopped tasks for it), or a repair is (leader_recovery)."""
        return self.latest_version != in_force.version or self.repair is not None

    def _publish(
        self,
        candidate: JobModel,
        metadata: GrouperMetadata,
        now: float,
        cause: RebalanceCause | None,
    ) -> Action:
        self.latest_version = candidate.version
        # No deadline until the adapter reports the publish done (``Published``).
        expected = frozenset(candidate.containers)
        self.pending = PendingBarrier(candidate, expected, math.inf, now, metadata=metadata)
        repair, self.repair = self.repair is not None, None
        # A repair is planned against nothing: processors may run the version that is unreadable.
        base = None if repair else self.in_force
        action = publish_action(candidate, base, metadata, self.processors, self.task_locality)
        return replace(action, cause=cause.answered(now) if cause else None, repair=repair)

    def _published(self, event: Published) -> list[Action]:
        pending = self.pending
        if pending is None or event.version != pending.model.version:
            return []  # decided (or superseded) meanwhile
        pending.deadline = event.now + self.settings.barrier_timeout_s
        pending.published_at = event.now
        return self._tick(event.now)

    def _retention(self) -> RemoveOldVersions:
        in_force = self.in_force.version if self.in_force else None
        return RemoveOldVersions(
            retention_floor(self.latest_version, self.settings.retention, in_force)
        )

    def _metadata(self) -> GrouperMetadata:
        return grouper_metadata(self.in_force, self.eligible, self.task_locality, self.capacity)

    def _tick(self, now: float) -> list[Action]:
        actions: list[Action] = []
        pending = self.pending
        if pending is not None and (
            now >= pending.deadline or not pending.expected <= set(self.processors) | pending.joined
        ):
            # The deadline passed, or a processor the barrier waits for is gone (it cannot join):
            # time out now and generate again at once from the processors still alive.
            actions += self._time_out(pending, now)
        actions += self._readmit(now)
        release = self.bench.next_release()
        if release is not None:
            actions.append(ScheduleWakeup(release))
        if self.pending is not None:
            deadline = self.pending.deadline  # infinite until Published
            return [*actions, ScheduleWakeup(deadline)] if deadline < math.inf else actions
        if self.running is not None:
            return actions
        due = self._due(now)
        if due is None:
            return actions + self._probe(now)
        if now < due:
            return [*actions, ScheduleWakeup(due)]
        cause = rebalance_cause(now, self, [v.since for v in self.vanished.values()])
        self.dirty_since = self.last_change = None
        return actions + self._run(cause)

    def _run(self, cause: RebalanceCause) -> list[Action]:
        self.probe_at = None  # a probe is due again an interval after this run, if need be
        if not self.eligible:
            return [RebalanceSkipped("no live processor")]
        self.retry, self.running_cause = False, cause
        self.requests += 1
        self.running = self.requests
        self.running_metadata = self._metadata()
        return [RunGrouper(self.running, self.tasks, self.running_metadata, cause.trigger)]
