"""The member's state machine, driven by random event sequences (hypothesis stateful).

The harness plays both the adapter and ZooKeeper: it publishes versions (with the manifest's
``base``, ``losing`` and ``gaining`` as the leader computes them, or without ``gaining`` as an
older leader wrote them), decides barriers, loses the session,
removes versions (retention), makes store calls fail, and carries out every action the machine
returns. After every step it checks the member's side of the invariants:

- I3: the member runs only tasks of a version whose barrier is DONE, all of one version, and
  starts tasks only after that DONE; it never joins a barrier still running a task the version
  takes from it; an early join happens only when the version keeps every task it runs.
- I4: locality is written after DONE, for the member's own tasks of that version; once a DONE
  is handled (with no store error meanwhile), every task the member runs is recorded at it (the
  tasks it kept from before were written then; another owner's entry is rewritten on arrival).
- A member that reads no container (the manifest says it neither loses nor gains) starts exactly
  its container of the DONE version.
- Session loss and shutdown stop every task; shutdown unregisters a registered member.
- Standby replicas: the member keeps exactly the standbys of the DONE version it runs (started
  and stopped only then), never a task it runs, and stops them all with its tasks.
- One processor id, one processor (I3): while an older live registration holds the member's id
  it follows nothing, joins no barrier and starts no task; it gives up (unregisters, REFUSED, for
  good) only after ``patience`` looks that all found the older one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from coordinator.protocol.member import TRANSITIONS, MemberMachine
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
    Registered,
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
from coordinator.protocol.rules import gaining_processors, losing_processors
from metadata.model import (
    BarrierState,
    ContainerModel,
    FrozenMap,
    JobModel,
    SystemStreamPartition,
    TaskModel,
)

ME = "p-1"
FENCE_AFTER_S = 1.0
POOL = tuple(
    TaskModel(f"Partition {n}", frozenset({SystemStreamPartition("kafka", "events", n)}), n)
    for n in range(6)
)
# The same name with other partitions: a task that "changed" (e.g. a rescale).
CHANGED = {t.name: TaskModel(t.name, frozenset(), -1) for t in POOL}


@dataclass
class World:
    """What ZooKeeper holds for one job, seen from one member."""

    models: dict[int, JobModel] = field(default_factory=dict)
    manifests: dict[int, tuple[int | None, frozenset[str], frozenset[str] | None]] = field(
        default_factory=dict
    )
    locality: dict[str, str] = field(default_factory=dict)  # task -> the processor recorded
    barriers: dict[int, BarrierState] = field(default_factory=dict)
    joined: dict[int, set[str]] = field(default_factory=dict)
    latest: int = 0

    def in_force(self) -> JobModel | None:
        done = [v for v, s in self.barriers.items() if s == BarrierState.DONE and v in self.models]
        return self.models[max(done)] if done else None


class MemberHarness(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.machine = MemberMachine(ME)
        self.world = World()
        self.running: dict[str, TaskModel] = {}
        self.running_version: int | None = None
        self.registered = False
        self.connected = True
        self.fail_next = False
        self.resync_pending = False
        self.watched: set[int] = set()
        self.events: deque[MemberEvent] = deque()
        self.written: list[tuple[int, tuple[str, ...]]] = []
        self.started: int | None = None  # a DONE version whose tasks this feed started
        self.failed = False  # a store call failed during this feed
        self.older: str | None = None  # an older live registration with the member's id
        self.answered_duplicate = False  # the last registration answer named an older one
        self.looks_at_older = 0  # answers in a row that named an older registration
        self.refused = False
        self.suspended = False  # the connection is down (the session may be alive)
        self.fence_pending: int | None = None  # the suspension whose fence is scheduled
        self.deferred: list[MemberEvent] = []  # watch events kazoo delivers after reconnecting
        self.standbys: dict[str, TaskModel] = {}

    # ---------------------------------------------------------------- the adapter's part

    def notify(self, event: MemberEvent) -> None:
        """A watch fires: at once, or (while disconnected) once the connection is back."""
        if self.suspended:
            self.deferred.append(event)
        else:
            self.feed(event)

    def feed(self, event: MemberEvent) -> None:
        self.events.append(event)
        self.started, self.failed = None, False
        while self.events:
            state = self.machine.state
            nxt = self.events.popleft()
            actions = self.machine.handle(nxt)
            allowed = TRANSITIONS.get((state, type(nxt)), frozenset({state}))
            assert self.machine.state in allowed
            for action in actions:
                self.carry_out(action)
        if self.started is not None and not self.failed:
            # I4: after a DONE, every task the member runs is recorded at it.
            assert all(self.world.locality.get(n) == ME for n in self.running)

    def failing(self) -> bool:
        if self.fail_next:
            self.fail_next = False
            self.failed = True
            self.events.append(StoreFailed("injected"))
            return True
        return False

    def carry_out(self, action: MemberAction) -> None:
        world = self.world
        if isinstance(action, Register):
            if not self.connected:
                self.events.append(StoreFailed("not connected"))
                return
            if self.failing():
                return
            assert not self.refused  # refused for good: never registers again
            self.registered = True
            self.looks_at_older = 0
            self.answer_registration()
        elif isinstance(action, CheckRegistration):
            assert self.registered and self.machine.state == MemberState.DUPLICATE
            if not self.failing():
                self.answer_registration()
        elif isinstance(action, RegistrationRefused):
            # Only after `patience` more looks, all finding the older registration live.
            assert action.duplicate_of == self.older == "/processors/processor-0"
            assert self.looks_at_older == self.machine.patience + 1
            assert not self.registered and not self.running
            self.refused = True
        elif isinstance(action, Unregister):
            assert self.registered
            self.registered = False
        elif isinstance(action, WatchVersions | FetchLatestVersion):
            if not self.failing():
                self.events.append(VersionAnnounced(world.latest or None))
        elif isinstance(action, ReadManifest):
            if self.failing():
                return
            if action.version not in world.models:
                self.events.append(ManifestMissing(action.version))
            else:
                base, losing, gaining = world.manifests[action.version]
                self.events.append(ManifestRead(action.version, base, losing, gaining))
        elif isinstance(action, ReadContainer):
            if self.failing():
                return
            model = world.models.get(action.version)
            container = model.containers.get(ME) if model else None
            self.events.append(
                ContainerRead(action.version, container.tasks, container.standby_tasks)
                if container
                else ContainerRead(action.version, None)
            )
        elif isinstance(action, JoinBarrier):
            self.check_join(action)
            if self.failing():
                return
            world.joined.setdefault(action.version, set()).add(ME)
        elif isinstance(action, WatchBarrier):
            self.watched.add(action.version)
            state = world.barriers.get(action.version)
            if state is not None and state != BarrierState.NEW:
                self.events.append(BarrierDecided(action.version, state))
        elif isinstance(action, StopTasks):
            assert set(action.tasks) <= set(self.running)
            for name in action.tasks:
                del self.running[name]
        elif isinstance(action, StartTasks):
            self.check_start(action)
        elif isinstance(action, WriteLocality):
            # I4: after DONE, the member's own tasks of that version.
            assert world.barriers.get(action.version) == BarrierState.DONE
            assert set(action.tasks) <= set(world.models[action.version].containers[ME].tasks)
            assert action.tasks
            if self.failing():
                return
            world.locality.update(dict.fromkeys(action.tasks, ME))
            self.written.append((action.version, tuple(action.tasks)))
        elif isinstance(action, ScheduleResync):
            self.resync_pending = True
        elif isinstance(action, ScheduleFence):
            assert self.suspended and action.after_s == FENCE_AFTER_S
            self.fence_pending = action.suspension
        elif isinstance(action, StopStandbys):
            assert set(action.tasks) <= set(self.standbys)
            for name in action.tasks:
                del self.standbys[name]
        elif isinstance(action, StartStandbys):
            # Only under a DONE version, for standbys it gives this member, never a running task.
            assert self.world.barriers.get(action.version) == BarrierState.DONE
            given = self.world.models[action.version].containers[ME].standby_tasks
            assert all(given[n] == t for n, t in action.tasks.items())
            assert not set(action.tasks) & set(self.running)
            assert not set(action.tasks) & set(self.standbys)
            self.standbys.update(action.tasks)

    def answer_registration(self) -> None:
        self.answered_duplicate = self.older is not None
        self.looks_at_older = self.looks_at_older + 1 if self.older else 0
        self.events.append(Registered("/processors/processor-1", duplicate_of=self.older))

    def check_join(self, action: JoinBarrier) -> None:
        # I3: a member whose id an older registration holds never joins a barrier.
        assert not self.refused and not self.answered_duplicate
        model = self.world.models[action.version]
        mine = model.containers[ME].tasks if ME in model.containers else None
        if action.early:
            # An early join only when the version keeps every task the member runs.
            assert mine is not None
            assert all(mine.get(n) == t for n, t in self.running.items())
        else:
            # Stop what you lose before joining.
            assert mine is not None
            assert all(mine.get(n) == t for n, t in self.running.items())

    def check_start(self, action: StartTasks) -> None:
        assert not self.refused and not self.answered_duplicate
        # I3: start only on DONE, and only the tasks the version gives this member.
        assert self.world.barriers.get(action.version) == BarrierState.DONE
        mine = self.world.models[action.version].containers[ME].tasks
        assert dict(action.running) == dict(mine)
        assert all(mine.get(n) == t for n, t in action.tasks.items())
        self.running.update(action.tasks)
        assert self.running == dict(mine)
        self.running_version = action.version
        self.started = action.version

    # ---------------------------------------------------------------- rules

    @initialize(patience=st.integers(0, 2), older=st.booleans())
    def start(self, patience: int, older: bool) -> None:
        self.machine = MemberMachine(ME, patience=patience, fence_after_s=FENCE_AFTER_S)
        self.older = "/processors/processor-0" if older else None
        self.feed(Connected())

    @rule(present=st.booleans())
    def older_registration(self, present: bool) -> None:
        """An older registration with the member's id appears (or expires)."""
        self.older = "/processors/processor-0" if present else None

    @rule(
        names=st.lists(st.sampled_from([t.name for t in POOL]), unique=True, max_size=4),
        named=st.booleans(),
        changed=st.booleans(),
        keep=st.booleans(),
        announce=st.integers(0, 3),
        says_gaining=st.booleans(),
    )
    def publish(
        self,
        names: list[str],
        named: bool,
        changed: bool,
        keep: bool,
        announce: int,
        says_gaining: bool,
    ) -> None:
        world = self.world
        before = world.in_force()
        tasks = {n: (CHANGED[n] if changed and n == names[0] else _task(n)) for n in names}
        if keep and before is not None and ME in before.containers:
            # The member keeps what it has (maybe gaining more): the early-join case.
            tasks = {**{n: _task(n) for n in names}, **before.containers[ME].tasks}
        containers = {"p-2": ContainerModel("p-2", "h2", FrozenMap())}
        if named:
            # The member keeps standbys of the tasks it does not run (the others are p-2's).
            spare = {t.name: t for t in POOL if t.name not in tasks}
            standbys = dict(list(spare.items())[: world.latest % 3])
            containers[ME] = ContainerModel(ME, "h1", FrozenMap(tasks), FrozenMap(standbys))
        world.latest += 1
        model = JobModel(world.latest, FrozenMap(containers))
        world.models[model.version] = model
        gaining = gaining_processors(before, model) if before and says_gaining else None
        world.manifests[model.version] = (
            (before.version, losing_processors(before, model), gaining)
            if before
            else (None, frozenset(), None)
        )
        world.barriers[model.version] = BarrierState.NEW
        if announce:
            self.notify(VersionAnnounced(model.version))

    @rule(names=st.lists(st.sampled_from([t.name for t in POOL]), unique=True, max_size=4))
    def settle_on(self, names: list[str]) -> None:
        """A version naming the member, announced and decided DONE if it joined: so that runs
        often get a member running tasks (the state the rules below start from)."""
        self.publish(names, True, False, False, 1, True)
        self.decide_latest(True)

    @rule(says_gaining=st.booleans(), announce=st.booleans())
    def publish_keeping_mine(self, says_gaining: bool, announce: bool) -> None:
        """Another processor comes or goes; the member's container stays as it is in force
        (most members of a large job, after one death): it reads no container if told so."""
        world = self.world
        before = world.in_force()
        if before is None or ME not in before.containers:
            return
        others = [] if "p-3" in before.containers else ["p-3"]
        containers = {ME: before.containers[ME]}
        containers.update({pid: ContainerModel(pid, "h3", FrozenMap()) for pid in others})
        world.latest += 1
        model = JobModel(world.latest, FrozenMap(containers))
        world.models[model.version] = model
        gaining = gaining_processors(before, model) if says_gaining else None
        world.manifests[model.version] = (before.version, losing_processors(before, model), gaining)
        world.barriers[model.version] = BarrierState.NEW
        if announce:
            self.feed(VersionAnnounced(model.version))

    @rule()
    def announce_latest(self) -> None:
        self.notify(VersionAnnounced(self.world.latest or None))

    @rule(done=st.booleans())
    def decide_latest(self, done: bool) -> None:
        world = self.world
        version = world.latest
        if version == 0 or world.barriers.get(version) != BarrierState.NEW:
            return
        model = world.models[version]
        if done and ME in model.containers and ME not in world.joined.get(version, set()):
            return  # the leader cannot mark DONE before every named processor joined
        state = BarrierState.DONE if done else BarrierState.TIMED_OUT
        world.barriers[version] = state
        if done:  # the tasks the member does not keep are recorded at their new owners
            mine = model.containers[ME].tasks if ME in model.containers else {}
            for name in [n for n, owner in world.locality.items() if owner == ME]:
                if name not in mine:
                    world.locality[name] = "p-2"
        if version in self.watched:
            self.notify(BarrierDecided(version, state))

    @rule()
    def retention_removes_oldest(self) -> None:
        if len(self.world.models) > 1:
            oldest = min(self.world.models)
            in_force = self.world.in_force()
            if in_force is None or oldest != in_force.version:
                del self.world.models[oldest]

    @rule(dice=st.integers(0, 3))
    def store_fails_next(self, dice: int) -> None:
        self.fail_next = dice == 0  # rarer than the rest, so runs get far enough

    @precondition(lambda self: self.resync_pending and not self.suspended)
    @rule()
    def resync(self) -> None:
        self.resync_pending = False
        self.feed(ResyncDue())

    @rule(dice=st.integers(0, 3))
    def lose_session(self, dice: int) -> None:
        if dice:
            return
        self.connected = False
        self.registered = False
        self.suspended, self.deferred = False, []  # the old session's watches are gone
        self.feed(SessionLost())
        assert not self.running  # session loss stops everything at once

    @rule()
    def reconnect(self) -> None:
        self.connected = True
        self.suspended, deferred, self.deferred = False, self.deferred, []
        self.feed(Connected())
        for event in deferred:
            self.feed(event)

    @precondition(lambda self: self.machine.state not in (MemberState.CLOSED,))
    @rule()
    def connection_drops(self) -> None:
        self.suspended = True
        self.feed(ConnectionSuspended())

    @precondition(lambda self: self.fence_pending is not None)
    @rule()
    def fence_time_passes(self) -> None:
        suspension, self.fence_pending = self.fence_pending, None
        assert suspension is not None
        still_down = self.suspended and suspension == self.machine.suspension
        self.feed(FenceDue(suspension))
        if still_down:
            assert not self.running  # 7b: fenced before the server can expire the session

    @precondition(lambda self: self.machine.state != MemberState.CLOSED)
    @rule(dice=st.integers(0, 9))
    def shut_down(self, dice: int) -> None:
        if dice:
            return
        registered = self.registered
        self.feed(Shutdown())
        assert not self.running
        assert not self.registered or not registered

    # ---------------------------------------------------------------- invariants

    @invariant()
    def a_duplicate_runs_nothing(self) -> None:
        if self.machine.state in (MemberState.DUPLICATE, MemberState.REFUSED):
            assert not self.running and self.machine.target_version is None
        if self.refused:
            assert self.machine.state in (MemberState.REFUSED, MemberState.CLOSED)

    @invariant()
    def a_fenced_member_runs_nothing_until_the_session_is_back(self) -> None:
        if self.suspended and self.machine.fenced:
            assert not self.running

    @invariant()
    def keeps_the_standbys_of_the_version_it_runs(self) -> None:
        assert self.standbys == self.machine.standbys
        assert not set(self.standbys) & set(self.running)
        if self.machine.state in (MemberState.UNREGISTERED, MemberState.CLOSED):
            assert not self.standbys
        version = self.machine.standby_version
        if self.standbys and version is not None and version in self.world.models:
            assert self.world.barriers[version] == BarrierState.DONE
            assert self.standbys == dict(self.world.models[version].containers[ME].standby_tasks)

    @invariant()
    def runs_one_done_version(self) -> None:
        assert self.running == self.machine.running
        if self.running:
            version = self.running_version
            assert version is not None
            assert self.world.barriers[version] == BarrierState.DONE
            mine = self.world.models.get(version)
            if mine is not None:  # (retention may have removed a superseded model)
                assert set(self.running) <= set(mine.containers[ME].tasks)


