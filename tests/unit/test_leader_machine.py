"""The coordinator's state machine, driven by random event sequences (hypothesis stateful).

The harness plays the adapter: it records what is published and marked, answers grouper
requests (with host-affinity, or with a grouper that raises, times out, returns nonsense or an
answer that makes checking it raise), reports each publish done (``Published``) after a publish
time a rule draws (up to three barrier timeouts: a large model publishes slowly), lets some
processors go silent (registered, never joining a barrier), and checks invariants I1, I2, I3
(the coordinator's side) and I5 after every step; that a barrier times out only a full barrier
timeout after its publish completed, or at once when a processor it expects vanished before
joining; and that a benched processor is named by no model published while it is benched.
Stored data may go bad (a version's chunks or manifest, the version pointer): a new leader is
told what it could not read, as the adapter reads it (``next_to_read``), and must fall back to
the newest DONE model that reads clean (or none), rebalance with the trigger ``model in force
unreadable`` and publish a new version above every stored one, planned against nothing, even
when the grouper's answer equals the fallback.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coordinator.protocol.leader import LeaderMachine, LeaderState
from coordinator.protocol.leader_events import (
    Action,
    BarrierUpdated,
    CoordinatorSettings,
    GrouperFailed,
    GrouperFinished,
    InForceUnreadable,
    LeadershipGained,
    LeadershipLost,
    MarkBarrier,
    MembershipChanged,
    ModelRefused,
    ProcessorBenched,
    ProcessorReadmitted,
    Published,
    PublishJobModel,
    RebalanceSkipped,
    RecheckFinished,
    RemoveOldVersions,
    RunGrouper,
    RunRecheck,
    ScheduleWakeup,
    TimePassed,
)
from coordinator.protocol.leader_recovery import Unreadable, next_to_read
from coordinator.protocol.leader_trigger import Trigger
from groupers import HostAffinityGrouper, validate
from metadata.model import (
    BarrierState,
    ContainerModel,
    FrozenMap,
    JobModel,
    SystemStreamPartition,
    TaskModel,
)

TASKS = tuple(
    TaskModel(f"Partition {n}", frozenset({SystemStreamPartition("kafka", "events", n)}), n)
    for n in range(12)
)
SETTINGS = CoordinatorSettings(
    debounce_s=2.0,
    debounce_max_s=6.0,
    barrier_timeout_s=10.0,
    processor_grace_s=3.0,
    probing_interval_s=5.0,
)
LOCATIONS = ("host-a", "host-b", "host-c")


@dataclass
class Store:
    """What ZooKeeper would hold: published models and barrier states."""

    models: list[JobModel] = field(default_factory=list)
    barrier: dict[int, str] = field(default_factory=dict)
    unreadable: set[int] = field(default_factory=set)  # versions whose data went bad
    pointer_bad: bool = False  # jobModelVersion went bad (a publish rewrites it)

    def latest(self) -> JobModel | None:
        return self.models[-1] if self.models else None

    def in_force(self) -> JobModel | None:
        done = [m for m in self.models if self.barrier.get(m.version) == BarrierState.DONE]
        return done[-1] if done else None

    def read_as_a_new_leader(self) -> tuple[JobModel | None, JobModel | None, list[Unreadable]]:
        """What the adapter reads (coordinator.leader.job_state): the latest model (None if it
        or the pointer is unreadable), the newest DONE model that reads clean, and what could
        not be read."""
        found: list[Unreadable] = []
        latest = self.latest()
        if self.pointer_bad:
            found.append(Unreadable(None, "jobModelVersion", "garbage"))
            latest = None
        elif latest is not None and latest.version in self.unreadable:
            found.append(Unreadable(latest.version, f"jobModels/{latest.version}", "bad chunk"))
            latest = None
        states = {m.version: self.barrier.get(m.version) for m in self.models}
        bad = {u.version for u in found if u.version is not None}
        by_version = {m.version: m for m in self.models}
        while (version := next_to_read(states, bad)) is not None:  # type: ignore[arg-type]
            if version not in self.unreadable:
                return latest, by_version[version], found
            found.append(Unreadable(version, f"jobModels/{version}", "bad manifest"))
            bad.add(version)
        return latest, None, found


class RaisingIterable:
    """An answer whose ``__iter__`` raises."""

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> object:
        raise RuntimeError("iterating the answer failed")

    def __contains__(self, item: object) -> bool:
        raise RuntimeError("membership test failed")


def other_answer(containers: object) -> list[ContainerModel] | None:
    """A valid answer other than ``containers``: one task moved to another processor."""
    if not isinstance(containers, set) or len(containers) < 2:
        return None
    ordered = sorted(containers, key=lambda c: (-len(c.tasks), c.processor_id))
    big, small = ordered[0], ordered[-1]
    if not big.tasks:
        return None
    name, task = next(iter(big.tasks.items()))
    rest = {n: t for n, t in big.tasks.items() if n != name}
    spare = {n: t for n, t in small.standby_tasks.items() if n != name}
    return [
        *ordered[1:-1],
        ContainerModel(big.processor_id, big.location_id, FrozenMap(rest), big.standby_tasks),
        ContainerModel(
            small.processor_id, small.location_id, FrozenMap({**small.tasks, name: task}), spare
        ),
    ]


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = LeaderMachine(TASKS, SETTINGS)
        self.store = Store()
        self.now = 0.0
        self.live: dict[str, str] = {"p-0": "host-a", "p-1": "host-b"}
        self.next_id = 2
        self.outstanding: RunGrouper | None = None
        self.answering: RunGrouper | None = None
        self.published_this_step: list[PublishJobModel] = []
        self.failed_this_step = False
        self.in_force_before: JobModel | None = None
        self.publish_s = 0.0  # how long the next publishes take
        self.deadline_from: dict[int, float] = {}  # version -> when its barrier clock started
        self.joined: dict[int, frozenset[str]] = {}
        self.silent: set[str] = set()  # registered, never join a barrier
        self.benched: dict[str, float] = {}  # what the machine said: processor -> until
        self.recheck_of: dict[int, str] = {}  # version -> how its recheck answered
        self.recheck_plan: dict[int, str] = {}  # version -> how its recheck will answer
        self.recheck_next = "same"  # how the recheck of the answer being fed will answer
        #: the recheck in flight: it runs beside the adapter's loop, and answers at any later
        #: step (``recheck_answers``) unless a grouper run or a change of leadership ends it
        self.recheck_asked: RunRecheck | None = None
        #: whether a recheck in flight when a grouper run is asked had answered just before:
        #: its answer, queued already, is handled after that step (else the run ends it)
        self.recheck_raced = False
        self.late: list[object] = []
        self.settle_point = 0.0  # the last DONE, grouper answer or gain: probes wait from it
        self.repair_owed = False  # a new leader met unreadable data: a new version is owed
        self.owed_above = 0  # ... above this version
        self.owed_done_above: float = 0  # a DONE above this (an inherited one) ends it too
        self.told_unreadable: list[Unreadable] | None = None  # what the gain reported
        self.abandoning: set[int] = set()  # NEW barriers of unreadable models, at a gain
        self.fallback_version: int | None = None

    # ---------------------------------------------------------------- the adapter's part

    def feed(self, event: object) -> None:
        self.published_this_step = []
        self.failed_this_step = False
        self.in_force_before = self.core.in_force
        events = [event]
        while events:
            actions: list[Action] = self.core.handle(events.pop(0))  # type: ignore[arg-type]
            events += self.carry_out(actions)
            if not events and self.late:
                events.append(self.late.pop())

    def carry_out(self, actions: list[Action]) -> list[object]:
        """Check and apply the actions; the events they lead to (a publish: ``Published``)."""
        follow: list[object] = []
        for action in actions:
            if isinstance(action, RunGrouper):
                assert self.core.leader
                assert self.outstanding is None or self.outstanding.request != action.request
                # A repair owed names the trigger of every run until it is published.
                assert (action.trigger == Trigger.UNREADABLE) == self.repair_owed, action.trigger
                if action.trigger == Trigger.PROBING:
                    # Only an IDLE leader with a model in force that is not settled probes, an
                    # interval after it last learnt anything.
                    assert self.core.in_force is not None and self.core.dirty_since is None
                    assert self.now - self.settle_point >= SETTINGS.probing_interval_s - 1e-9
                self.outstanding = action
                if self.recheck_asked is not None and self.recheck_raced:
                    self.late.append(self.answer_recheck(self.recheck_asked))
                self.recheck_asked = None  # ended first: the worker runs one grouper at a time
            elif isinstance(action, PublishJobModel):
                # I2: only a leader publishes, versions strictly increase, one barrier at a time.
                assert self.core.leader
                latest = self.store.latest()
                assert latest is None or action.model.version > latest.version
                assert all(state != BarrierState.NEW for state in self.store.barrier.values())
                # I1: every task exactly once, only to processors alive when generated.
                assert self.answering is not None
                validate(TASKS, self.answering.metadata, action.model.containers.values())
                assert not set(action.model.containers) & set(self.benched)
                # A repair publishes above every stored version, planned against nothing
                # (processors may run the unreadable version); it rewrites the pointer.
                assert action.repair == self.repair_owed
                if action.repair:
                    assert action.model.version > self.owed_above
                    assert action.base is None and action.gaining is None and not action.losing
                    self.repair_owed, self.store.pointer_bad = False, False
                # The early-join rule's premise: whoever is not losing keeps every task.
                before = None if action.repair else self.in_force_before
                assert action.base == (before.version if before else None)
                for pid, container in (before.containers if before else {}).items():
                    if pid not in action.losing:
                        kept = action.model.containers[pid].tasks
                        assert all(kept.get(n) == t for n, t in container.tasks.items())
                        # ... and whoever is not gaining either reads no container: it
                        # must be exactly the one it runs.
                        if action.gaining is not None and pid not in action.gaining:
                            assert dict(kept) == dict(container.tasks)
                assert (action.gaining is None) == (before is None)
                self.store.models.append(action.model)
                self.store.pointer_bad = False  # the publish wrote the pointer
                self.store.barrier[action.model.version] = BarrierState.NEW
                self.recheck_plan[action.model.version] = self.recheck_next
                self.published_this_step.append(action)
                self.now += self.publish_s  # the publish takes its time
                self.deadline_from[action.model.version] = self.now
                follow.append(Published(self.now, action.model.version))
            elif isinstance(action, RunRecheck):
                self.check_recheck_asked(action)
                self.recheck_asked = action  # (ends one still in flight)
                self.recheck_of.pop(action.version, None)  # no verdict until it answers
            elif isinstance(action, MarkBarrier):
                assert self.core.leader
                assert action.duration_s >= 0, f"barrier decided {action.duration_s} s before"
                assert self.store.barrier.get(action.version) == BarrierState.NEW
                if action.version in self.abandoning:  # timed out at once by a new leader
                    assert action.state == BarrierState.TIMED_OUT
                    self.abandoning.discard(action.version)
                elif action.state == BarrierState.TIMED_OUT:
                    self.check_timed_out(action)
                elif action.state == BarrierState.DONE and action.version > self.owed_done_above:
                    self.repair_owed = False  # (one inherited NEW, above the unreadable ones)
                self.store.barrier[action.version] = action.state
            elif isinstance(action, RemoveOldVersions):
                # Retention never removes the model in force.
                in_force = self.core.in_force
                assert in_force is None or action.below <= in_force.version
            elif isinstance(action, GrouperFailed):
                self.failed_this_step = True
            elif isinstance(action, ProcessorBenched):
                # Only a live processor the barrier expected and that did not join is benched.
                assert action.processor_id in self.live
                assert self.store.barrier.get(action.version) == BarrierState.TIMED_OUT
                assert action.until > self.now
                self.benched[action.processor_id] = action.until
            elif isinstance(action, ProcessorReadmitted):
                assert action.processor_id in self.benched
                del self.benched[action.processor_id]
            elif isinstance(action, InForceUnreadable):
                assert self.told_unreadable is not None, "told of unreadable data it was not given"
                assert action.unreadable == tuple(self.told_unreadable)
                assert action.fallback == self.fallback_version
                self.told_unreadable = None
            else:
                assert isinstance(action, ScheduleWakeup | RebalanceSkipped | object)
        return follow

    def check_recheck_asked(self, action: RunRecheck) -> None:
        """Asked only of the model in force (once its barrier is DONE, or for an answer equal
        to it), never while a publish waits."""
        in_force = self.core.in_force
        assert self.core.leader and in_force is not None and action.version == in_force.version
        assert self.store.barrier.get(in_force.version) == BarrierState.DONE

    def answer_recheck(self, action: RunRecheck) -> RecheckFinished:
        """The grouper's answer to a recheck, as planned when the model's answer came: the
        same containers, another answer, or none (it failed). Nothing changes the model in
        force while it runs: a new one takes a grouper run, which ends the recheck."""
        self.check_recheck_asked(action)
        in_force = self.core.in_force
        assert in_force is not None
        plan = self.recheck_plan.get(action.version, self.recheck_next)
        containers = set(in_force.containers.values())
        answer: object = None
        if plan == "other":
            answer = other_answer(containers)
            plan = "other" if answer is not None else "same"  # one processor: no other answer
        if plan == "same":
            answer = containers
        self.recheck_of[action.version] = plan
        return RecheckFinished(self.now, action.version, answer)

    def check_probing(self) -> None:
        """The model in force probes exactly when its recheck said it is not final; while the
        recheck runs, it is taken as settled."""
        in_force = self.core.in_force
        if in_force is None or not self.core.leader:
            return
        if self.recheck_asked is not None:
            assert not self.core.probing
        elif in_force.version in self.recheck_of:
            assert self.core.probing == (self.recheck_of[in_force.version] == "other")

    def check_timed_out(self, action: MarkBarrier) -> None:
        """The deadline counts from the publish's completion (or from the gain of leadership
        for a barrier inherited NEW); a barrier waiting for a vanished processor goes at once."""
        model = next(m for m in self.store.models if m.version == action.version)
        # A dead processor's participant node goes with its session: joined or not, it is gone.
        vanished = set(model.containers) - set(self.live)
        started = self.deadline_from[action.version]
        assert vanished or self.now - started >= SETTINGS.barrier_timeout_s - 1e-9, (
            f"barrier {action.version} timed out {self.now - started:.2f} s after its publish"
        )

    # ---------------------------------------------------------------------------- rules

    @rule()
    def gain_leadership(self) -> None:
        latest, in_force, unreadable = self.store.read_as_a_new_leader()
        self.outstanding = self.recheck_asked = None  # (the last term's recheck was ended)
        participants: frozenset[str] = frozenset()
        if latest is not None and self.store.barrier.get(latest.version) == BarrierState.NEW:
            self.deadline_from[latest.version] = self.now  # the new leader's clock starts
            # What ZooKeeper still holds: the ephemeral participant nodes of the living.
            joined = self.joined.get(latest.version, frozenset())
            participants = frozenset(p for p in joined if p in self.live)
            self.joined[latest.version] = participants
        self.benched.clear()
        self.settle_point = self.now
        # A verdict is unknown to the new leader: it probes once, the model in force as well as
        # one it sees through.
        if in_force is not None:
            self.recheck_of[in_force.version] = "other"
        if latest is not None and self.store.barrier.get(latest.version) == BarrierState.NEW:
            self.recheck_of[latest.version] = "other"
        stored = self.store.latest()
        self.repair_owed = bool(unreadable)
        self.owed_above = stored.version if stored is not None else 0
        versions = [u.version for u in unreadable]
        self.owed_done_above = (
            math.inf if None in versions else max((v for v in versions if v), default=0)
        )
        self.told_unreadable = list(unreadable) if unreadable else None
        self.fallback_version = in_force.version if in_force is not None else None
        # A barrier left NEW whose model cannot be read: nobody can see it through.
        self.abandoning = {
            m.version
            for m in self.store.models
            if self.store.barrier.get(m.version) == BarrierState.NEW
            and (latest is None or m.version != latest.version)
        }
        self.feed(
            LeadershipGained(
                self.now,
                dict(self.live),
                {},
                latest=latest,
                latest_barrier=self.store.barrier.get(latest.version) if latest else None,  # type: ignore[arg-type]
                latest_participants=participants,
                in_force=in_force,
                unreadable=tuple(unreadable),
                version_floor=self.owed_above,
                abandoned=tuple(sorted(self.abandoning)),
            )
        )
        assert not self.abandoning, f"barriers left NEW: {self.abandoning}"
        assert self.told_unreadable is None, "unreadable data the leader did not report"
        assert self.core.in_force == in_force  # the newest DONE model that reads clean

    @rule(what=st.sampled_from(["latest", "in force", "pointer", "every version"]))
    def stored_data_goes_bad(self, what: str) -> None:
        """A chunk or manifest of a version, or the version pointer, is corrupted (a leader
        holding the model in memory does not notice; the next one does)."""
        latest, in_force = self.store.latest(), self.store.in_force()
        if what == "pointer":
            self.store.pointer_bad = True
        elif what == "latest" and latest is not None:
            self.store.unreadable.add(latest.version)
        elif what == "in force" and in_force is not None:
            self.store.unreadable.add(in_force.version)
        elif what == "every version":
            self.store.unreadable.update(m.version for m in self.store.models)

    @rule()
    def lose_leadership(self) -> None:
        self.feed(LeadershipLost(self.now))
        self.outstanding = self.recheck_asked = None  # leading ended: its recheck too
        self.benched.clear()  # a new leadership starts with nobody benched
        # The new leader will find a NEW barrier; it may also time it out itself.

    @rule(location=st.sampled_from(LOCATIONS))
    def processor_joins(self, location: str) -> None:
        self.live[f"p-{self.next_id}"] = location
        self.next_id += 1
        self.feed(MembershipChanged(self.now, dict(self.live)))

    @precondition(lambda self: len(self.live) > 1)
    @rule(index=st.integers(0, 10))
    def processor_dies(self, index: int) -> None:
        pid = sorted(self.live)[index % len(self.live)]
        del self.live[pid]
        self.feed(MembershipChanged(self.now, dict(self.live)))

    @precondition(lambda self: len(self.live) > 0)
    @rule(index=st.integers(0, 10))
    def processor_restarts_with_new_id(self, index: int) -> None:
        pid = sorted(self.live)[index % len(self.live)]
        location = self.live.pop(pid)
        self.live[f"p-{self.next_id}"] = location
        self.next_id += 1
        self.feed(MembershipChanged(self.now, dict(self.live)))

    @precondition(lambda self: len(self.live) > 1)
    @rule(index=st.integers(0, 10))
    def processor_goes_silent(self, index: int) -> None:
        self.silent.add(sorted(self.live)[index % len(self.live)])

    @rule(seconds=st.floats(0.1, 12.0))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.feed(TimePassed(self.now))

    @rule(seconds=st.sampled_from([0.0, 0.0, 0.5, 9.9, 12.5, 30.0]))
    def publishes_take(self, seconds: float) -> None:
        """From now on a publish takes ``seconds`` (beyond the barrier timeout: a huge model)."""
        self.publish_s = seconds

    @precondition(lambda self: self.store.latest() is not None)
    @rule(everyone=st.booleans(), stamped_before=st.sampled_from([0.0, 0.0, 0.05, 3.0]))
    def processors_join_the_barrier(self, everyone: bool, stamped_before: float) -> None:
        """``stamped_before``: the adapter stamped the join in its watch thread that long before
        it is handled (after a ``Published`` stamped later, say)."""
        latest = self.store.latest()
        assert latest is not None
        expected = set(latest.containers)
        joined = {p for p in expected if p in self.live and p not in self.silent}
        if not everyone and joined:
            joined.discard(sorted(joined)[0])
        self.joined[latest.version] = frozenset(joined)
        pending = self.core.pending
        self.feed(BarrierUpdated(self.now - stamped_before, latest.version, frozenset(joined)))
        if pending is not None and self.core.pending is None and self.core.in_force is not None:
            self.settle_point = self.now
            self.check_probing()

    @precondition(lambda self: self.outstanding is not None)
    @rule(
        kind=st.sampled_from(
            [
                "good",
                "good",
                "good",
                "raises",
                "timeout",
                "drops-a-task",
                "not-a-set",
                "validate-raises",
                "iter-raises",
            ]
        ),
        recheck=st.sampled_from(["same", "other", "none"]),
    )
    def grouper_answers(self, kind: str, recheck: str) -> None:
        request = self.outstanding
        assert request is not None
        self.outstanding = None
        self.answering = request
        containers: object
        error = None
        if kind == "good":
            containers = HostAffinityGrouper().group(request.tasks, request.metadata)
        elif kind == "raises":
            containers, error = None, "ValueError: boom"
        elif kind == "timeout":
            containers, error = None, "timed out after 30 s"
        elif kind == "drops-a-task":
            good = HostAffinityGrouper().group(request.tasks, request.metadata)
            first = min(good, key=lambda c: (-len(c.tasks), c.processor_id))
            trimmed = ContainerModel(
                first.processor_id,
                first.location_id,
                FrozenMap(dict(list(first.tasks.items())[1:])),
            )
            containers = (good - {first}) | {trimmed}
        elif kind == "validate-raises":
            # A list as processor id: validate() itself raises TypeError (unhashable).
            good = HostAffinityGrouper().group(request.tasks, request.metadata)
            containers = [*good, ContainerModel(["x"], "x", {})]  # type: ignore[arg-type]
        elif kind == "iter-raises":
            containers = RaisingIterable()
        else:
            containers = "nonsense"
        eligible = {p: loc for p, loc in self.live.items() if p not in self.benched}
        stale = dict(request.metadata.processor_locality) != eligible
        unchanged = self.core.in_force
        owed = self.repair_owed
        self.settle_point = self.now
        self.recheck_next = recheck  # how the recheck of this answer will answer
        self.feed(GrouperFinished(self.now, request.request, containers, error))
        if kind == "good" and not stale and owed:
            # Owed: published even when it equals the model in force (the fallback).
            assert [a.repair for a in self.published_this_step] == [True]
        if kind == "good" and not stale and not self.published_this_step and unchanged:
            self.check_probing()  # the recheck of the model in force, answered at once
        self.answering = None
        if stale:
            assert not self.published_this_step  # a stale answer is discarded, never published
        if kind != "good":
            # I5: a failing grouper publishes nothing and the model in force stays.
            assert self.failed_this_step or stale
            assert not self.published_this_step
            assert self.core.in_force == self.in_force_before

    @rule(what=st.sampled_from(["latest", "in force", "pointer", "every version"]))
    def a_new_leader_meets_bad_data(self, what: str) -> None:
        """Data goes bad, the leader changes and a whole rebalance follows: the repair's path
        from end to end, often enough to be explored."""
        self.stored_data_goes_bad(what)
        self.lose_leadership()
        self.gain_leadership()
        self.a_whole_rebalance("same", False)

    @rule(raced=st.booleans())
    def a_recheck_may_race_the_next_grouper_run(self, raced: bool) -> None:
        self.recheck_raced = raced

    @precondition(lambda self: self.recheck_asked is not None)
    @rule()
    def recheck_answers(self) -> None:
        """The recheck, run beside the adapter's loop, answers after whatever came meanwhile."""
        action = self.recheck_asked
        assert action is not None
        self.recheck_asked = None
        self.feed(self.answer_recheck(action))
        self.check_probing()

    @precondition(lambda self: self.core.leader)
    @rule(recheck=st.sampled_from(["same", "other", "none"]), rechecked=st.booleans())
    def a_whole_rebalance(self, recheck: str, rechecked: bool) -> None:
        """Time enough to rebalance (or probe), a good answer, everyone joins (and, if
        ``rechecked``, the recheck answers): so that models reach DONE and are rechecked often
        enough for probing to be explored."""
        self.time_passes(SETTINGS.debounce_max_s + SETTINGS.probing_interval_s)
        if self.outstanding is not None:
            self.grouper_answers("good", recheck)
        if self.store.latest() is not None:
            self.processors_join_the_barrier(True, 0.0)
        if rechecked and self.recheck_asked is not None:
            self.recheck_answers()

    # ------------------------------------------------------------------------ invariants

    @invariant()
    def done_only_when_everyone_joined(self) -> None:
        in_force = self.core.in_force
        if in_force is not None and self.core.leader:
            assert self.store.barrier.get(in_force.version) == BarrierState.DONE

    @invariant()
    def at_most_one_barrier_pending(self) -> None:
        assert (
            sum(1 for state in self.store.barrier.values() if state == BarrierState.NEW) <= 1
            or not self.core.leader
        )

    @invariant()
    def a_follower_holds_nothing_in_flight(self) -> None:
        if not self.core.leader:
            assert self.core.pending is None and self.core.running is None


CoordinatorMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCoordinatorStateMachine = CoordinatorMachine.TestCase


# ------------------------------------------------------------------- plain scenario tests


class Leader(LeaderMachine):
    """A core that remembers the last grouper request it made (gaining leadership may make one)."""

    last_request: RunGrouper | None = None

    def handle(self, event: object) -> list[Action]:  # type: ignore[override]
        actions = super().handle(event)  # type: ignore[arg-type]
        for action in actions:
            if isinstance(action, RunGrouper):
                self.last_request = action
        return actions


def leader(processors: dict[str, str], **kw: float) -> Leader:
    core = Leader(TASKS, CoordinatorSettings(**kw))
    core.handle(LeadershipGained(0.0, processors, {}))
    return core


def answered_at_zero(core: Leader) -> int:
    """Rebalance at time 0 (the grouper answering at once); the version it publishes."""
    core.handle(TimePassed(0.0))
    request = core.last_request
    assert request is not None
    answer = HostAffinityGrouper().group(request.tasks, request.metadata)
    actions = core.handle(GrouperFinished(0.0, request.request, answer))
    return next(a for a in actions if isinstance(a, PublishJobModel)).model.version


def run_to_publish(core: Leader, now: float) -> PublishJobModel:
    core.handle(TimePassed(now))
    request = core.last_request
    assert request is not None and core.running == request.request
    answer = HostAffinityGrouper().group(request.tasks, request.metadata)
    actions = core.handle(GrouperFinished(now, request.request, answer))
    published = next(a for a in actions if isinstance(a, PublishJobModel))
    core.handle(Published(now, published.model.version))  # the adapter's report
    return published


