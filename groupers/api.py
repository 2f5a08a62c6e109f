"""The grouper contract: what a TaskNameGrouper receives, what it must return, and the check.

A TaskNameGrouper is a pure function of ``(tasks, metadata)``: same inputs, same output, whatever
the order of the inputs or the process's hash seed (invariant I6). It returns one ContainerModel
per live processor (empty if need be), carrying that processor's location id, with every task
assigned exactly once. :func:`validate` checks all of that and raises :class:`InvalidAssignment`
naming the first things wrong; the coordinator never publishes an answer that fails it.

:func:`tasks_by_name` and :func:`build_containers` are the helpers every grouper shares: index
the requested tasks, and turn processor -> task names into the ContainerModels to return.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from metadata.model import ContainerModel, FrozenMap, SystemStreamPartition, TaskModel

__all__ = [
    "GrouperError",
    "GrouperMetadata",
    "InvalidAssignment",
    "SspGrouper",
    "TaskNameGrouper",
    "UnknownGrouperError",
    "build_containers",
    "tasks_by_name",
    "validate",
]


class GrouperError(Exception):
    """Base class of the errors the groupers package raises on purpose. ``argument``: which
    argument of :func:`groupers.get_grouper` is wrong, when it is known: ``"name"`` (no such
    grouper, a plugin that cannot be loaded or built) or ``"options"`` (options it does not
    take, or its constructor refused them)."""

    def __init__(self, message: str, *, argument: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument


class UnknownGrouperError(GrouperError, LookupError):
    """No grouper by that name: the message lists the known names."""


class InvalidAssignment(GrouperError, ValueError):
    """A grouper's answer breaks the contract; ``problems`` lists what is wrong."""

    def __init__(self, problems: list[str]) -> None:
        shown = problems[:10]
        more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
        super().__init__("invalid assignment: " + "; ".join(shown) + more)
        self.problems = problems


def _frozen(mapping: Mapping[str, str]) -> Mapping[str, str]:
    return mapping if isinstance(mapping, FrozenMap) else FrozenMap(mapping)


@dataclass(frozen=True)
class GrouperMetadata:
    """Everything a grouper may know besides the tasks.

    - ``processor_locality``: live processor id -> its location id;
    - ``task_locality``: task name -> location id it last ran at (this run id only);
    - ``previous_task_to_processor``: task name -> processor id in the job model in force;
    - ``previous_task_to_ssps``: task name -> its stream partitions in that model (for virtual
      tasks that split or merge);
    - ``processor_capacity``: live processor id -> its capacity, an integer >= 1 (absent: 1);
      balance is proportional to it;
    - ``task_state``: task name -> {processor id: lag} for every processor holding a copy of the
      task's state (0 = caught up): where standbys stay and where a lost task fails over to.
    """

    processor_locality: Mapping[str, str]
    task_locality: Mapping[str, str]
    previous_task_to_processor: Mapping[str, str]
    previous_task_to_ssps: Mapping[str, frozenset[SystemStreamPartition]] = field(
        default_factory=lambda: FrozenMap()
    )
    processor_capacity: Mapping[str, int] = field(default_factory=lambda: FrozenMap())
    task_state: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: FrozenMap())

    def __post_init__(self) -> None:
        object.__setattr__(self, "processor_locality", _frozen(self.processor_locality))
        object.__setattr__(self, "task_locality", _frozen(self.task_locality))
        object.__setattr__(
            self, "previous_task_to_processor", _frozen(self.previous_task_to_processor)
        )
        ssps = self.previous_task_to_ssps
        if not isinstance(ssps, FrozenMap):
            object.__setattr__(self, "previous_task_to_ssps", FrozenMap(ssps))
        for pid, capacity in self.processor_capacity.items():
            if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
                raise GrouperError(
                    f"processor_capacity of {pid!r} must be an integer >= 1, got {capacity!r}"
                )
        if not isinstance(self.processor_capacity, FrozenMap):
            object.__setattr__(self, "processor_capacity", FrozenMap(self.processor_capacity))
        if not isinstance(self.task_state, FrozenMap) or not all(
            isinstance(copies, FrozenMap) for copies in self.task_state.values()
        ):
            frozen = {name: _frozen_lags(copies) for name, copies in self.task_state.items()}
            object.__setattr__(self, "task_state", FrozenMap(frozen))

    def capacity(self, processor_id: str) -> int:
        """The processor's capacity (1 unless ``processor_capacity`` says otherwise)."""
        capacity: int = self.processor_capacity.get(processor_id, 1)
        return capacity


def _frozen_lags(copies: Mapping[str, int]) -> Mapping[str, int]:
    return copies if isinstance(copies, FrozenMap) else FrozenMap(copies)


