"""Key groups (groupers/keygroups.py): Flink/Heron ranges, remap on rescale, locality shares."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupers.keygroups import (
    heron_key_group_ranges,
    key_group,
    key_group_ranges,
    locality_share,
    remap_ranges,
)
from groupers.keys import stable_hash

OWNERS8 = [f"p-{i}" for i in range(8)]


@st.composite
def sizes(draw: st.DrawFn, top: int = 64) -> tuple[int, int]:
    max_parallelism = draw(st.integers(1, top))
    return max_parallelism, draw(st.integers(1, max_parallelism))


def test_key_group_is_stable_hash_mod_max() -> None:
    assert key_group("user-1", 128) == stable_hash("user-1") % 128
    assert key_group(None, 128, offset=9) == stable_hash(9) % 128
    with pytest.raises(ValueError):
        key_group("k", 0)


def test_flink_formula_examples() -> None:
    assert key_group_ranges(128, 8)[1] == range(16, 32)
    assert key_group_ranges(10, 3) == [range(0, 4), range(4, 7), range(7, 10)]
    assert heron_key_group_ranges(10, 3) == [range(0, 4), range(4, 7), range(7, 10)]
    assert key_group_ranges(10, 4) == [range(0, 3), range(3, 5), range(5, 8), range(8, 10)]
    assert heron_key_group_ranges(10, 4) == [range(0, 3), range(3, 6), range(6, 8), range(8, 10)]
    with pytest.raises(ValueError, match="exceeds"):
        key_group_ranges(4, 5)


@settings(max_examples=200)
@given(sizes(200), st.booleans())
def test_ranges_partition_contiguously_with_sizes_within_one(
    mp: tuple[int, int], heron: bool
) -> None:
    max_parallelism, parallelism = mp
    ranges = (heron_key_group_ranges if heron else key_group_ranges)(max_parallelism, parallelism)
    assert len(ranges) == parallelism
    assert ranges[0].start == 0 and ranges[-1].stop == max_parallelism
    for a, b in itertools.pairwise(ranges):
        assert a.stop == b.start
    lengths = [len(r) for r in ranges]
    assert min(lengths) >= 1 and max(lengths) - min(lengths) <= 1


@settings(max_examples=150)
@given(sizes(48), st.integers(1, 48), st.data())
def test_remap_never_keeps_less_than_naive_and_is_balanced(
    mp: tuple[int, int], new: int, data: st.DataObject
) -> None:
    max_parallelism, old = mp
    new = min(new, max_parallelism)
    owners = data.draw(
        st.one_of(
            st.just([f"p-{i}" for i in range(old)]),
            st.lists(st.sampled_from(["a", "b", "c"]), min_size=old, max_size=old),
        )
    )
    hosts = remap_ranges(old, new, max_parallelism, owners)
    assert len(hosts) == new and set(hosts) <= set(owners)
    cap = -(-new // old)
    for owner in set(owners):
        assert hosts.count(owner) <= cap * owners.count(owner)
    share = locality_share(old, new, max_parallelism, owners)
    assert share.remapped_groups >= share.naive_groups
    assert 0.0 <= share.hash_mod <= 1.0


def test_rescale_8_to_16_to_8_with_128_key_groups() -> None:
    up = remap_ranges(8, 16, 128, OWNERS8)
    assert up == [f"p-{j // 2}" for j in range(16)]  # each range split in place
    share_up = locality_share(8, 16, 128, OWNERS8)
    assert (share_up.remapped, share_up.naive, share_up.hash_mod) == (1.0, 0.125, 1.0)

    down = remap_ranges(16, 8, 128, up)
    assert down == OWNERS8  # both halves are back on their original owner
    share_down = locality_share(16, 8, 128, up)
    assert (share_down.remapped, share_down.naive, share_down.hash_mod) == (1.0, 0.125, 0.5)

    distinct16 = [f"q-{i}" for i in range(16)]
    merged = locality_share(16, 8, 128, distinct16)
    assert (merged.remapped, merged.naive, merged.hash_mod) == (0.5, 0.0625, 0.5)


def test_uneven_rescale_8_to_12() -> None:
    share = locality_share(8, 12, 128, OWNERS8)
    assert share.remapped_groups == 108 and share.naive_groups == 17 and share.hash_mod_groups == 68


def test_remap_checks_owner_count() -> None:
    with pytest.raises(ValueError, match="old_owner"):
        remap_ranges(8, 16, 128, OWNERS8[:7])