def test_debounce_waits_for_quiet_but_never_beyond_the_cap() -> None:
    core = leader({"p-0": "h"}, debounce_s=2.0, debounce_max_s=5.0)
    assert any(isinstance(a, ScheduleWakeup) and a.at == 2.0 for a in core.handle(TimePassed(0.0)))
    # Changes every second keep resetting the quiet timer, but the cap holds at t=5.
    for t in (1.0, 2.0, 3.0, 4.0):
        core.handle(MembershipChanged(t, {"p-0": "h", f"p-{t}": "h"}))
        assert not any(isinstance(a, RunGrouper) for a in core.handle(TimePassed(t + 0.5)))
    assert any(isinstance(a, RunGrouper) for a in core.handle(TimePassed(5.0)))


def test_the_grouper_is_given_each_eligible_processor_capacity() -> None:
    core = leader({"p-0": "h"}, debounce_s=0.5)
    core.handle(MembershipChanged(0.0, {"p-0": "h", "p-1": "h"}, {"p-0": 3, "gone": 2}))
    core.handle(TimePassed(1.0))
    request = core.last_request
    assert request is not None
    assert dict(request.metadata.processor_capacity) == {"p-0": 3}
    # A processor registering again with another capacity (same location) is a change.
    actions = core.handle(
        GrouperFinished(
            1.0, request.request, HostAffinityGrouper().group(request.tasks, request.metadata)
        )
    )
    published = next(a for a in actions if isinstance(a, PublishJobModel))
    assert len(published.model.containers["p-0"].tasks) == 3 * len(TASKS) // 4
    core.handle(Published(1.0, published.model.version))
    core.handle(BarrierUpdated(1.5, published.model.version, frozenset({"p-0", "p-1"})))
    core.handle(MembershipChanged(2.0, {"p-0": "h", "p-1": "h"}, {"p-0": 3, "p-1": 3}))
    core.handle(TimePassed(3.0))
    assert core.last_request is not request and core.last_request is not None
    assert dict(core.last_request.metadata.processor_capacity) == {"p-0": 3, "p-1": 3}