def _task(name: str) -> TaskModel:
    return next(t for t in POOL if t.name == name)


TestMemberMachine = MemberHarness.TestCase


# ------------------------------------------------------------------------ examples


def _run(machine: MemberMachine, *events: MemberEvent) -> list[MemberAction]:
    actions: list[MemberAction] = []
    for event in events:
        actions += machine.handle(event)
    return actions


def _following(running: dict[str, TaskModel] | None = None, version: int = 1) -> MemberMachine:
    machine = MemberMachine(ME)
    _run(machine, Connected(), Registered("n"))
    machine.running = dict(running or {})
    machine.running_version = version if running else None
    machine.seen_version = version if running else -1
    return machine


def test_a_keeper_joins_before_reading_its_container() -> None:
    machine = _following({POOL[0].name: POOL[0]})
    actions = _run(machine, VersionAnnounced(2), ManifestRead(2, 1, frozenset({"p-2"})))
    assert actions == [ReadManifest(2), JoinBarrier(2, early=True), ReadContainer(2)]
    actions = machine.handle(ContainerRead(2, {POOL[0].name: POOL[0]}))
    assert actions == [WatchBarrier(2)]  # no second join, nothing stopped


def test_a_loser_stops_first_then_joins() -> None:
    machine = _following({POOL[0].name: POOL[0], POOL[1].name: POOL[1]})
    _run(machine, VersionAnnounced(2))
    actions = machine.handle(ManifestRead(2, 1, frozenset({ME})))
    assert actions == [ReadContainer(2)]
    actions = machine.handle(ContainerRead(2, {POOL[0].name: POOL[0]}))
    assert actions == [
        StopTasks(1, {POOL[1].name: POOL[1]}, "moved"),
        JoinBarrier(2, early=False),
        WatchBarrier(2),
    ]


