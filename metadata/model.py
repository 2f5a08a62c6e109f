"""The data model shared by every part of affinity.

All types are frozen and hashable, so a job model can be compared with the one in force (no-op
rebalances are skipped by equality) and used in sets (a grouper returns ``set[ContainerModel]``).

- ``SystemStreamPartition``: one partition of one input stream, or one key bucket of it
  (``key_bucket == -1`` means the whole partition; SEP-32 virtual tasks use buckets >= 0).
- ``TaskModel``: a named unit of work and state, holding one or more stream partitions.
- ``ContainerModel``: the tasks one processor runs, and where that processor is; optionally the
  standby replicas it keeps warm (``standby_tasks``, copies of other processors' tasks).
- ``JobModel``: one version of the whole assignment, plus the config it was made from.
- ``StreamInput``: a job input as configured (``system``, ``stream``, partition count).
- ``BarrierState``: the state of the barrier of a job-model version (``NEW``, ``DONE``,
  ``TIMED_OUT``); the one spelling of it everywhere.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

__all__ = [
    "BarrierState",
    "ContainerModel",
    "FrozenMap",
    "JobModel",
    "StreamInput",
    "SystemStreamPartition",
    "TaskModel",
    "task_to_processor",
]

K = TypeVar("K")
V = TypeVar("V")


class FrozenMap(Mapping[K, V]):
    """An immutable, hashable mapping (insertion order kept, equality ignores order)."""

    __slots__ = ("_data", "_hash")

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._data: dict[K, V] = dict(items)
        self._hash: int | None = None

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    # Direct delegation: the Mapping mixins go through __getitem__ and are several times slower.
    def get(self, key: K, default: Any = None) -> Any:
        return self._data.get(key, default)

    def keys(self) -> KeysView[K]:
        return self._data.keys()

    def values(self) -> ValuesView[V]:
        return self._data.values()

    def items(self) -> ItemsView[K, V]:
        return self._data.items()

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


def _freeze(mapping: Mapping[K, V]) -> FrozenMap[K, V]:
    return mapping if isinstance(mapping, FrozenMap) else FrozenMap(mapping)


@dataclass(frozen=True, slots=True, order=True)
class SystemStreamPartition:
    """One partition of one stream, or one key bucket of it (``key_bucket=-1``: whole partition)."""

    system: str
    stream: str
    partition: int
    key_bucket: int = -1

    def __post_init__(self) -> None:
        if self.partition < 0:
            raise ValueError(f"partition must be >= 0, got {self.partition}")
        if self.key_bucket < -1:
            raise ValueError(f"key_bucket must be >= -1, got {self.key_bucket}")


@dataclass(frozen=True, slots=True)
class TaskModel:
    """A named unit of work and state: the stream partitions it consumes."""

    name: str
    partitions: frozenset[SystemStreamPartition]
    changelog_partition: int = -1

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("task name must not be empty")
        given: object = self.partitions  # callers may pass any iterable of partitions
        if not isinstance(given, frozenset):
            object.__setattr__(self, "partitions", frozenset(self.partitions))


@dataclass(frozen=True, slots=True)
class ContainerModel:
    """The tasks one processor runs (keyed by task name), and the processor's location id.

    ``standby_tasks`` (keyed by task name too) are the standby replicas it keeps warm: copies of
    the state of tasks that other processors run (empty unless the grouper makes replicas).
    """

    processor_id: str
    location_id: str | None
    tasks: Mapping[str, TaskModel] = field(default_factory=lambda: FrozenMap())
    standby_tasks: Mapping[str, TaskModel] = field(default_factory=lambda: FrozenMap())

    def __post_init__(self) -> None:
        if not self.processor_id:
            raise ValueError("processor_id must not be empty")
        object.__setattr__(self, "tasks", _freeze(self.tasks))
        object.__setattr__(self, "standby_tasks", _freeze(self.standby_tasks))
        for kind, tasks in (("task", self.tasks), ("standby task", self.standby_tasks)):
            for name, task in tasks.items():
                if name != task.name:
                    raise ValueError(
                        f"{kind} key {name!r} differs from its TaskModel name {task.name!r}"
                    )


@dataclass(frozen=True, slots=True)
class JobModel:
    """One version of a job's assignment: processor id -> ContainerModel, and the job config."""

    version: int
    containers: Mapping[str, ContainerModel]
    config: Mapping[str, str] = field(default_factory=lambda: FrozenMap())

    def __post_init__(self) -> None:
        if self.version < 0:
            raise ValueError(f"version must be >= 0, got {self.version}")
        object.__setattr__(self, "containers", _freeze(self.containers))
        object.__setattr__(self, "config", _freeze(self.config))
        for pid, container in self.containers.items():
            if pid != container.processor_id:
                raise ValueError(
                    f"container key {pid!r} differs from its processor_id "
                    f"{container.processor_id!r}"
                )

    @property
    def tasks(self) -> dict[str, TaskModel]:
        """Every task of the model by name."""
        return {name: task for c in self.containers.values() for name, task in c.tasks.items()}

    def task_to_processor(self) -> dict[str, str]:
        """Task name -> processor id."""
        return task_to_processor(self.containers.values())

    def same_assignment(self, other: JobModel) -> bool:
        """True when both models assign the same tasks to the same processors (version ignored)."""
        return self.containers == other.containers and self.config == other.config


def task_to_processor(containers: Iterable[ContainerModel]) -> dict[str, str]:
    """Task name -> processor id, for any collection of containers."""
    return {name: c.processor_id for c in containers for name in c.tasks}


@dataclass(frozen=True, slots=True)
class StreamInput:
    """A job input as configured: every partition of ``system``/``stream``."""

    system: str
    stream: str
    partitions: int

    def __post_init__(self) -> None:
        if not self.system or not self.stream:
            raise ValueError("system and stream must not be empty")
        if self.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {self.partitions}")


class BarrierState(StrEnum):
    """The state of barrier v (``barriers/barrier_<v>/state``): created ``NEW`` with job model v,
    then decided once by the leader, ``DONE`` (every expected processor joined) or ``TIMED_OUT``.

    A ``StrEnum``: each member equals its stored text (``BarrierState.DONE == "DONE"``).
    """

    NEW = "NEW"
    DONE = "DONE"
    TIMED_OUT = "TIMED_OUT"