def test_barrier_done_only_when_every_expected_processor_joined() -> None:
    core = leader({"p-0": "h", "p-1": "h"}, debounce_s=0.0)
    published = run_to_publish(core, 0.0)
    version = published.model.version
    actions = core.handle(BarrierUpdated(1.0, version, frozenset({"p-0"})))
    assert not any(isinstance(a, MarkBarrier) for a in actions)
    actions = core.handle(BarrierUpdated(1.5, version, frozenset({"p-0", "p-1"})))
    assert MarkBarrier(version, BarrierState.DONE, 1.5) in actions
    assert core.in_force == published.model


def test_an_unchanged_assignment_is_not_published_again() -> None:
    core = leader({"p-0": "h", "p-1": "h"}, debounce_s=1.0)
    published = run_to_publish(core, 1.0)
    core.handle(BarrierUpdated(1.0, published.model.version, frozenset({"p-0", "p-1"})))
    # A processor flaps away and back under the same id: same membership, nothing to do.
    core.handle(MembershipChanged(2.0, {"p-0": "h"}))
    actions = core.handle(MembershipChanged(2.1, {"p-0": "h", "p-1": "h"}))
    core.handle(TimePassed(3.5))
    request = core.last_request
    assert request is not None and core.running == request.request
    answer = HostAffinityGrouper().group(request.tasks, request.metadata)
    actions = core.handle(GrouperFinished(3.5, request.request, answer))
    assert any(isinstance(a, RebalanceSkipped) for a in actions)
    assert not any(isinstance(a, PublishJobModel) for a in actions)


