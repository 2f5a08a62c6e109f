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

Rebalance, step by step:

1. :class:`MembershipChanged` records the live processors and marks the job *dirty*. A dirty job
   is rebalanced once membership has been quiet for ``debounce_ms``, but never later than
   ``debounce_max_ms`` after the first change (so a rolling restart cannot postpone it forever,
   SAMZA-2633). The coordinator asks to be woken (:class:`ScheduleWakeup`) at that time.
2. A processor of the model in force that vanished is *given grace* for
   ``processor_grace_ms``: while it is within grace and no new processor has appeared at its
   location, the rebalance waits (Helix's delayed rebalance), so a quick restart under the same
   id changes nothing and a restart under a new id at the same host moves its tasks there.
3. When due (and no barrier is pending, no grouper running), the coordinator emits
   :class:`RunGrouper` with the tasks and the grouper metadata. The adapter runs the grouper
   under a time limit and answers :class:`GrouperFinished` with containers, or with an error.
4. An error, a timeout or an answer that fails :func:`groupers.validate` publishes nothing: the
   model in force stays, :class:`GrouperFailed` reports it (log and count, invariant I5), and the
   next membership change tries again. An answer equal to the model in force is a no-op: nothing
   is published (:class:`RebalanceSkipped`, SAMZA-2638). Otherwise :class:`PublishJobModel`
   publishes version ``latest + 1`` with barrier ``latest + 1`` expecting every processor it
   names (I1, I2). The barrier deadline starts when the adapter reports :class:`Published`
   (a slow publish of a large model does not eat the barrier timeout). The action names the
   version in force it was planned against (``base``) and the processors that lose a task
   against it (:func:`~coordinator.protocol.rules.losing_processors`): the others join at once.
5. :class:`BarrierUpdated` reports who joined. When every expected processor has joined, the
   coordinator emits :class:`MarkBarrier` DONE and the new model is in force. At the deadline it
   emits :class:`MarkBarrier` TIMED_OUT, and generates again at once from the processors still
   alive (the processors wait for that next version rather than staying stopped, SAMZA-2663).
   It does not wait for the deadline when a processor the barrier expects has vanished before
   joining: that barrier can never complete, so it times out at once.
6. Once a barrier is decided, :class:`RemoveOldVersions` applies retention: the newest
   ``retention`` versions stay, and the model in force always does
   (:func:`~coordinator.protocol.rules.retention_floor`).

States. The machine's fields (leader, dirty, running, pending) give one :class:`LeaderState` at a
time; ``TRANSITIONS`` lists, for each state and event, the states it may move to, and every
``handle`` checks its own move against it (so does the stateful test).

Times are seconds (floats) from any monotonic clock; the caller passes ``now`` with each event.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from coordinator.protocol.leader_events import (
    Action,
    BarrierUpdated,
    CoordinatorSettings,
    Event,
    GrouperFailed,
    GrouperFinished,
    LeadershipGained,
    LeadershipLost,
    LeaderState,
    LocalityChanged,
    MarkBarrier,
    MembershipChanged,
    ModelInForce,
    Published,
    PublishJobModel,
    RebalanceSkipped,
    RemoveOldVersions,
    RunGrouper,
    ScheduleWakeup,
    TimePassed,
)
from coordinator.protocol.leader_trigger import RebalanceCause, rebalance_cause
from coordinator.protocol.rules import losing_processors, retention_floor
from groupers import GrouperMetadata, InvalidAssignment, validate
from groupers.measures import tasks_kept_local, tasks_moved, tasks_with_locality
from metadata.model import BarrierState, ContainerModel, FrozenMap, JobModel, TaskModel

__all__ = ["TRANSITIONS", "LeaderMachine", "LeaderState"]  # (LeaderState: leader_events)


L = LeaderState
_LEADING = (L.IDLE, L.DEBOUNCING, L.GROUPING, L.BARRIER)
_AFTER_TICK = frozenset({L.IDLE, L.DEBOUNCING, L.GROUPING})

#: (state, event type) -> the states the event may lead to. Events a follower gets are ignored.
TRANSITIONS: dict[tuple[LeaderState, type[Event]], frozenset[LeaderState]] = {
    **{(s, LeadershipGained): frozenset(_LEADING) for s in (L.FOLLOWER, *_LEADING)},
    **{(s, LeadershipLost): frozenset({L.FOLLOWER}) for s in (L.FOLLOWER, *_LEADING)},
    **{(s, LocalityChanged): frozenset({s}) for s in _LEADING},
    **{
        (s, e): _AFTER_TICK for s in (L.IDLE, L.DEBOUNCING) for e in (MembershipChanged, TimePassed)
    },
    **{(L.GROUPING, e): frozenset({L.GROUPING}) for e in (MembershipChanged, TimePassed)},
    (L.GROUPING, GrouperFinished): frozenset({*_AFTER_TICK, L.BARRIER}),
    **{(s, BarrierUpdated): frozenset({s}) for s in (L.IDLE, L.DEBOUNCING, L.GROUPING)},
    **{(s, GrouperFinished): frozenset({s}) for s in (L.IDLE, L.DEBOUNCING, L.BARRIER)},
    **{(s, Published): frozenset({s}) for s in (L.IDLE, L.DEBOUNCING, L.GROUPING)},
    (L.BARRIER, Published): frozenset({*_AFTER_TICK, L.BARRIER}),
    **{
        (L.BARRIER, e): frozenset({*_AFTER_TICK, L.BARRIER})
        for e in (MembershipChanged, TimePassed, BarrierUpdated)
    },
}


@dataclass
class _Pending:
    model: JobModel
    expected: frozenset[str]
    deadline: float
    published_at: float
    joined: frozenset[str] = frozenset()


@dataclass
class _Vanished:
    location: str | None
    since: float


@dataclass
class LeaderMachine:
    """The leader's state machine: ``handle(event) -> list[Action]`` (see the module docstring)."""

    tasks: tuple[TaskModel, ...]
    settings: CoordinatorSettings = field(default_factory=CoordinatorSettings)
    config: Mapping[str, str] = field(default_factory=dict)

    leader: bool = False
    processors: dict[str, str] = field(default_factory=dict)
    task_locality: dict[str, str] = field(default_factory=dict)
    in_force: JobModel | None = None
    latest_version: int = 0
    pending: _Pending | None = None
    running: int | None = None  # request id of the grouper run in flight
    running_metadata: GrouperMetadata | None = None  # what that run was given
    requests: int = 0
    dirty_since: float | None = None
    last_change: float | None = None
    vanished: dict[str, _Vanished] = field(default_factory=dict)
    retry: bool = False  # the last barrier timed out: the next grouper run is its retry
    running_cause: RebalanceCause | None = None  # why the grouper in flight runs

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

    def handle(self, event: Event) -> list[Action]:
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
            self._membership(event.processors, event.now)
        elif isinstance(event, LocalityChanged):
            self.task_locality = dict(event.task_locality)
            return []
        elif isinstance(event, BarrierUpdated):
            actions = self._barrier(event)
            return actions + self._tick(event.now)
        elif isinstance(event, GrouperFinished):
            return self._grouper_finished(event) + self._tick(event.now)
        elif isinstance(event, Published):
            return self._published(event)
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
        self.retry, self.running_cause = False, None

    def _gain(self, event: LeadershipGained) -> list[Action]:
        self._reset()
        self.leader = True
        self.processors = dict(event.processors)
        self.task_locality = dict(event.task_locality)
        self.in_force = event.in_force
        self.latest_version = max(
            event.latest.version if event.latest else 0,
            event.in_force.version if event.in_force else 0,
        )
        actions: list[Action] = []
        latest = event.latest
        if (
            latest is not None
            and event.latest_barrier == BarrierState.NEW
            and (self.in_force is None or latest.version > self.in_force.version)
        ):
            # A rebalance was in flight when the previous leader went: see it through.
            expected = frozenset(latest.containers)
            self.pending = _Pending(
                latest,
                expected,
                deadline=event.now + self.settings.barrier_timeout_s,
                published_at=event.now,
                joined=event.latest_participants,
            )
            actions += self._barrier(
                BarrierUpdated(event.now, latest.version, event.latest_participants)
            )
        if self.in_force is None or set(self.in_force.containers) != set(self.processors):
            self.dirty_since = self.last_change = event.now
        self._note_vanished(event.now)
        return actions + self._tick(event.now)

    def _membership(self, processors: Mapping[str, str], now: float) -> None:
        if dict(processors) == self.processors:
            return
        self.processors = dict(processors)
        if self.dirty_since is None:
            self.dirty_since = now
        self.last_change = now
        self._note_vanished(now)

    def _note_vanished(self, now: float) -> None:
        """Track processors of the model in force that are gone (for the grace period)."""
        owners = self.in_force.containers if self.in_force else {}
        for pid, container in owners.items():
            if pid in self.processors:
                self.vanished.pop(pid, None)
            elif pid not in self.vanished and container.tasks:
                self.vanished[pid] = _Vanished(container.location_id, now)
        for pid in list(self.vanished):
            if pid not in owners:
                del self.vanished[pid]

    def _barrier(self, event: BarrierUpdated) -> list[Action]:
        pending = self.pending
        if pending is None or event.version != pending.model.version:
            return []
        pending.joined = frozenset(event.participants)
        if pending.expected <= pending.joined:
            self.pending = None
            self.in_force = pending.model
            # The processors now write their tasks' locations (I4): the same as the model's.
            for container in pending.model.containers.values():
                if container.location_id:
                    for name in container.tasks:
                        self.task_locality[name] = container.location_id
            self._note_vanished(event.now)
            return [
                MarkBarrier(
                    pending.model.version, BarrierState.DONE, event.now - pending.published_at
                ),
                self._retention(),
                ModelInForce(pending.model),
            ]
        return []

    def _grouper_finished(self, event: GrouperFinished) -> list[Action]:
        if event.request != self.running or self.running_metadata is None:
            return []  # an answer to a request this leadership did not make
        metadata, cause = self.running_metadata, self.running_cause
        self.running = self.running_metadata = self.running_cause = None
        if dict(metadata.processor_locality) != self.processors:
            # Membership changed while the grouper ran: its answer is stale, not wrong. The job
            # is dirty again, so the next tick generates from the current membership.
            return [RebalanceSkipped("membership changed while the grouper ran")]
        if event.error is not None:
            return [GrouperFailed(event.request, event.error)]
        try:
            validate(self.tasks, metadata, event.containers)
        except InvalidAssignment as exc:
            return [GrouperFailed(event.request, str(exc))]
        assert isinstance(event.containers, Collection)
        containers: dict[str, ContainerModel] = {c.processor_id: c for c in event.containers}
        candidate = JobModel(self.latest_version + 1, FrozenMap(containers), FrozenMap(self.config))
        if self.in_force is not None and candidate.same_assignment(self.in_force):
            return [RebalanceSkipped("the new assignment equals the model in force")]
        self.latest_version = candidate.version
        # No deadline until the adapter reports the publish done (``Published``).
        self.pending = _Pending(candidate, frozenset(containers), math.inf, event.now)
        previous = metadata.previous_task_to_processor
        owner = candidate.task_to_processor()
        recorded = self.task_locality
        in_force = self.in_force
        return [
            PublishJobModel(
                candidate,
                frozenset(containers),
                base=in_force.version if in_force else None,
                losing=losing_processors(in_force, candidate) if in_force else frozenset(),
                moved=tasks_moved(previous, owner),
                locality_kept=tasks_kept_local(owner, self.processors, recorded),
                with_locality=tasks_with_locality(owner, recorded),
                cause=cause.answered(event.now) if cause else None,
            )
        ]

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
        previous = self.in_force.task_to_processor() if self.in_force else {}
        ssps = (
            {name: task.partitions for name, task in self.in_force.tasks.items()}
            if self.in_force
            else {}
        )
        return GrouperMetadata(
            processor_locality=dict(self.processors),
            task_locality=dict(self.task_locality),
            previous_task_to_processor=previous,
            previous_task_to_ssps=ssps,
        )

    def _due(self) -> float | None:
        """When the dirty job should be rebalanced (None: it is not dirty)."""
        if self.dirty_since is None or self.last_change is None:
            return None
        quiet = self.last_change + self.settings.debounce_s
        cap = self.dirty_since + max(self.settings.debounce_max_s, self.settings.debounce_s)
        return min(quiet, cap)

    def _grace_until(self, now: float) -> float | None:
        """Until when vanished processors' tasks wait (None: nobody is waited for)."""
        grace = self.settings.processor_grace_s
        if grace <= 0 or not self.vanished:
            return None
        known = set(self.in_force.containers) if self.in_force else set()
        new_locations = {loc for pid, loc in self.processors.items() if pid not in known}
        waits = [
            v.since + grace
            for v in self.vanished.values()
            if v.since + grace > now and v.location not in new_locations
        ]
        return max(waits) if waits else None

    def _tick(self, now: float) -> list[Action]:
        actions: list[Action] = []
        pending = self.pending
        if pending is not None and (
            now >= pending.deadline or not pending.expected <= set(self.processors) | pending.joined
        ):
            # The deadline passed, or a processor the barrier waits for is gone (it cannot join):
            # time out now and generate again at once from the processors still alive.
            self.pending = None
            elapsed = now - pending.published_at
            actions += [
                MarkBarrier(pending.model.version, BarrierState.TIMED_OUT, elapsed),
                self._retention(),
            ]
            settle = max(self.settings.debounce_s, self.settings.debounce_max_s)
            self.dirty_since = self.last_change = now - settle
            self.retry = True
        if self.pending is not None:
            deadline = self.pending.deadline  # infinite until Published
            return [*actions, ScheduleWakeup(deadline)] if deadline < math.inf else actions
        if self.running is not None:
            return actions
        due = self._due()
        if due is None:
            return actions
        grace_until = self._grace_until(now)
        if grace_until is not None:
            due = max(due, grace_until)
        if now < due:
            return [*actions, ScheduleWakeup(due)]
        if not self.processors:
            self.dirty_since = self.last_change = None
            return [*actions, RebalanceSkipped("no live processor")]
        cause = rebalance_cause(now, self, [v.since for v in self.vanished.values()])
        self.dirty_since = self.last_change = None
        self.retry, self.running_cause = False, cause
        self.requests += 1
        self.running = self.requests
        self.running_metadata = self._metadata()
        request = RunGrouper(self.running, self.tasks, self.running_metadata, cause.trigger)
        return [*actions, request]