def test_a_member_behind_the_base_reads_first() -> None:
    machine = _following({POOL[0].name: POOL[0]}, version=1)
    actions = _run(machine, VersionAnnounced(3), ManifestRead(3, 2, frozenset()))
    assert JoinBarrier(3, early=True) not in actions


def test_done_starts_the_new_tasks_and_writes_locality_timed_out_starts_nothing() -> None:
    machine = _following()
    mine = {POOL[2].name: POOL[2]}
    _run(machine, VersionAnnounced(1), ManifestRead(1, None, frozenset()), ContainerRead(1, mine))
    assert machine.handle(BarrierDecided(1, BarrierState.NEW)) == []
    assert machine.handle(BarrierDecided(1, BarrierState.DONE)) == [
        StartTasks(1, mine, mine),
        WriteLocality(1, (POOL[2].name,)),
    ]
    _run(machine, VersionAnnounced(2), ManifestRead(2, 1, frozenset()), ContainerRead(2, mine))
    assert machine.handle(BarrierDecided(2, BarrierState.TIMED_OUT)) == []
    assert machine.running == mine and machine.running_version == 1


def test_a_store_error_resyncs_from_the_latest_version_even_the_same_one() -> None:
    machine = _following()
    _run(machine, VersionAnnounced(4))
    assert machine.handle(StoreFailed("connection loss")) == [ScheduleResync(1.0)]
    assert machine.handle(ResyncDue()) == [FetchLatestVersion()]
    assert machine.handle(VersionAnnounced(4)) == [ReadManifest(4)]


