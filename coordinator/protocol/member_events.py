"""The vocabulary of the member machine (:mod:`coordinator.protocol.member`): its states, the
events an adapter feeds it and the actions it returns. Plain frozen data, no behaviour."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from metadata.model import BarrierState, TaskModel

__all__ = [
    "BarrierDecided",
    "CheckRegistration",
    "Connected",
    "ConnectionSuspended",
    "ContainerRead",
    "FenceDue",
    "FetchLatestVersion",
    "JoinBarrier",
    "ManifestMissing",
    "ManifestRead",
    "MemberAction",
    "MemberEvent",
    "MemberState",
    "ReadContainer",
    "ReadManifest",
    "Register",
    "Registered",
    "RegistrationRefused",
    "ResyncDue",
    "ScheduleFence",
    "ScheduleResync",
    "SessionLost",
    "Shutdown",
    "StartStandbys",
    "StartTasks",
    "StopStandbys",
    "StopTasks",
    "StoreFailed",
    "Unregister",
    "VersionAnnounced",
    "WatchBarrier",
    "WatchVersions",
    "WriteLocality",
]


class MemberState(StrEnum):
    UNREGISTERED = "UNREGISTERED"  # no live registration (start, or the session was lost)
    REGISTERING = "REGISTERING"  # asked to register, waiting for the node
    DUPLICATE = "DUPLICATE"  # registered, but an older live registration has the same id
    REFUSED = "REFUSED"  # gave up its registration to the older one with its id: runs nothing
    FOLLOWING = "FOLLOWING"  # registered; runs the tasks of the last DONE version it joined
    READING = "READING"  # reading the manifest and the container of a newer version
    JOINED = "JOINED"  # joined that version's barrier; waiting for DONE or TIMED_OUT
    CLOSED = "CLOSED"  # shut down


# ------------------------------------------------------------------------------------ events


@dataclass(frozen=True)
class Connected:
    """The ZooKeeper session is up: a first start, a new session after a loss, or the same
    session back after :class:`ConnectionSuspended`."""


@dataclass(frozen=True)
class ConnectionSuspended:
    """The connection to ZooKeeper dropped; the session may still be alive on the server."""


@dataclass(frozen=True)
class FenceDue:
    """The fence time of suspension number ``suspension`` has passed (see ScheduleFence)."""

    suspension: int


@dataclass(frozen=True)
class Registered:
    """The member's registration ``node`` exists (after Register, or after CheckRegistration).

    ``duplicate_of``: the node of an older live registration (another session) with the same
    processor id, if there is one; None when this registration is the only one (or the oldest).
    """

    node: str
    duplicate_of: str | None = None


@dataclass(frozen=True)
class SessionLost:
    pass


@dataclass(frozen=True)
class VersionAnnounced:
    version: int | None  # None: no job model published yet


@dataclass(frozen=True)
class ManifestRead:
    version: int
    base: int | None  # the version the model was planned against (None: not said)
    losing: frozenset[str]  # the processors that lose a task against ``base``
    #: the processors that gain a task against ``base`` (None: the manifest does not say)
    gaining: frozenset[str] | None = None


@dataclass(frozen=True)
class ManifestMissing:
    """The version was superseded and removed before it could be read."""

    version: int


@dataclass(frozen=True)
class ContainerRead:
    version: int
    tasks: Mapping[str, TaskModel] | None  # None: the version does not name this member
    standbys: Mapping[str, TaskModel] = field(default_factory=dict)  # its standby replicas


@dataclass(frozen=True)
class BarrierDecided:
    version: int
    state: BarrierState | None


@dataclass(frozen=True)
class StoreFailed:
    reason: str


@dataclass(frozen=True)
class ResyncDue:
    pass


@dataclass(frozen=True)
class Shutdown:
    pass


MemberEvent = (
    Connected
    | ConnectionSuspended
    | FenceDue
    | Registered
    | SessionLost
    | VersionAnnounced
    | ManifestRead
    | ManifestMissing
    | ContainerRead
    | BarrierDecided
    | StoreFailed
    | ResyncDue
    | Shutdown
)

# ----------------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class Register:
    pass


@dataclass(frozen=True)
class Unregister:
    pass


@dataclass(frozen=True)
class CheckRegistration:
    """Look again for an older live registration with the member's id (answer: Registered)."""


@dataclass(frozen=True)
class RegistrationRefused:
    """The member gives up: ``duplicate_of`` (older, still live) has its processor id."""

    node: str  # this member's own (now removed) registration
    duplicate_of: str


@dataclass(frozen=True)
class WatchVersions:
    pass


@dataclass(frozen=True)
class FetchLatestVersion:
    pass


@dataclass(frozen=True)
class ReadManifest:
    version: int


@dataclass(frozen=True)
class ReadContainer:
    version: int


@dataclass(frozen=True)
class JoinBarrier:
    version: int
    early: bool  # before reading the container: the manifest says nothing of ours moves


@dataclass(frozen=True)
class WatchBarrier:
    version: int


@dataclass(frozen=True)
class StopTasks:
    version: int | None  # the version the tasks ran under
    tasks: Mapping[str, TaskModel]
    reason: str  # "moved", "session lost", "shutdown"


@dataclass(frozen=True)
class StartTasks:
    version: int
    tasks: Mapping[str, TaskModel]  # the tasks new to this member
    running: Mapping[str, TaskModel]  # everything it runs from now on


@dataclass(frozen=True)
class StopStandbys:
    """Stop keeping these standby replicas warm (dropped, promoted to active, or stopping)."""

    version: int | None  # the version they were standbys under
    tasks: Mapping[str, TaskModel]
    reason: str  # "dropped", "session lost", "shutdown", "not in the model"


@dataclass(frozen=True)
class StartStandbys:
    """Start keeping these standby replicas warm (their lag is the runtime's to report)."""

    version: int
    tasks: Mapping[str, TaskModel]  # the standbys new to this member


@dataclass(frozen=True)
class WriteLocality:
    version: int
    tasks: Collection[str]  # the member's tasks: their location is the member's


@dataclass(frozen=True)
class ScheduleResync:
    after_s: float


@dataclass(frozen=True)
class ScheduleFence:
    """Deliver ``FenceDue(suspension)`` after ``after_s`` seconds."""

    after_s: float
    suspension: int


MemberAction = (
    Register
    | Unregister
    | CheckRegistration
    | RegistrationRefused
    | WatchVersions
    | FetchLatestVersion
    | ReadManifest
    | ReadContainer
    | JoinBarrier
    | WatchBarrier
    | StopTasks
    | StartTasks
    | StopStandbys
    | StartStandbys
    | WriteLocality
    | ScheduleResync
    | ScheduleFence
)