def test_timeout_marks_timed_out_and_regenerates_from_the_living() -> None:
    core = leader({"p-0": "h", "p-1": "h"}, debounce_s=0.0, barrier_timeout_s=10.0)
    published = run_to_publish(core, 0.0)
    core.handle(BarrierUpdated(1.0, published.model.version, frozenset({"p-0"})))
    actions = core.handle(TimePassed(10.0))
    assert MarkBarrier(published.model.version, BarrierState.TIMED_OUT, 10.0) in actions
    assert any(isinstance(a, RunGrouper) for a in actions)


def test_a_vanished_participant_times_the_barrier_out_at_once() -> None:
    core = leader({"p-0": "h", "p-1": "h"}, debounce_s=0.0, barrier_timeout_s=30.0)
    published = run_to_publish(core, 0.0)
    actions = core.handle(MembershipChanged(1.0, {"p-0": "h"}))
    assert MarkBarrier(published.model.version, BarrierState.TIMED_OUT, 1.0) in actions
    request = next(a for a in actions if isinstance(a, RunGrouper))
    assert set(request.metadata.processor_locality) == {"p-0"}


def test_grace_period_holds_tasks_for_a_vanished_processor_or_its_replacement() -> None:
    core = leader({"p-0": "a", "p-1": "b"}, debounce_s=0.0, processor_grace_s=20.0)
    published = run_to_publish(core, 0.0)
    core.handle(BarrierUpdated(0.5, published.model.version, frozenset({"p-0", "p-1"})))
    core.handle(MembershipChanged(1.0, {"p-0": "a"}))  # p-1 (host b) vanishes
    actions = core.handle(TimePassed(5.0))
    assert not any(isinstance(a, RunGrouper) for a in actions)
    assert ScheduleWakeup(21.0) in actions
    # A new processor at p-1's location ends the wait at once.
    actions = core.handle(MembershipChanged(6.0, {"p-0": "a", "p-9": "b"}))
    request = next(a for a in actions if isinstance(a, RunGrouper))
    assert request.metadata.processor_locality == {"p-0": "a", "p-9": "b"}