def test_session_loss_stops_everything_and_registers_again() -> None:
    machine = _following({POOL[0].name: POOL[0]})
    assert machine.handle(SessionLost()) == [StopTasks(1, {POOL[0].name: POOL[0]}, "session lost")]
    assert machine.state == MemberState.UNREGISTERED
    assert machine.handle(Connected()) == [Register()]


def test_shutdown_stops_and_unregisters() -> None:
    machine = _following({POOL[0].name: POOL[0]})
    assert machine.handle(Shutdown()) == [
        StopTasks(1, {POOL[0].name: POOL[0]}, "shutdown"),
        Unregister(),
    ]
    assert machine.handle(VersionAnnounced(9)) == []  # closed: nothing more


def test_a_duplicate_waits_its_patience_then_gives_up_for_good() -> None:
    machine = MemberMachine(ME, patience=2)
    older = "/processors/processor-0"
    assert machine.handle(Connected()) == [Register()]
    assert machine.handle(Registered("n", older)) == [ScheduleResync(1.0)]
    assert machine.state == MemberState.DUPLICATE
    assert machine.handle(VersionAnnounced(3)) == []  # follows nothing meanwhile
    assert _run(machine, ResyncDue()) == [CheckRegistration()]
    assert machine.handle(Registered("n", older)) == [ScheduleResync(1.0)]
    _run(machine, ResyncDue())
    assert machine.handle(Registered("n", older)) == [
        Unregister(),
        RegistrationRefused("n", older),
    ]
    assert machine.state == MemberState.REFUSED
    assert _run(machine, SessionLost(), Connected(), VersionAnnounced(4)) == []
    assert machine.handle(Shutdown()) == []  # already unregistered
    assert machine.state == MemberState.CLOSED