@runtime_checkable
class TaskNameGrouper(Protocol):
    """Assigns tasks to the live processors. Must be pure and deterministic."""

    def group(
        self, tasks: Collection[TaskModel], metadata: GrouperMetadata
    ) -> set[ContainerModel]: ...


@runtime_checkable
class SspGrouper(Protocol):
    """Turns a job's inputs into task models."""

    def group(self, inputs: Collection[object]) -> set[TaskModel]: ...


def validate(
    tasks: Iterable[TaskModel],
    metadata: GrouperMetadata,
    containers: object,
) -> None:
    """Raise :class:`InvalidAssignment` unless ``containers`` is a valid answer for ``tasks``.

    Valid means: a collection of ContainerModel, exactly one per live processor and none for any
    other, each carrying its processor's location id, and every requested task assigned exactly
    once, unchanged, with no task that was not asked for. Standby replicas (``standby_tasks``), if
    any, are requested tasks, unchanged, never on their task's active processor (so never two
    copies of a task on one processor).
    """
    problems: list[str] = []
    if not isinstance(containers, Collection) or isinstance(containers, str | bytes | Mapping):
        raise InvalidAssignment(
            [f"expected a set of ContainerModel, got {type(containers).__name__}"]
        )
    wanted: dict[str, TaskModel] = {}
    for task in tasks:
        wanted[task.name] = task
    live = metadata.processor_locality
    seen_processors: Counter[str] = Counter()
    owner: dict[str, str] = {}
    for container in containers:
        if not isinstance(container, ContainerModel):
            problems.append(f"expected ContainerModel, got {type(container).__name__}")
            continue
        pid = container.processor_id
        seen_processors[pid] += 1
        if pid not in live:
            problems.append(f"unknown processor {pid!r} (not a live processor)")
        elif container.location_id != live[pid]:
            problems.append(
                f"processor {pid!r} carries location {container.location_id!r}, "
                f"but it registered {live[pid]!r}"
            )
        for name, task in container.tasks.items():
            if name in owner:
                problems.append(f"task {name!r} assigned twice ({owner[name]!r} and {pid!r})")
                continue
            owner[name] = pid
            if name not in wanted:
                problems.append(f"task {name!r} on {pid!r} was not asked for")
            elif task != wanted[name]:
                problems.append(f"task {name!r} on {pid!r} differs from the requested TaskModel")
    problems.extend(_standby_problems(containers, wanted, owner))
    for pid, count in sorted(seen_processors.items()):
        if count > 1:
            problems.append(f"processor {pid!r} has {count} containers")
    for pid in sorted(set(live) - set(seen_processors)):
        problems.append(f"live processor {pid!r} has no container")
    missing = sorted(set(wanted) - set(owner))
    if missing:
        shown = ", ".join(repr(m) for m in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        problems.append(f"task(s) not assigned: {shown}{more}")
    if problems:
        raise InvalidAssignment(problems)


def _standby_problems(
    containers: Collection[object], wanted: Mapping[str, TaskModel], owner: Mapping[str, str]
) -> list[str]:
    """What is wrong with the standby replicas of an answer (none if it has none)."""
    problems: list[str] = []
    for container in containers:
        if not isinstance(container, ContainerModel) or not container.standby_tasks:
            continue
        pid = container.processor_id
        for name, task in container.standby_tasks.items():
            if name not in wanted:
                problems.append(f"standby of task {name!r} on {pid!r} was not asked for")
            elif task != wanted[name]:
                problems.append(f"standby of task {name!r} on {pid!r} differs from the TaskModel")
            elif owner.get(name) == pid:
                problems.append(f"task {name!r} has a standby on its active processor {pid!r}")
    return problems


def tasks_by_name(tasks: Collection[TaskModel]) -> dict[str, TaskModel]:
    """Index tasks by name; two different tasks with one name are an error."""
    by_name: dict[str, TaskModel] = {}
    for task in tasks:
        known = by_name.setdefault(task.name, task)
        if known is not task and known != task:
            raise GrouperError(f"two different tasks are named {task.name!r}")
    return by_name


def build_containers(
    assignment: Mapping[str, list[str]],
    by_name: Mapping[str, TaskModel],
    processor_locality: Mapping[str, str],
    standbys: Mapping[str, list[str]] | None = None,
) -> set[ContainerModel]:
    """One ContainerModel per processor of ``assignment`` (task lists sorted by name), with the
    standby replicas of ``standbys`` (processor id -> task names) if given."""
    return {
        ContainerModel(
            pid,
            processor_locality[pid],
            FrozenMap({name: by_name[name] for name in sorted(names)}),
            FrozenMap({name: by_name[name] for name in sorted(standbys.get(pid, ()))})
            if standbys
            else FrozenMap(),
        )
        for pid, names in assignment.items()
    }