def test_followers_and_deposed_leaders_decide_nothing() -> None:
    core = Leader(TASKS, CoordinatorSettings(debounce_s=0.0))
    assert core.handle(MembershipChanged(0.0, {"p-0": "h"})) == []
    assert core.handle(TimePassed(5.0)) == []
    core.handle(LeadershipGained(6.0, {"p-0": "h"}, {}))
    request = core.last_request
    assert request is not None
    core.handle(LeadershipLost(7.0))
    answer = HostAffinityGrouper().group(request.tasks, request.metadata)
    assert core.handle(GrouperFinished(8.0, request.request, answer)) == []


def test_new_leader_continues_the_version_sequence_and_finishes_a_pending_barrier() -> None:
    old = JobModel(
        7,
        FrozenMap({"p-0": ContainerModel("p-0", "h", FrozenMap({t.name: t for t in TASKS}))}),
    )
    core = Leader(TASKS, CoordinatorSettings(debounce_s=0.0))
    actions = core.handle(
        LeadershipGained(
            0.0,
            {"p-0": "h"},
            {},
            latest=old,
            latest_barrier=BarrierState.NEW,
            latest_participants=frozenset({"p-0"}),
            in_force=None,
        )
    )
    assert MarkBarrier(7, BarrierState.DONE, 0.0) in actions
    assert core.in_force == old
    core.handle(MembershipChanged(1.0, {"p-0": "h", "p-1": "h"}))
    assert run_to_publish(core, 2.0).model.version == 8