def test_a_restarted_processor_gets_in_once_its_old_registration_expires() -> None:
    machine = MemberMachine(ME, patience=5)
    _run(machine, Connected(), Registered("n", "/processors/processor-0"), ResyncDue())
    assert machine.handle(Registered("n")) == [WatchVersions()]
    assert machine.state == MemberState.FOLLOWING


@pytest.mark.parametrize("state", list(MemberState))
def test_every_state_has_a_way_out_or_is_closed(state: MemberState) -> None:
    outs = {new for (old, _), news in TRANSITIONS.items() if old == state for new in news}
    assert state == MemberState.CLOSED or outs - {state}


def test_standbys_follow_the_done_version_and_stop_with_the_tasks() -> None:
    machine = _following()
    mine, spare = {POOL[0].name: POOL[0]}, {POOL[1].name: POOL[1], POOL[2].name: POOL[2]}
    read = ContainerRead(1, mine, spare)
    _run(machine, VersionAnnounced(1), ManifestRead(1, None, frozenset()), read)
    assert machine.handle(BarrierDecided(1, BarrierState.DONE)) == [
        StartTasks(1, mine, mine),
        WriteLocality(1, (POOL[0].name,)),
        StartStandbys(1, spare),
    ]
    # v2 promotes the standby of Partition 1 to active here and drops Partition 2's.
    both = {**mine, POOL[1].name: POOL[1]}
    read = ContainerRead(2, both, {POOL[3].name: POOL[3]})
    _run(machine, VersionAnnounced(2), ManifestRead(2, 1, frozenset({ME})), read)
    assert machine.handle(BarrierDecided(2, BarrierState.DONE)) == [
        StopStandbys(1, spare, "dropped"),
        StartTasks(2, {POOL[1].name: POOL[1]}, both),
        WriteLocality(2, (POOL[1].name,)),  # only the new task's: the other's is already its own
        StartStandbys(2, {POOL[3].name: POOL[3]}),
    ]
    assert machine.handle(SessionLost()) == [
        StopStandbys(2, {POOL[3].name: POOL[3]}, "session lost"),
        StopTasks(2, both, "session lost"),
    ]
    assert machine.standbys == {} and machine.running == {}


