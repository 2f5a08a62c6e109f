"""Key groups (Flink, Heron): the unit of keyed state, assigned to instances as contiguous ranges.

- :func:`key_group`: ``stable_hash(key) mod max_parallelism`` (the same in every process).
- :func:`key_group_ranges`: Flink's ``computeKeyGroupRangeForOperatorIndex``: instance ``i`` of
  ``p`` gets ``[ceil(i*max/p), ceil((i+1)*max/p) - 1]``, so the ranges are contiguous, cover
  ``[0, max)`` and differ in size by at most one. :func:`heron_key_group_ranges` is Heron's
  variant (the ``max mod p`` larger ranges first).
- :func:`remap_ranges`: on a parallelism change, which old owner hosts each new range so that the
  most key groups stay where they were: a maximum-weight assignment of new ranges to old
  instances (weight = key groups in common), each old instance taking at most
  ``ceil(new/old)`` new ranges (balance). Solved exactly (Hungarian algorithm on the old
  instances repeated ``ceil(new/old)`` times: :func:`groupers.matching.max_weight_assignment`),
  so it never keeps fewer key groups local than the naive index-order mapping (new range ``j``
  -> old instance ``j mod old``), which is one of the feasible assignments.
- :func:`locality_share`: the share of key groups kept local by the remap, by the naive
  index-order mapping and by hash-mod placement (key group ``g`` on instance ``g mod p``, new
  instance ``j`` hosted by the owner of old instance ``j mod old``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from groupers.keys import Key, stable_hash
from groupers.matching import max_weight_assignment

__all__ = [
    "LocalityShare",
    "remap_instances",
    "heron_key_group_ranges",
    "key_group",
    "key_group_ranges",
    "locality_share",
    "remap_ranges",
]


def _positive(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def key_group(key: Key, max_parallelism: int, *, offset: int | None = None) -> int:
    """The key group of ``key``: ``stable_hash(key) mod max_parallelism``."""
    _positive(max_parallelism, "max_parallelism")
    return stable_hash(key, offset=offset) % max_parallelism


def _check(max_parallelism: int, parallelism: int) -> None:
    _positive(max_parallelism, "max_parallelism")
    _positive(parallelism, "parallelism")
    if parallelism > max_parallelism:
        raise ValueError(f"parallelism {parallelism} exceeds max_parallelism {max_parallelism}")


def key_group_ranges(max_parallelism: int, parallelism: int) -> list[range]:
    """Flink's contiguous key-group range of every instance ``0..parallelism-1``."""
    _check(max_parallelism, parallelism)
    return [
        range(
            -(-(i * max_parallelism) // parallelism),
            -(-((i + 1) * max_parallelism) // parallelism),
        )
        for i in range(parallelism)
    ]


def heron_key_group_ranges(max_parallelism: int, parallelism: int) -> list[range]:
    """Heron's formulas: the first ``max mod p`` instances own one key group more."""
    _check(max_parallelism, parallelism)
    per, overflow = divmod(max_parallelism, parallelism)
    ranges: list[range] = []
    start = 0
    for i in range(parallelism):
        size = per + (1 if i < overflow else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges


def _overlap(a: range, b: range) -> int:
    return max(0, min(a.stop, b.stop) - max(a.start, b.start))


def remap_instances(
    old_parallelism: int,
    new_parallelism: int,
    max_parallelism: int,
    old_owner: Sequence[str] | None = None,
) -> list[int]:
    """New range index -> old instance index whose owner hosts it (see :func:`remap_ranges`)."""
    owners = _owners(old_parallelism, old_owner)
    old = key_group_ranges(max_parallelism, old_parallelism)
    new = key_group_ranges(max_parallelism, new_parallelism)
    before = _placed(max_parallelism, old, owners)
    cap = -(-new_parallelism // old_parallelism)
    columns = [i for i in range(old_parallelism) for _ in range(cap)]
    # weight = key groups of the new range whose old owner is this instance's owner
    kept = [{o: sum(1 for g in r if before[g] == o) for o in set(owners)} for r in new]
    weights = [[kept[j][owners[i]] for i in columns] for j in range(new_parallelism)]
    return [columns[c] for c in max_weight_assignment(weights)]


def _owners(old_parallelism: int, old_owner: Sequence[str] | None) -> list[str]:
    if old_owner is None:
        return [f"instance-{i}" for i in range(old_parallelism)]
    if len(old_owner) != old_parallelism:
        raise ValueError(
            f"old_owner has {len(old_owner)} entries for old_parallelism {old_parallelism}"
        )
    return list(old_owner)


def _placed(max_parallelism: int, ranges: Sequence[range], hosts: Sequence[str]) -> list[str]:
    """Key group -> host, for ranges hosted by ``hosts``."""
    where = [""] * max_parallelism
    for r, host in zip(ranges, hosts, strict=True):
        for g in r:
            where[g] = host
    return where


def remap_ranges(
    old_parallelism: int,
    new_parallelism: int,
    max_parallelism: int,
    old_owner: Sequence[str],
) -> list[str]:
    """For each new range, the old owner to host it, keeping the most key groups in place.

    ``old_owner[i]`` hosts old range ``i``. Each old instance takes at most
    ``ceil(new/old)`` new ranges, so an owner of ``k`` old ranges takes at most ``k`` times that.
    """
    owners = _owners(old_parallelism, old_owner)
    return [
        owners[i]
        for i in remap_instances(old_parallelism, new_parallelism, max_parallelism, owners)
    ]


@dataclass(frozen=True)
class LocalityShare:
    """Shares (0..1) of key groups that stay on their owner across a parallelism change."""

    remapped: float
    naive: float
    hash_mod: float
    remapped_groups: int
    naive_groups: int
    hash_mod_groups: int


def _kept(max_parallelism: int, old_where: Sequence[str], new_where: Sequence[str]) -> int:
    return sum(1 for g in range(max_parallelism) if old_where[g] == new_where[g])


def locality_share(
    old_parallelism: int,
    new_parallelism: int,
    max_parallelism: int,
    old_owner: Sequence[str] | None = None,
) -> LocalityShare:
    """Key groups kept local by :func:`remap_ranges`, the naive mapping and hash-mod placement.

    ``old_owner`` defaults to a distinct owner per old instance.
    """
    owners = _owners(old_parallelism, old_owner)
    old = key_group_ranges(max_parallelism, old_parallelism)
    new = key_group_ranges(max_parallelism, new_parallelism)

    def placed(ranges: list[range], hosts: Sequence[str]) -> list[str]:
        return _placed(max_parallelism, ranges, hosts)

    before = placed(old, owners)
    remapped = remap_ranges(old_parallelism, new_parallelism, max_parallelism, owners)
    naive_hosts = [owners[j % old_parallelism] for j in range(new_parallelism)]
    kept_remap = _kept(max_parallelism, before, placed(new, remapped))
    kept_naive = _kept(max_parallelism, before, placed(new, naive_hosts))
    kept_hash = sum(
        1
        for g in range(max_parallelism)
        if owners[g % old_parallelism] == naive_hosts[g % new_parallelism]
    )
    total = max_parallelism
    return LocalityShare(
        kept_remap / total,
        kept_naive / total,
        kept_hash / total,
        kept_remap,
        kept_naive,
        kept_hash,
    )
