"""The vocabulary of the leader machine (:mod:`coordinator.protocol.leader`): its settings, the
events the adapter feeds it and the actions it returns. Plain frozen data, no behaviour."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from coordinator.protocol.leader_trigger import RebalanceCause, Trigger
from groupers import GrouperMetadata
from metadata.model import BarrierState, JobModel, TaskModel

__all__ = [
    "Action",
    "BarrierUpdated",
    "CoordinatorSettings",
    "Event",
    "GrouperFailed",
    "GrouperFinished",
    "LeadershipGained",
    "LeaderState",
    "LeadershipLost",
    "LocalityChanged",
    "MarkBarrier",
    "MembershipChanged",
    "ModelInForce",
    "Published",
    "PublishJobModel",
    "RebalanceSkipped",
    "RemoveOldVersions",
    "RunGrouper",
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


# ------------------------------------------------------------------------------------ events


@dataclass(frozen=True)
class LeadershipGained:
    """This replica leads. ``latest`` is the newest published model (any barrier state),
    ``latest_barrier`` its barrier state, ``in_force`` the newest model whose barrier is DONE."""

    now: float
    processors: Mapping[str, str]
    task_locality: Mapping[str, str]
    latest: JobModel | None = None
    latest_barrier: BarrierState | None = None
    latest_participants: frozenset[str] = frozenset()
    in_force: JobModel | None = None


@dataclass(frozen=True)
class LeadershipLost:
    now: float


@dataclass(frozen=True)
class MembershipChanged:
    now: float
    processors: Mapping[str, str]  # live processor id -> location id


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
)

# ----------------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class RunGrouper:
    request: int
    tasks: tuple[TaskModel, ...]
    metadata: GrouperMetadata
    trigger: Trigger | None = None  # why it runs (coordinator.protocol.leader_trigger)


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
class ScheduleWakeup:
    at: float


@dataclass(frozen=True)
class GrouperFailed:
    request: int
    reason: str


@dataclass(frozen=True)
class RebalanceSkipped:
    reason: str


Action = (
    RunGrouper
    | PublishJobModel
    | MarkBarrier
    | RemoveOldVersions
    | ModelInForce
    | ScheduleWakeup
    | GrouperFailed
    | RebalanceSkipped
)