# ------------------------------------------------- reading nothing, writing only what is new


def _done_on(
    machine: MemberMachine, version: int, mine: dict[str, TaskModel]
) -> list[MemberAction]:
    """Follow ``version`` (read with no manifest hints) to DONE; the actions of the DONE."""
    _run(machine, VersionAnnounced(version), ManifestRead(version, None, frozenset()))
    _run(machine, ContainerRead(version, mine))
    return machine.handle(BarrierDecided(version, BarrierState.DONE))


def test_an_unchanged_member_reads_no_container_and_writes_no_locality() -> None:
    machine = _following()
    mine = {POOL[0].name: POOL[0], POOL[1].name: POOL[1]}
    assert _done_on(machine, 1, mine)[-1] == WriteLocality(1, tuple(mine))  # all, the first time
    # v2 (one processor died, p-3 took its tasks): the member neither loses nor gains.
    actions = _run(
        machine, VersionAnnounced(2), ManifestRead(2, 1, frozenset({"p-9"}), frozenset({"p-3"}))
    )
    assert actions == [ReadManifest(2), JoinBarrier(2, early=True), WatchBarrier(2)]
    assert machine.state == MemberState.JOINED
    assert machine.handle(BarrierDecided(2, BarrierState.DONE)) == [StartTasks(2, {}, mine)]
    assert machine.running == mine and machine.running_version == 2


