"""Measures of one rebalance: tasks moved, tasks kept local, and the movement lower bound.

The one place these are computed; the coordinator, the ``plan`` command, the demo, the
benchmarks and the examples count with them. An *assignment* is a mapping task -> processor id
(``JobModel.task_to_processor()``, or a grouper's answer through :func:`owners`).

- :func:`tasks_moved` / :func:`moved_tasks`: tasks whose processor differs from the previous
  one (a task with no previous processor counts, unless told otherwise);
- :func:`tasks_kept_local`: tasks placed on a processor at the location they last ran at;
  :func:`tasks_with_locality`: tasks that have such a location at all (the denominator);
- :func:`movement_lower_bound`: the fewest tasks any balanced answer must move;
- :func:`balance_bounds`: each processor's fewest and most tasks (by capacity, with slack).

Pure: imports only the grouper contract and the data model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Mapping
from typing import TypeVar

from groupers.api import GrouperMetadata
from metadata.model import ContainerModel, TaskModel

__all__ = [
    "balance",
    "balance_bounds",
    "movement_lower_bound",
    "moved_tasks",
    "owners",
    "survivor_counts",
    "task_names",
    "tasks_kept_local",
    "tasks_moved",
    "tasks_with_locality",
]

K = TypeVar("K", bound=Hashable)


def owners(containers: Iterable[ContainerModel]) -> dict[str, str]:
    """Task name -> processor id of an answer (a set of ContainerModel)."""
    return {name: c.processor_id for c in containers for name in c.tasks}


def task_names(tasks: Iterable[TaskModel | str]) -> list[str]:
    """The distinct task names, sorted (tasks given as TaskModels or as names)."""
    return sorted({task if isinstance(task, str) else task.name for task in tasks})


def tasks_moved(
    previous: Mapping[K, str],
    current: Mapping[K, str],
    *,
    tasks: Iterable[K] | None = None,
    weights: Mapping[K, int] | None = None,
) -> int:
    """Tasks of ``current`` whose processor is not the one ``previous`` gave them.

    A task ``previous`` does not know counts as moved. With ``tasks``, those are counted instead
    of ``current``'s keys, and a task ``current`` leaves unassigned counts as moved. With
    ``weights`` (task -> e.g. bytes of state), their sum instead of how many.
    """
    if tasks is None:
        changed: Iterable[K] = (t for t, pid in current.items() if previous.get(t) != pid)
    else:
        changed = (t for t in tasks if (pid := current.get(t)) is None or previous.get(t) != pid)
    if weights is None:
        return sum(1 for _ in changed)
    return sum(weights[t] for t in changed)


def moved_tasks(
    previous: Mapping[str, str], current: Mapping[str, str], *, count_new: bool = True
) -> list[str]:
    """The names :func:`tasks_moved` counts, sorted; ``count_new=False`` leaves out the tasks
    ``previous`` does not know (they had no processor to move from)."""
    return sorted(
        t for t, pid in current.items() if previous.get(t) != pid and (count_new or t in previous)
    )


def tasks_kept_local(
    current: Mapping[str, str],
    processor_locality: Mapping[str, str],
    task_locality: Mapping[str, str],
) -> int:
    """Tasks of ``current`` on a processor whose location is the one the task last ran at."""
    kept = 0
    for name, pid in current.items():
        recorded = task_locality.get(name)
        if recorded is not None and processor_locality.get(pid) == recorded:
            kept += 1
    return kept


def tasks_with_locality(current: Mapping[str, str], task_locality: Mapping[str, str]) -> int:
    """Tasks of ``current`` that have a recorded location (at most :func:`tasks_kept_local`
    of them can be local; the rest restore their state elsewhere)."""
    return sum(1 for name in current if name in task_locality)


def balance(total: int, processors: int) -> tuple[int, int]:
    """``(floor(T/P), T mod P)``: every processor gets floor or floor+1, exactly r of them +1."""
    if processors < 1:
        raise ValueError("no live processor: nothing can be assigned")
    return divmod(total, processors)


def survivor_counts(names: Iterable[str], metadata: GrouperMetadata) -> tuple[Counter[str], int]:
    """Tasks per live processor that were on it before, and the orphans (no live previous)."""
    live = metadata.processor_locality
    previous = metadata.previous_task_to_processor
    kept: Counter[str] = Counter()
    orphans = 0
    for name in names:
        owner = previous.get(name)
        if owner is not None and owner in live:
            kept[owner] += 1
        else:
            orphans += 1
    return kept, orphans


def movement_lower_bound(
    tasks: Collection[TaskModel] | Collection[str], metadata: GrouperMetadata
) -> int:
    """The fewest tasks a balanced answer (each processor floor or ceil of T/P) must move.

    Orphans (no previous processor, or one that is not live) must move. A survivor holding ``c``
    of its previous tasks keeps at most ``min(c, target)``; the ``T mod P`` ceil targets are best
    given to the survivors holding the most (an exchange argument: swapping a ceil target towards
    a fuller survivor never lowers the sum of ``min(c, target)``). So the bound is
    ``orphans + sum(max(0, c - target))`` and it is attained: new processors and survivors below
    target can absorb everything that moves.

    Raises ValueError when there is no live processor.
    """
    names = task_names(tasks)
    floor, extra = balance(len(names), len(metadata.processor_locality))
    kept, orphans = survivor_counts(names, metadata)
    shed = 0
    for rank, count in enumerate(sorted(kept.values(), reverse=True)):
        target = floor + 1 if rank < extra else floor
        shed += max(0, count - target)
    return orphans + shed


def balance_bounds(
    processors: list[str], total: int, metadata: GrouperMetadata, balance_slack: int
) -> tuple[dict[str, int], dict[str, int]]:
    """Each processor's balance bounds: floor and ceil of ``total * cap(p) / sum(cap)`` (all
    capacities 1: ``T // P`` and ``ceil(T / P)``), widened by ``balance_slack``."""
    capacity = metadata.capacity
    caps = [capacity(pid) for pid in processors]
    whole = sum(caps)
    lower: dict[str, int] = {}
    upper: dict[str, int] = {}
    for pid, cap in zip(processors, caps, strict=True):
        share = total * cap
        lower[pid] = max(0, share // whole - balance_slack)
        upper[pid] = -(-share // whole) + balance_slack
    return lower, upper