@pytest.mark.parametrize("answer", [None, "nonsense", set()])
def test_a_bad_answer_publishes_nothing(answer: object) -> None:
    """Invariant I5, on its own (the state machine above checks it in random sequences)."""
    core = leader({"p-0": "h"}, debounce_s=0.0)
    request = core.last_request
    assert request is not None
    actions = core.handle(GrouperFinished(0.0, request.request, answer))
    assert any(isinstance(a, GrouperFailed) for a in actions)
    assert not any(isinstance(a, PublishJobModel) for a in actions)
    assert core.in_force is None


def test_an_answer_that_arrives_after_membership_changed_is_discarded_and_rerun() -> None:
    core = leader({"p-0": "h"}, debounce_s=0.0)
    stale = core.last_request
    assert stale is not None
    core.handle(MembershipChanged(0.5, {"p-0": "h", "p-1": "h"}))
    answer = HostAffinityGrouper().group(stale.tasks, stale.metadata)
    actions = core.handle(GrouperFinished(1.0, stale.request, answer))
    assert not any(isinstance(a, PublishJobModel | GrouperFailed) for a in actions)
    rerun = next(a for a in actions if isinstance(a, RunGrouper))
    assert set(rerun.metadata.processor_locality) == {"p-0", "p-1"}


def test_the_barrier_deadline_starts_when_the_publish_completes() -> None:
    """A publish slower than the barrier timeout (a 1M-task model) must not time the barrier out:
    the deadline counts from ``Published``, not from the grouper's answer."""
    core = leader({"p-0": "h", "p-1": "h"}, debounce_s=0.0, barrier_timeout_s=10.0)
    core.handle(TimePassed(0.0))
    request = core.last_request
    assert request is not None
    answer = HostAffinityGrouper().group(request.tasks, request.metadata)
    actions = core.handle(GrouperFinished(0.0, request.request, answer))
    version = next(a for a in actions if isinstance(a, PublishJobModel)).model.version
    assert not any(isinstance(a, ScheduleWakeup) for a in actions)  # no deadline yet
    actions = core.handle(Published(12.5, version))  # the publish took 12.5 s
    assert ScheduleWakeup(22.5) in actions
    assert not any(isinstance(a, MarkBarrier) for a in actions)
    actions = core.handle(BarrierUpdated(14.0, version, frozenset({"p-0", "p-1"})))
    assert MarkBarrier(version, BarrierState.DONE, 1.5) in actions


def test_a_join_stamped_before_the_publish_completed_counts_at_the_machine_time() -> None:
    """The adapter stamps a barrier's watch event in its own thread: the processors may join
    (stamped 12.4) before the publish call returns (stamped 12.5) and be handled after it. The
    barrier is DONE 0 s after the publish, not -0.1 s, and time does not go back."""
    core = leader({"p-0": "h", "p-1": "h"}, debounce_s=0.0, barrier_timeout_s=10.0)
    version = answered_at_zero(core)
    core.handle(Published(12.5, version))
    actions = core.handle(BarrierUpdated(12.4, version, frozenset({"p-0", "p-1"})))
    assert MarkBarrier(version, BarrierState.DONE, 0.0) in actions
    assert core.clock == 12.5


def test_a_slow_publish_still_times_out_a_full_timeout_after_it_completed() -> None:
    core = leader({"p-0": "h", "p-1": "h"}, debounce_s=0.0, barrier_timeout_s=10.0)
    version = answered_at_zero(core)
    core.handle(Published(12.5, version))
    assert not any(isinstance(a, MarkBarrier) for a in core.handle(TimePassed(22.0)))
    assert MarkBarrier(version, BarrierState.TIMED_OUT, 10.0) in core.handle(TimePassed(22.5))
    assert core.handle(Published(23.0, version)) == []  # late: the barrier is decided


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param("list-id", id="validate-raises-TypeError"),
        pytest.param("iter-raises", id="__iter__-raises"),
    ],
)
def test_an_answer_that_makes_checking_it_raise_is_an_invalid_answer(answer: str) -> None:
    """Issue 15 item 3: validate() raising (a list as processor id) or an answer whose __iter__
    raises is a GrouperFailed (logged and counted by the service), never an exception."""
    core = leader({"p-0": "h"}, debounce_s=0.0)
    published = run_to_publish(core, 0.0)
    core.handle(BarrierUpdated(0.5, published.model.version, frozenset({"p-0"})))
    core.handle(MembershipChanged(1.0, {"p-0": "h", "p-1": "h"}))
    core.handle(TimePassed(1.0))
    request = core.last_request
    assert request is not None and core.running == request.request
    good = HostAffinityGrouper().group(request.tasks, request.metadata)
    bad: object = (
        [*good, ContainerModel(["x"], "x", {})]  # type: ignore[arg-type]
        if answer == "list-id"
        else RaisingIterable()
    )
    actions = core.handle(GrouperFinished(1.0, request.request, bad))
    failed = [a for a in actions if isinstance(a, GrouperFailed)]
    assert len(failed) == 1 and "raised" in failed[0].reason
    assert not any(isinstance(a, PublishJobModel) for a in actions)
    assert core.in_force == published.model