def test_a_gainer_or_a_manifest_that_does_not_say_reads_its_container() -> None:
    for gaining in (frozenset({ME}), None):
        machine = _following()
        _done_on(machine, 1, {POOL[0].name: POOL[0]})
        actions = _run(machine, VersionAnnounced(2), ManifestRead(2, 1, frozenset(), gaining))
        assert actions == [ReadManifest(2), JoinBarrier(2, early=True), ReadContainer(2)]


def test_locality_is_written_for_the_new_tasks_only_unless_a_store_call_failed() -> None:
    machine = _following()
    one = {POOL[0].name: POOL[0]}
    two = {**one, POOL[1].name: POOL[1]}
    assert _done_on(machine, 1, one)[-1] == WriteLocality(1, (POOL[0].name,))
    assert _done_on(machine, 2, two)[-1] == WriteLocality(2, (POOL[1].name,))  # only the new
    # The write failed (the adapter reports StoreFailed): the next DONE writes every task.
    assert machine.handle(StoreFailed("connection loss")) == [ScheduleResync(1.0)]
    _run(machine, ResyncDue())
    assert _done_on(machine, 2, two) == [StartTasks(2, {}, two), WriteLocality(2, tuple(two))]


def test_a_member_that_stopped_a_task_since_its_done_reads_its_container_again() -> None:
    machine = _following()
    both = {POOL[0].name: POOL[0], POOL[1].name: POOL[1]}
    _done_on(machine, 1, both)
    # v2 takes POOL[1] away, then times out: the member runs part of v1's container.
    _run(machine, VersionAnnounced(2), ManifestRead(2, 1, frozenset({ME}), frozenset()))
    _run(machine, ContainerRead(2, {POOL[0].name: POOL[0]}))
    machine.handle(BarrierDecided(2, BarrierState.TIMED_OUT))
    assert machine.running == {POOL[0].name: POOL[0]} and machine.running_version == 1
    # v3, planned against v1 again, gives it v1's container: it must read it to get POOL[1].
    actions = _run(machine, VersionAnnounced(3), ManifestRead(3, 1, frozenset(), frozenset()))
    assert actions == [ReadManifest(3), JoinBarrier(3, early=True), ReadContainer(3)]
    machine.handle(ContainerRead(3, both))
    started = machine.handle(BarrierDecided(3, BarrierState.DONE))
    assert started[0] == StartTasks(3, {POOL[1].name: POOL[1]}, both)
