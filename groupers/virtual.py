"""Locality across SEP-32 split and merge: old task names serve the new virtual tasks.

When the elasticity factor changes, every task gets a new name (``Partition 0-1-2`` becomes
``Partition 0-1-4`` and ``Partition 0-3-4``), so locality and previous processors recorded under
the old names would be lost. :func:`inherit_locality` finds each new task's ancestors from its
stream partitions instead: key bucket ``b`` of factor ``2f`` holds exactly the keys of bucket
``b mod f`` of factor ``f`` whose hash has one more bit set or clear, so

- on a split every child has one parent and starts where the parent was;
- on a merge the merged task goes to the location holding most of its parents' state, measured
  as the share of the key space (per stream partition) each parent held; ties go to the smallest
  location id, then the smallest processor id.

The factor of a stream partition is not stored in a ``SystemStreamPartition``; it is inferred per
``(system, stream, partition)`` and per side (old, new) as the smallest power of two above the
largest key bucket in use (``key_bucket=-1``, the whole partition, is bucket 0 of factor 1). For
SEP-32 groupers, which always emit every bucket ``0..f-1``, that is exactly ``f``.

Pure and deterministic: every choice is made in sorted order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from fractions import Fraction

from metadata.model import SystemStreamPartition, TaskModel

__all__ = ["inherit_locality", "needs_inheritance"]

_Stream = tuple[str, str, int]


def _pow2_above(bucket: int) -> int:
    factor = 1
    while factor <= bucket:
        factor *= 2
    return factor


def _factors(ssp_sets: Iterable[Iterable[SystemStreamPartition]]) -> dict[_Stream, int]:
    factors: dict[_Stream, int] = {}
    for ssps in ssp_sets:
        for s in ssps:
            key = (s.system, s.stream, s.partition)
            factors[key] = max(factors.get(key, 1), _pow2_above(max(s.key_bucket, 0)))
    return factors


def _ancestry(
    tasks: Collection[TaskModel],
    previous_task_to_ssps: Mapping[str, frozenset[SystemStreamPartition]],
    skip: Collection[str],
) -> dict[str, dict[str, Fraction]]:
    """New task name -> {old task name: share of key space they have in common}."""
    old_factors = _factors(previous_task_to_ssps.values())
    new_factors = _factors(t.partitions for t in tasks)
    index: dict[_Stream, list[tuple[int, str]]] = defaultdict(list)
    for old_name in sorted(previous_task_to_ssps):
        for s in previous_task_to_ssps[old_name]:
            index[(s.system, s.stream, s.partition)].append((max(s.key_bucket, 0), old_name))
    result: dict[str, dict[str, Fraction]] = {}
    for task in sorted(tasks, key=lambda t: t.name):
        if task.name in skip:
            continue
        weights: dict[str, Fraction] = defaultdict(Fraction)
        for s in task.partitions:
            key = (s.system, s.stream, s.partition)
            f_new = new_factors[key]
            bucket = max(s.key_bucket, 0)
            for old_bucket, old_name in index.get(key, ()):
                f_old = old_factors[key]
                common = min(f_new, f_old)
                if bucket % common == old_bucket % common:
                    weights[old_name] += Fraction(1, max(f_new, f_old))
        if weights:
            result[task.name] = dict(weights)
    return result


def _best(scores: Mapping[str, Fraction]) -> str:
    return min(scores, key=lambda k: (-scores[k], k))


def inherit_locality(
    tasks: Collection[TaskModel],
    task_locality: Mapping[str, str],
    previous_task_to_ssps: Mapping[str, frozenset[SystemStreamPartition]],
    previous_task_to_processor: Mapping[str, str],
) -> tuple[dict[str, str], dict[str, str]]:
    """``(task_locality, previous_task_to_processor)`` extended to the new task names.

    Entries already present are kept as they are; a task with no entry gets one inherited from
    the old tasks its stream partitions descend from or merge (see the module docstring). The
    previous processor is chosen among the ancestors at the chosen location when any has one.
    """
    locality = dict(task_locality)
    previous = dict(previous_task_to_processor)
    unknown = {t.name for t in tasks if t.name not in locality or t.name not in previous}
    if not unknown or not previous_task_to_ssps:
        return locality, previous
    known = {t.name for t in tasks} - unknown
    ancestry = _ancestry(tasks, previous_task_to_ssps, known)
    for name, parents in ancestry.items():
        where: str | None = task_locality.get(name)
        if where is None:
            by_location: dict[str, Fraction] = defaultdict(Fraction)
            for parent, weight in parents.items():
                loc = task_locality.get(parent)
                if loc is not None:
                    by_location[loc] += weight
            if by_location:
                where = _best(by_location)
                locality[name] = where
        if name not in previous_task_to_processor:
            by_processor: dict[str, Fraction] = defaultdict(Fraction)
            there: dict[str, Fraction] = defaultdict(Fraction)
            for parent, weight in parents.items():
                pid = previous_task_to_processor.get(parent)
                if pid is None:
                    continue
                by_processor[pid] += weight
                if where is not None and task_locality.get(parent) == where:
                    there[pid] += weight
            if there:
                previous[name] = _best(there)
            elif by_processor:
                previous[name] = _best(by_processor)
    return locality, previous


def needs_inheritance(
    task_names: Iterable[str],
    task_locality: Mapping[str, str],
    previous_task_to_processor: Mapping[str, str],
    previous_task_to_ssps: Mapping[str, frozenset[SystemStreamPartition]],
) -> bool:
    """Cheap test: old SSPs are known and some requested task has no recorded locality or
    previous processor (so it may be a split or merged virtual task)."""
    if not previous_task_to_ssps:
        return False
    return any(
        name not in task_locality or name not in previous_task_to_processor for name in task_names
    )
