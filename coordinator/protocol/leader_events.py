"""The vocabulary of the leader machine (:mod:`coordinator.protocol.leader`): its states and the
table of their transitions, its settings, the events the adapter feeds it and the actions it
returns. Plain frozen data, no behaviour."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from coordinator.protocol.leader_recovery import Recovery, Repair, Unreadable
from coordinator.protocol.leader_trigger import RebalanceCause, Trigger
from groupers import GrouperMetadata
from metadata.model import BarrierState, JobModel, TaskModel

__all__ = [
    "TRANSITIONS",
    "Action",
    "BarrierUpdated",
    "CoordinatorSettings",
    "Event",
    "GrouperFailed",
    "GrouperFinished",
    "InForceUnreadable",
    "LeadershipGained",
    "LeaderState",
    "LeadershipLost",
    "LocalityChanged",
    "MarkBarrier",
    "MembershipChanged",
    "ModelInForce",
    "Published",
    "ModelRefused",
    "ProcessorBenched",
    "ProcessorReadmitted",
    "PublishJobModel",
    "RebalanceSkipped",
    "RemoveOldVersions",
    "RecheckFinished",
    "RunGrouper",
    "RunRecheck",
    "ScheduleWakeup",
    "TimePassed",
]


class LeaderState(StrEnum):
    FOLLOWER = "FOLLOWER"  # not leading: decides nothing
    IDLE = "IDLE"  # leading; the model in force matches the live processors
    DEBOUNCING = "DEBOUNCING"  # membership changed: waiting for quiet, the cap or a grace period
    GROUPING = "GROUPING"  # the grouper runs
    BARRIER = "BARRIER"  # a new version is published; waiting for its barrier


@dataclass(frozen=True)
class CoordinatorSettings:
    debounce_s: float = 2.0
    debounce_max_s: float = 10.0
    barrier_timeout_s: float = 30.0
    processor_grace_s: float = 0.0
    retention: int = 10  # job-model versions (and barriers) kept once a barrier is decided
    # A model that takes away every task of the model in force is refused unless this is set.
    allow_dropping_all_tasks: bool = False
    # A processor that misses a barrier is left out of the models this long (0: never).
    exclusion_s: float = 300.0
    # While the model in force is not the grouper's fixed point (warm-ups pending, moves held
    # back), rebalance again this often (0: never; see coordinator.protocol.leader_probing).
    probing_interval_s: float = 0.0


# ------------------------------------------------------------------------------------ events


@dataclass(frozen=True)
class LeadershipGained:
    """This replica leads. ``latest`` is the newest published model (any barrier state),
    ``latest_barrier`` its barrier state, ``in_force`` the newest model whose barrier is DONE
    that reads clean. ``unreadable``: what the adapter could not read (the version pointer, the
    latest version, newer DONE versions: :mod:`coordinator.protocol.leader_recovery`);
    ``version_floor``: the highest version number stored (new versions go above it);
    ``abandoned``: versions whose barrier is NEW but whose model could not be read (nobody can
    see them through: the leader times them out)."""

    now: float
    processors: Mapping[str, str]
    task_locality: Mapping[str, str]
    latest: JobModel | None = None
    latest_barrier: BarrierState | None = None
    latest_participants: frozenset[str] = frozenset()
    in_force: JobModel | None = None
    capacity: Mapping[str, int] = field(default_factory=dict)  # live processor id -> capacity
    # The job's task names now (None: not known). A model in force over other tasks (a Kafka
    # partition added, an input changed) is replaced, as a membership change would be.
    tasks: frozenset[str] | None = None
    unreadable: tuple[Unreadable, ...] = ()
    version_floor: int = 0
    abandoned: tuple[int, ...] = ()


@dataclass(frozen=True)
class LeadershipLost:
    now: float


@dataclass(frozen=True)
class MembershipChanged:
    now: float
    processors: Mapping[str, str]  # live processor id -> location id
    capacity: Mapping[str, int] = field(default_factory=dict)  # absent: 1


@dataclass(frozen=True)
class BarrierUpdated:
    now: float
    version: int
    participants: frozenset[str]


@dataclass(frozen=True)
class LocalityChanged:
    now: float
    task_locality: Mapping[str, str]


@dataclass(frozen=True)
class TimePassed:
    now: float


@dataclass(frozen=True)
class GrouperFinished:
    now: float
    request: int
    containers: object = None  # the grouper's answer (checked here), or None with ``error``
    error: str | None = None


@dataclass(frozen=True)
class RecheckFinished:
    """The grouper's answer to :class:`RunRecheck` for the model ``version`` (None: it failed),
    and the question it was asked (worked out by the adapter; None: not asked), so that the
    machine does not work it out again (seconds at 1,000,000 tasks)."""

    now: float
    version: int
    answer: object = None
    question: GrouperMetadata | None = None


@dataclass(frozen=True)
class Published:
    """The adapter has published ``version`` (its :class:`PublishJobModel` completed): the
    barrier deadline counts from ``now``, so a slow publish does not eat the barrier timeout."""

    now: float
    version: int


Event = (
    LeadershipGained
    | LeadershipLost
    | MembershipChanged
    | BarrierUpdated
    | LocalityChanged
    | TimePassed
    | GrouperFinished
    | Published
    | RecheckFinished
)

# ----------------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class RunGrouper:
    request: int
    tasks: tuple[TaskModel, ...]
    metadata: GrouperMetadata
    trigger: Trigger | None = None  # why it runs (coordinator.protocol.leader_trigger)


@dataclass(frozen=True)
class RunRecheck:
    """Is ``model``, now in force and the answer to ``metadata``, the grouper's fixed point?
    Run the grouper on the question
    (:func:`~coordinator.protocol.leader_probing.recheck_metadata` of both) and report
    :class:`RecheckFinished`. Asked once the barrier is DONE (or when an answer equals the
    model in force), so it never delays a publish or a barrier: the adapter works the question
    out when it carries the recheck out, beside its loop, after the actions before it (at
    1,000,000 tasks that takes seconds, and a question worked out by the machine held back the
    DONE it decided). A :class:`RunGrouper` asked meanwhile ends it: no answer comes."""

    tasks: tuple[TaskModel, ...]
    model: JobModel
    metadata: GrouperMetadata

    @property
    def version(self) -> int:
        return self.model.version


@dataclass(frozen=True)
class PublishJobModel:
    model: JobModel
    participants: frozenset[str]
    base: int | None  # the version in force it was planned against
    losing: frozenset[str]  # processors of ``base`` that lose a task (the others join early)
    moved: int  # tasks that changed processor against the model in force
    locality_kept: int  # tasks placed at the location they last ran at
    with_locality: int  # tasks that had a recorded location
    cause: RebalanceCause | None = None  # why, and the phases before it (rebalance history)
    #: processors given a task against ``base`` (None: not said; the others read nothing)
    gaining: frozenset[str] | None = None
    #: it replaces a model in force that could not be read (no ``base``; the version pointer
    #: may be overwritten even if it is corrupt: coordinator.protocol.leader_recovery)
    repair: bool = False


@dataclass(frozen=True)
class MarkBarrier:
    version: int
    state: BarrierState
    duration_s: float  # from publish to this outcome


@dataclass(frozen=True)
class RemoveOldVersions:
    """Retention, once a barrier is decided (not right after a publish, where the deletes would
    compete with the processors reading the new version): versions below ``below`` go."""

    below: int


@dataclass(frozen=True)
class ModelInForce:
    model: JobModel


@dataclass(frozen=True)
class InForceUnreadable:
    """(Told once, on gaining leadership) the model in force, or the version pointer, could not
    be read: the leader recovers as ``recovery`` says (from version ``fallback``, or from
    scratch) and publishes a new version; ``note`` says it in one line."""

    unreadable: tuple[Unreadable, ...]
    recovery: Recovery
    fallback: int | None
    note: str

    @classmethod
    def of(cls, repair: Repair) -> InForceUnreadable:
        return cls(repair.unreadable, repair.recovery, repair.fallback, repair.note)


@dataclass(frozen=True)
class ScheduleWakeup:
    at: float


@dataclass(frozen=True)
class GrouperFailed:
    request: int
    reason: str


@dataclass(frozen=True)
class RebalanceSkipped:
    reason: str


@dataclass(frozen=True)
class ModelRefused:
    """A valid answer the machine will not publish (it would stop every running task)."""

    request: int
    reason: str


@dataclass(frozen=True)
class ProcessorBenched:
    """``processor_id`` missed barrier ``version``: left out of the models until ``until``."""

    processor_id: str
    version: int
    misses: int
    until: float


@dataclass(frozen=True)
class ProcessorReadmitted:
    processor_id: str
    reason: str


Action = (
    RunGrouper
    | RunRecheck
    | PublishJobModel
    | MarkBarrier
    | RemoveOldVersions
    | ModelInForce
    | ScheduleWakeup
    | GrouperFailed
    | RebalanceSkipped
    | ModelRefused
    | ProcessorBenched
    | ProcessorReadmitted
    | InForceUnreadable
)


# --------------------------------------------------------------------------- transitions

L = LeaderState
_LEADING = (L.IDLE, L.DEBOUNCING, L.GROUPING, L.BARRIER)
_AFTER_TICK = frozenset({L.IDLE, L.DEBOUNCING, L.GROUPING})
_PROBE = frozenset({L.IDLE, L.GROUPING})

#: (state, event type) -> the states the event may lead to. Events a follower gets are ignored.
#: A benched processor let back in (cool-down over, registered again) makes an IDLE job dirty:
#: TimePassed and MembershipChanged may lead from IDLE to DEBOUNCING or GROUPING. A probing
#: rebalance comes due at any tick of an IDLE leader whose model in force is not settled:
#: every event that ticks may lead from IDLE to GROUPING.
TRANSITIONS: dict[tuple[LeaderState, type[Event]], frozenset[LeaderState]] = {
    **{(s, LeadershipGained): frozenset(_LEADING) for s in (L.FOLLOWER, *_LEADING)},
    **{(s, LeadershipLost): frozenset({L.FOLLOWER}) for s in (L.FOLLOWER, *_LEADING)},
    **{(s, LocalityChanged): frozenset({s}) for s in _LEADING},
    **{
        (s, e): _AFTER_TICK for s in (L.IDLE, L.DEBOUNCING) for e in (MembershipChanged, TimePassed)
    },
    **{(L.GROUPING, e): frozenset({L.GROUPING}) for e in (MembershipChanged, TimePassed)},
    (L.GROUPING, GrouperFinished): frozenset({*_AFTER_TICK, L.BARRIER}),
    **{(s, BarrierUpdated): frozenset({s}) for s in (L.DEBOUNCING, L.GROUPING)},
    **{(s, GrouperFinished): frozenset({s}) for s in (L.DEBOUNCING, L.BARRIER)},
    **{(s, Published): frozenset({s}) for s in (L.DEBOUNCING, L.GROUPING)},
    **{(L.IDLE, e): _PROBE for e in (BarrierUpdated, GrouperFinished, Published)},
    (L.BARRIER, Published): frozenset({*_AFTER_TICK, L.BARRIER}),
    **{
        (L.BARRIER, e): frozenset({*_AFTER_TICK, L.BARRIER})
        for e in (MembershipChanged, TimePassed, BarrierUpdated)
    },
    # A recheck's answer ticks like TimePassed (an IDLE model found unsettled may probe at once).
    **{(s, RecheckFinished): frozenset({s}) for s in (L.FOLLOWER, L.GROUPING)},
    **{(s, RecheckFinished): _AFTER_TICK for s in (L.IDLE, L.DEBOUNCING)},
    (L.BARRIER, RecheckFinished): frozenset({*_AFTER_TICK, L.BARRIER}),
}