def test_a_model_that_drops_every_task_in_force_is_refused_unless_allowed() -> None:
    """Issue 15 item 7: a replica whose config has no tasks (no inputs) would publish an empty
    model and stop every running task; the machine refuses it unless the operator allows it."""
    running = JobModel(
        3,
        FrozenMap({"p-0": ContainerModel("p-0", "h", FrozenMap({t.name: t for t in TASKS}))}),
    )
    for allowed in (False, True):
        core = Leader((), CoordinatorSettings(debounce_s=0.0, allow_dropping_all_tasks=allowed))
        core.handle(
            LeadershipGained(
                0.0,
                {"p-0": "h", "p-1": "h"},
                {},
                latest=running,
                latest_barrier=BarrierState.DONE,
                in_force=running,
            )
        )
        request = core.last_request
        assert request is not None
        answer = HostAffinityGrouper().group(request.tasks, request.metadata)
        actions = core.handle(GrouperFinished(0.0, request.request, answer))
        refused = [a for a in actions if isinstance(a, ModelRefused)]
        published = [a for a in actions if isinstance(a, PublishJobModel)]
        if allowed:
            assert published and not refused
        else:
            assert not published and "allow_dropping_all_tasks" in refused[0].reason
            assert core.in_force == running and core.state == LeaderState.IDLE


def test_a_processor_that_misses_a_barrier_is_benched_then_readmitted() -> None:
    """Issue 15 "Also": a registered processor that never joins is left out of the next model
    (one timeout, not one per rebalance) and let back in when its cool-down ends."""
    core = leader(
        {"p-0": "h", "p-1": "h"}, debounce_s=0.0, barrier_timeout_s=10.0, exclusion_s=60.0
    )
    first = run_to_publish(core, 0.0)
    core.handle(BarrierUpdated(1.0, first.model.version, frozenset({"p-0", "p-1"})))
    core.handle(MembershipChanged(2.0, {"p-0": "h", "p-1": "h", "silent": "h"}))
    second = run_to_publish(core, 2.0)
    assert "silent" in second.model.containers
    core.handle(BarrierUpdated(3.0, second.model.version, frozenset({"p-0", "p-1"})))
    actions = core.handle(TimePassed(12.0))
    assert ProcessorBenched("silent", second.model.version, 1, 72.0) in actions
    request = next(a for a in actions if isinstance(a, RunGrouper))
    assert set(request.metadata.processor_locality) == {"p-0", "p-1"}
    answer = HostAffinityGrouper().group(request.tasks, request.metadata)
    # The answer equals the model in force, but v2 timed out (p-0 and p-1 stopped tasks for
    # it): it is published, not skipped.
    third = next(
        a
        for a in core.handle(GrouperFinished(12.0, request.request, answer))
        if isinstance(a, PublishJobModel)
    )
    assert set(third.model.containers) == {"p-0", "p-1"}
    core.handle(BarrierUpdated(12.5, third.model.version, frozenset({"p-0", "p-1"})))
    assert core.state == LeaderState.IDLE
    actions = core.handle(TimePassed(72.0))
    assert ProcessorReadmitted("silent", "its cool-down ended") in actions
    assert any(isinstance(a, RunGrouper) for a in actions)


def test_a_benched_processor_that_registers_again_is_readmitted_at_once() -> None:
    core = leader({"p-0": "h", "s": "h"}, debounce_s=0.0, barrier_timeout_s=10.0)
    first = run_to_publish(core, 0.0)
    core.handle(BarrierUpdated(1.0, first.model.version, frozenset({"p-0"})))
    actions = core.handle(TimePassed(10.0))
    assert any(isinstance(a, ProcessorBenched) for a in actions)
    core.handle(MembershipChanged(11.0, {"p-0": "h"}))
    actions = core.handle(MembershipChanged(11.5, {"p-0": "h", "s": "h"}))
    assert core.bench.until == {}


def test_nobody_is_benched_when_nobody_joined() -> None:
    """Every processor missing the deadline is not one silent processor: bench nobody."""
    core = leader({"p-0": "h", "p-1": "h"}, debounce_s=0.0, barrier_timeout_s=10.0)
    run_to_publish(core, 0.0)
    actions = core.handle(TimePassed(10.0))
    assert not any(isinstance(a, ProcessorBenched) for a in actions)


def test_a_new_leader_replaces_a_model_in_force_over_other_tasks() -> None:
    """A Kafka partition added (or an input changed): the job's tasks are not the tasks of the
    model in force, so a new leader rebalances although no processor came or went; with the
    same tasks it does not."""
    old_tasks = TASKS[:-1]
    running = JobModel(
        3,
        FrozenMap({"p-0": ContainerModel("p-0", "h", FrozenMap({t.name: t for t in old_tasks}))}),
    )
    for tasks, rebalances in ((TASKS, True), (old_tasks, False)):
        core = Leader(tasks, CoordinatorSettings(debounce_s=0.0))
        core.handle(
            LeadershipGained(
                0.0,
                {"p-0": "h"},
                {},
                latest=running,
                latest_barrier=BarrierState.DONE,
                in_force=running,
                tasks=frozenset(t.name for t in tasks),
            )
        )
        core.handle(TimePassed(0.0))
        assert (core.last_request is not None) == rebalances
        if rebalances:
            published = run_to_publish(core, 1.0)
            assigned = {t for c in published.model.containers.values() for t in c.tasks}
            assert assigned == {t.name for t in TASKS}
