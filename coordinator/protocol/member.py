"""The member's (processor's) side of the barrier protocol, as a state machine with no I/O.

Theory of operation
===================

One :class:`MemberMachine` is one processor of a job. Like h11's ``_state.py`` (and the leader's
machine in :mod:`coordinator.protocol.leader`), it never touches ZooKeeper, a clock or a thread:
an adapter (:mod:`coordinator.member.group`, for one processor or for the many executors of a
Spark driver) feeds it **events** and carries out the **actions** it returns. The rules of
DESIGN.md "Data flow" and invariants I3 and I4 all live here:

1. **Register.** On :class:`Connected` an unregistered member asks to :class:`Register` (an
   ephemeral node under ``processors/``); :class:`Registered` makes it follow the job models
   (:class:`WatchVersions`).
1b. **One live registration per processor id (I3).** :class:`Registered` says whether an older
   live registration (another session) holds the same processor id. The older one wins, as the
   leader's view of the registrations says: the newer member follows nothing, joins no barrier
   and starts no task (DUPLICATE). It looks again every :data:`RECHECK_DELAY_S`
   (:class:`CheckRegistration`), ``patience`` times, so that a processor restarted before its
   previous session expired gets in once that registration goes; an older registration still
   there after that is live: the member removes its own (:class:`Unregister`) and gives up
   (:class:`RegistrationRefused`, state REFUSED, for good). A running member never reads the
   registrations again, so a newer duplicate can never displace it.
2. **Follow a new version.** :class:`VersionAnnounced` ``v`` newer than any seen: read the
   manifest of ``v`` (:class:`ReadManifest`). A version not newer is ignored.
3. **Early join.** When the manifest says the member keeps every task it runs (the rule
   :func:`~coordinator.protocol.rules.keeps_everything`: the model was planned against the
   version the member runs and the member is not among the processors that lose a task), there
   is nothing to stop: it joins barrier ``v`` first (:class:`JoinBarrier`) and reads its
   container while the others join.
3b. **Nothing to read.** When the manifest also names who gains a task
   (:func:`~coordinator.protocol.rules.container_unchanged`: the member is in neither list) and
   the member still runs all of ``base``'s container, its container in ``v`` is what it runs: it
   joins early and reads no container at all (most members of a large job, after one death).
4. **Stop what you lose, then join.** With its container read (:class:`ContainerRead`), the
   member stops every running task that ``v`` takes from it or changes (:class:`StopTasks`), then
   joins barrier ``v`` (unless it did so early) and waits for its decision
   (:class:`WatchBarrier`). A member that ``v`` does not name joins nothing.
5. **Start on DONE.** When barrier ``v`` is DONE the member starts the tasks new to it
   (:class:`StartTasks`) and writes their locality (:class:`WriteLocality`, I4): the tasks new to
   it, or all of its tasks after it (re)registered or a store call failed (the locality of the
   tasks it kept is already its own). TIMED_OUT starts nothing: the leader generates the next
   version at once.
5b. **Standby replicas follow the same DONE.** The standbys ``v`` gives the member (its
   container's ``standby_tasks``) replace the ones it kept: on DONE it first stops those ``v``
   drops or promotes to active here (:class:`StopStandbys`), then starts its new tasks, then the
   new standbys (:class:`StartStandbys`). A member that ``v`` does not name stops them at once.
   A standby is never a running task (the grouper never puts both copies on one processor).
6. **Retry a failed step.** A store error while following (:class:`StoreFailed`) forgets what was
   seen and asks for a resync after a pause (:class:`ScheduleResync`); :class:`ResyncDue` reads
   the latest version again (:class:`FetchLatestVersion`), even the one that just failed.
7. **Session loss stops everything.** :class:`SessionLost` means the registration and the
   barrier membership are gone and the leader may give the tasks to others: every running task is
   stopped at once and the member registers again on the next :class:`Connected`.
7b. **Fence before the session can expire.** A member learns of its session's expiry only when it
   reaches a server again, while the server may expire it - and the leader give its tasks away -
   during the disconnection. So on :class:`ConnectionSuspended` the member asks for a fence
   (:class:`ScheduleFence`, ``fence_after_s``); if the connection is still down when it is due
   (:class:`FenceDue`), every running task stops ("fenced"). Kazoo reports a suspension at most
   2/3 of the session timeout after it last heard from the server, which expires the session at
   the earliest a full timeout after it last heard from the member: a fence a quarter of the
   timeout after the suspension comes first (:func:`fence_delay`). When the same session is back
   (:class:`Connected` while registered), a fenced member forgets what it followed and reads the
   latest version again (it rejoins its barrier and restarts its tasks on DONE, as after a store
   error); one that was not fenced carries on.
8. **Shut down.** :class:`Shutdown` stops every task and unregisters; the machine is then CLOSED.

Hence tasks run only under a DONE version, the running set changes only when a barrier is DONE
(a member never runs two versions at once, I3), and locality is written after DONE by the owner
(I4). ``TRANSITIONS`` below is the whole table of states; an event a state does not list is
ignored (a late answer to a read that a newer version superseded, a barrier the member left).
The handlers of steps 2 to 5b are in :mod:`coordinator.protocol.member_following`, a mixin of
:class:`MemberMachine`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.protocol.member_events import (
    BarrierDecided,
    CheckRegistration,
    Connected,
    ConnectionSuspended,
    ContainerRead,
    FenceDue,
    FetchLatestVersion,
    ManifestMissing,
    ManifestRead,
    MemberAction,
    MemberEvent,
    MemberState,
    Register,
    Registered,
    RegistrationRefused,
    ResyncDue,
    ScheduleFence,
    ScheduleResync,
    SessionLost,
    Shutdown,
    StopTasks,
    StoreFailed,
    Unregister,
    VersionAnnounced,
    WatchVersions,
)
from coordinator.protocol.member_following import UNEXPECTED_LOSS, MemberFollowing
from metadata.model import TaskModel

__all__ = [
    "FENCED",
    "RECHECK_DELAY_S",
    "RESYNC_DELAY_S",
    "TRANSITIONS",
    "UNEXPECTED_LOSS",
    "MemberMachine",
    "fence_delay",
]

#: How long a member waits before it resyncs after a store error (seconds).
RESYNC_DELAY_S = 1.0
#: How long a duplicate registration waits between two looks at the older one (seconds).
RECHECK_DELAY_S = 1.0
#: The reason of a stop by the fence (7b).
FENCED = "fenced: disconnected, the session may expire"


def fence_delay(session_timeout_s: float) -> float:
    """How long after a suspension a member stops its tasks (7b): a quarter of the timeout."""
    return session_timeout_s / 4


# ------------------------------------------------------------------------------------ table

S = MemberState
_ANY_LIVE = (S.REGISTERING, S.DUPLICATE, S.FOLLOWING, S.READING, S.JOINED)
_FOLLOWS = (S.FOLLOWING, S.READING, S.JOINED)
_REGISTERED = frozenset({S.FOLLOWING, S.DUPLICATE, S.REFUSED})

#: (state, event type) -> the states the handler may move to. An event a state does not list
#: is ignored. The stateful test checks every transition it sees against this table.
TRANSITIONS: dict[tuple[MemberState, type[MemberEvent]], frozenset[MemberState]] = {
    (S.UNREGISTERED, Connected): frozenset({S.REGISTERING}),
    (S.REGISTERING, Registered): _REGISTERED,
    (S.DUPLICATE, Registered): _REGISTERED,
    (S.DUPLICATE, ResyncDue): frozenset({S.DUPLICATE}),
    (S.DUPLICATE, StoreFailed): frozenset({S.DUPLICATE}),
    **{(s, VersionAnnounced): frozenset({s, S.READING}) for s in _FOLLOWS},
    (S.READING, ManifestRead): frozenset({S.READING, S.JOINED}),
    (S.READING, ManifestMissing): frozenset({S.FOLLOWING}),
    (S.READING, ContainerRead): frozenset({S.FOLLOWING, S.JOINED}),
    (S.JOINED, BarrierDecided): frozenset({S.JOINED, S.FOLLOWING}),
    (S.REGISTERING, StoreFailed): frozenset({S.UNREGISTERED}),
    **{(s, StoreFailed): frozenset({S.FOLLOWING}) for s in _FOLLOWS},
    (S.UNREGISTERED, ResyncDue): frozenset({S.REGISTERING}),
    **{(s, ResyncDue): frozenset({s}) for s in _FOLLOWS},
    **{(s, SessionLost): frozenset({S.UNREGISTERED}) for s in (S.UNREGISTERED, *_ANY_LIVE)},
    **{(s, ConnectionSuspended): frozenset({s}) for s in _ANY_LIVE},
    **{(s, FenceDue): frozenset({s}) for s in _ANY_LIVE},
    (S.REGISTERING, Connected): frozenset({S.REGISTERING}),
    (S.DUPLICATE, Connected): frozenset({S.DUPLICATE}),
    **{(s, Connected): frozenset({s, S.FOLLOWING}) for s in _FOLLOWS},
    **{(s, Shutdown): frozenset({S.CLOSED}) for s in (S.UNREGISTERED, S.REFUSED, *_ANY_LIVE)},
}


# ---------------------------------------------------------------------------------- machine


@dataclass
class MemberMachine(MemberFollowing):
    """One processor's member role: ``handle(event) -> list[MemberAction]`` (module docstring)."""

    processor_id: str
    patience: int = 0  # looks at an older duplicate registration before giving up (1b)
    state: MemberState = MemberState.UNREGISTERED
    running: dict[str, TaskModel] = field(default_factory=dict)
    running_version: int | None = None
    seen_version: int = -1  # the newest version followed (or -1: follow whatever is latest)
    reading: int | None = None  # the version being read (READING)
    joined_early: bool = False
    target: dict[str, TaskModel] = field(default_factory=dict)  # v's tasks (JOINED)
    target_version: int | None = None
    standbys: dict[str, TaskModel] = field(default_factory=dict)  # replicas kept warm here
    standby_version: int | None = None
    target_standbys: dict[str, TaskModel] = field(default_factory=dict)  # v's standbys
    checks_left: int = 0  # looks left at an older duplicate registration (DUPLICATE)
    fence_after_s: float | None = None  # None: never fence (7b)
    suspension: int = 0  # how many suspensions so far (names the fence that is due)
    suspended: bool = False
    fenced: bool = False  # stopped by the fence; resyncs when the session is back
    whole: bool = False  # ``running`` is all of ``running_version``'s container (none stopped)
    locate_all: bool = True  # write every task's locality at the next DONE, not only new ones

    def handle(self, event: MemberEvent) -> list[MemberAction]:
        allowed = TRANSITIONS.get((self.state, type(event)))
        if allowed is None:
            return []  # not an event for this state (late or superseded): ignore it
        before = self.state
        actions: list[MemberAction] = getattr(self, _HANDLER_NAMES[type(event)])(event)
        if self.state not in allowed:
            raise AssertionError(f"{before} --{type(event).__name__}--> {self.state}")
        return actions

    # ------------------------------------------------------------------- registration

    def _connected(self, _event: Connected) -> list[MemberAction]:
        self.suspended = False
        if self.state is S.UNREGISTERED:
            self.fenced = False
            self.state = S.REGISTERING
            self.checks_left = self.patience
            return [Register()]
        if not self.fenced:
            return []  # the same session is back and nothing was stopped: carry on
        self.fenced = False
        self._forget()  # read the latest again: rejoin, restart on DONE (7b)
        self.state = S.FOLLOWING if self.state in _FOLLOWS else self.state
        return [FetchLatestVersion()] if self.state is S.FOLLOWING else []

    def _registered(self, event: Registered) -> list[MemberAction]:
        if event.duplicate_of is None:
            self.state = S.FOLLOWING
            return [WatchVersions()]
        if self.checks_left > 0:  # maybe our own previous session's, about to expire
            self.checks_left -= 1
            self.state = S.DUPLICATE
            return [ScheduleResync(RECHECK_DELAY_S)]
        self.state = S.REFUSED  # the older registration is live: it wins, for good
        return [Unregister(), RegistrationRefused(event.node, event.duplicate_of)]

    def _suspended(self, _event: ConnectionSuspended) -> list[MemberAction]:
        if self.fence_after_s is None or self.suspended:
            return []
        self.suspended = True
        self.suspension += 1
        return [ScheduleFence(self.fence_after_s, self.suspension)]

    def _fence_due(self, event: FenceDue) -> list[MemberAction]:
        if not self.suspended or event.suspension != self.suspension:
            return []  # connected again in time (or an older suspension's fence)
        self.fenced = True
        return self._stop_all(FENCED)

    def _session_lost(self, _event: SessionLost) -> list[MemberAction]:
        actions = self._stop_all("session lost")
        self._forget()
        self.state = S.UNREGISTERED
        return actions

    def _shutdown(self, _event: Shutdown) -> list[MemberAction]:
        actions = self._stop_all("shutdown")
        registered = self.state not in (S.UNREGISTERED, S.REFUSED)
        self._forget()
        self.state = S.CLOSED
        return [*actions, Unregister()] if registered else actions

    # ------------------------------------------------------------------- failures

    def _store_failed(self, _event: StoreFailed) -> list[MemberAction]:
        if self.state is S.DUPLICATE:
            return [ScheduleResync(RECHECK_DELAY_S)]  # look again later
        registering = self.state is S.REGISTERING
        self._forget()  # follow the latest again, even the version that failed
        self.state = S.UNREGISTERED if registering else S.FOLLOWING
        return [ScheduleResync(RESYNC_DELAY_S)]

    def _resync(self, _event: ResyncDue) -> list[MemberAction]:
        if self.state is S.UNREGISTERED:
            self.state = S.REGISTERING
            return [Register()]
        if self.state is S.DUPLICATE:
            return [CheckRegistration()]
        return [FetchLatestVersion()]

    # ------------------------------------------------------------------- helpers

    def _stop_all(self, reason: str) -> list[MemberAction]:
        standbys = self._stop_standbys(self.standbys, reason)
        if not self.running:
            return standbys
        stopping = StopTasks(self.running_version, dict(self.running), reason)
        self.running, self.whole = {}, False
        return [*standbys, stopping]

    def _forget(self) -> None:
        self.locate_all = True  # a failed call may have been a locality write
        self.seen_version = -1
        self.reading, self.joined_early = None, False
        self.target, self.target_version, self.target_standbys = {}, None, {}


_HANDLER_NAMES: dict[type[MemberEvent], str] = {
    Connected: "_connected",
    ConnectionSuspended: "_suspended",
    FenceDue: "_fence_due",
    Registered: "_registered",
    SessionLost: "_session_lost",
    Shutdown: "_shutdown",
    VersionAnnounced: "_version",
    ManifestRead: "_manifest",
    ManifestMissing: "_manifest_missing",
    ContainerRead: "_container",
    BarrierDecided: "_barrier",
    StoreFailed: "_store_failed",
    ResyncDue: "_resync",
}
