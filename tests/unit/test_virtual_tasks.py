"""SEP-32 virtual tasks: elasticity factor on the SSP groupers, stable key buckets, serde, and
locality inherited across split and merge (groupers/keys.py, groupers/ssp.py, groupers/virtual.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupers import GrouperError, GrouperMetadata, HostAffinityGrouper, get_ssp_grouper
from groupers.keys import key_bucket, murmur3_32, stable_hash
from groupers.testing import GrouperInput
from groupers.virtual import inherit_locality
from metadata.model import (
    ContainerModel,
    FrozenMap,
    JobModel,
    StreamInput,
    SystemStreamPartition,
    TaskModel,
)
from metadata.serde import dump_job_model, load_job_model

EVENTS = StreamInput("kafka", "events", 3)
CLICKS = StreamInput("kafka", "clicks", 2)


def names(tasks: set[TaskModel]) -> list[str]:
    return sorted(t.name for t in tasks)


# ---------------------------------------------------------------- stable hash and key buckets


def test_murmur3_known_vectors() -> None:
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"", 1) == 0x514E28B7
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723
    assert murmur3_32(b"test", 0x9747B28C) == 0x704B81DC


def test_stable_hash_pinned_values() -> None:
    # Pinned: a change here changes every key bucket and key group of every running job.
    assert stable_hash(b"user-1") == murmur3_32(b"buser-1")
    assert stable_hash("user-1") == murmur3_32(b"suser-1")
    assert stable_hash(42) == murmur3_32(b"i42")
    assert stable_hash(None, offset=42) == stable_hash(42)
    assert stable_hash("user-1") != stable_hash(b"user-1")
    assert 0 <= stable_hash(-(2**100)) < 2**32


def test_null_key_uses_offset_and_bad_keys_fail() -> None:
    assert key_bucket(None, 4, offset=7) == stable_hash(7) % 4
    with pytest.raises(ValueError, match="offset"):
        stable_hash(None)
    with pytest.raises(TypeError):
        stable_hash(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        stable_hash(True)
    with pytest.raises(ValueError, match="factor"):
        key_bucket("k", 3)


@given(st.one_of(st.binary(), st.text(), st.integers()), st.integers(0, 6))
def test_bucket_of_factor_2f_descends_from_bucket_mod_f(key: bytes | str | int, power: int) -> None:
    f = 2**power
    assert key_bucket(key, 2 * f) % f == key_bucket(key, f)


_HASH_CHILD = """
import json, sys
from groupers.keys import key_bucket, stable_hash
keys = json.loads(sys.stdin.read())
print(json.dumps([[stable_hash(k), key_bucket(k, 8)] for k in keys]))
"""


def test_buckets_are_stable_across_hash_seeds() -> None:
    keys: list[str | int] = ["", "a", "user-17", "ключ", 0, -5, 2**70]
    expected = [[stable_hash(k), key_bucket(k, 8)] for k in keys]
    for seed in ("0", "1", "777"):
        proc = subprocess.run(
            [sys.executable, "-c", _HASH_CHILD],
            input=json.dumps(keys),
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONHASHSEED=seed),
            check=True,
        )
        assert json.loads(proc.stdout) == expected, seed


# ---------------------------------------------------------------- groupers with a factor


def test_group_by_partition_factor_4_gives_12_named_tasks() -> None:
    tasks = get_ssp_grouper("group-by-partition", elasticity_factor=4).group([EVENTS])
    assert names(tasks) == [f"Partition {p}-{b}-4" for p in range(3) for b in range(4)]
    by_name = {t.name: t for t in tasks}
    assert by_name["Partition 2-1-4"].partitions == {SystemStreamPartition("kafka", "events", 2, 1)}
    assert sorted(t.changelog_partition for t in tasks) == list(range(12))


def test_group_by_partition_holds_bucket_of_every_input() -> None:
    tasks = get_ssp_grouper("group-by-partition", elasticity_factor=2).group([EVENTS, CLICKS])
    by_name = {t.name: t for t in tasks}
    assert len(tasks) == 6
    assert by_name["Partition 1-1-2"].partitions == {
        SystemStreamPartition("kafka", "events", 1, 1),
        SystemStreamPartition("kafka", "clicks", 1, 1),
    }
    assert by_name["Partition 2-0-2"].partitions == {SystemStreamPartition("kafka", "events", 2, 0)}


def test_group_by_ssp_factor_2_names() -> None:
    tasks = get_ssp_grouper("group-by-ssp", elasticity_factor=2).group([CLICKS])
    assert names(tasks) == [
        "SystemStreamPartition [kafka, clicks, 0, 0]-2",
        "SystemStreamPartition [kafka, clicks, 0, 1]-2",
        "SystemStreamPartition [kafka, clicks, 1, 0]-2",
        "SystemStreamPartition [kafka, clicks, 1, 1]-2",
    ]
    assert sorted(t.changelog_partition for t in tasks) == [0, 1, 2, 3]


@pytest.mark.parametrize("name", ["group-by-partition", "group-by-ssp"])
def test_factor_1_keeps_todays_names(name: str) -> None:
    assert get_ssp_grouper(name, elasticity_factor=1).group([EVENTS, CLICKS]) == get_ssp_grouper(
        name
    ).group([EVENTS, CLICKS])
    assert "Partition 0" in names(get_ssp_grouper("group-by-partition").group([EVENTS]))


@pytest.mark.parametrize("name", ["group-by-partition", "group-by-ssp"])
@pytest.mark.parametrize("bad", [0, 3, 6, -2, 1.0, True, "2"])
def test_bad_factor_is_a_grouper_error_naming_it(name: str, bad: object) -> None:
    with pytest.raises(GrouperError, match="elasticity_factor"):
        get_ssp_grouper(name, elasticity_factor=bad)


@settings(max_examples=60)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=3),
    st.integers(0, 3),
    st.sampled_from(["group-by-partition", "group-by-ssp"]),
)
def test_every_partition_and_bucket_appears_exactly_once(
    partition_counts: list[int], power: int, name: str
) -> None:
    factor = 2**power
    inputs = [StreamInput("kafka", f"s{i}", n) for i, n in enumerate(partition_counts)]
    tasks = get_ssp_grouper(name, elasticity_factor=factor).group(inputs)
    held = [s for t in tasks for s in t.partitions]
    expected_buckets = [-1] if factor == 1 else list(range(factor))
    expected = sorted(
        SystemStreamPartition("kafka", s.stream, p, b)
        for s in inputs
        for p in range(s.partitions)
        for b in expected_buckets
    )
    assert sorted(held) == expected
    assert len({t.name for t in tasks}) == len(tasks)
    if name == "group-by-partition":
        assert len(tasks) == max(partition_counts) * factor
    else:
        assert len(tasks) == sum(partition_counts) * factor
    assert len({t.changelog_partition for t in tasks}) == len(tasks)


# ---------------------------------------------------------------- serde both ways


def _model(tasks: set[TaskModel]) -> JobModel:
    ordered = sorted(tasks, key=lambda t: t.name)
    half = len(ordered) // 2
    return JobModel(
        3,
        {
            "p-0": ContainerModel("p-0", "host-0", {t.name: t for t in ordered[:half]}),
            "p-1": ContainerModel("p-1", "host-1", {t.name: t for t in ordered[half:]}),
        },
    )


@pytest.mark.parametrize("factor", [1, 2, 4])
def test_job_model_with_and_without_key_buckets_round_trips(factor: int) -> None:
    model = _model(
        get_ssp_grouper("group-by-partition", elasticity_factor=factor).group([EVENTS, CLICKS])
    )
    data = dump_job_model(model)
    assert load_job_model(data) == model
    buckets = {
        p["key_bucket"]
        for c in json.loads(data)["containers"].values()
        for t in c["tasks"].values()
        for p in t["partitions"]
    }
    assert buckets == ({-1} if factor == 1 else set(range(factor)))


def test_legacy_document_without_key_bucket_reads_as_whole_partitions() -> None:
    model = _model(get_ssp_grouper("group-by-partition").group([EVENTS]))
    doc = json.loads(dump_job_model(model))
    for c in doc["containers"].values():
        for t in c["tasks"].values():
            for p in t["partitions"]:
                del p["key_bucket"]
    assert load_job_model(json.dumps(doc)) == model


# ---------------------------------------------------------------- locality across split/merge


def ssps_of(tasks: set[TaskModel]) -> dict[str, frozenset[SystemStreamPartition]]:
    return {t.name: t.partitions for t in tasks}


def test_inherit_split_children_take_parent_location_and_processor() -> None:
    old = get_ssp_grouper("group-by-partition", elasticity_factor=2).group([EVENTS])
    new = get_ssp_grouper("group-by-partition", elasticity_factor=4).group([EVENTS])
    where = {t.name: f"host-{i}" for i, t in enumerate(sorted(old, key=lambda t: t.name))}
    proc = {name: f"p-{loc[-1]}" for name, loc in where.items()}
    locality, previous = inherit_locality(new, where, ssps_of(old), proc)
    for p in range(3):
        for b in range(4):
            parent = f"Partition {p}-{b % 2}-2"
            assert locality[f"Partition {p}-{b}-4"] == where[parent]
            assert previous[f"Partition {p}-{b}-4"] == proc[parent]
    assert {k: locality[k] for k in where} == where  # old entries kept


def test_inherit_merge_majority_then_smallest_location() -> None:
    old = get_ssp_grouper("group-by-partition", elasticity_factor=4).group([EVENTS])
    new = get_ssp_grouper("group-by-partition", elasticity_factor=1).group([EVENTS])
    # partition 0: three parents on host-b, one on host-a -> host-b (majority)
    # partition 1: two and two -> host-a (tie: smallest location id)
    where = {
        "Partition 0-0-4": "host-b",
        "Partition 0-1-4": "host-a",
        "Partition 0-2-4": "host-b",
        "Partition 0-3-4": "host-b",
        "Partition 1-0-4": "host-b",
        "Partition 1-1-4": "host-a",
        "Partition 1-2-4": "host-b",
        "Partition 1-3-4": "host-a",
    }
    proc = {name: "p-" + loc[-1] for name, loc in where.items()}
    locality, previous = inherit_locality(new, where, ssps_of(old), proc)
    assert locality["Partition 0"] == "host-b" and previous["Partition 0"] == "p-b"
    assert locality["Partition 1"] == "host-a" and previous["Partition 1"] == "p-a"
    assert "Partition 2" not in locality and "Partition 2" not in previous


def test_inherit_is_a_no_op_without_old_ssps() -> None:
    new = get_ssp_grouper("group-by-partition", elasticity_factor=2).group([EVENTS])
    assert inherit_locality(new, {"x": "h"}, {}, {"x": "p"}) == ({"x": "h"}, {"x": "p"})


def _assignment(containers: set[ContainerModel]) -> dict[str, str]:
    return {name: c.processor_id for c in containers for name in c.tasks}


def test_host_affinity_split_2_to_4_keeps_children_with_parents() -> None:
    inputs = [StreamInput("kafka", "events", 4)]
    old = get_ssp_grouper("group-by-partition", elasticity_factor=2).group(inputs)
    new = get_ssp_grouper("group-by-partition", elasticity_factor=4).group(inputs)
    procs = {f"p-{i}": f"zone-a/rack-0/host-{i}" for i in range(4)}
    ordered = sorted(old, key=lambda t: t.name)
    prev = {t.name: f"p-{i % 4}" for i, t in enumerate(ordered)}
    md = GrouperMetadata(procs, {n: procs[p] for n, p in prev.items()}, prev, ssps_of(old))
    answer = HostAffinityGrouper().group(new, md)
    got = _assignment(answer)
    for name, pid in got.items():
        p, b, _ = name.removeprefix("Partition ").split("-")
        assert pid == prev[f"Partition {p}-{int(b) % 2}-2"], name
    assert sorted(len(c.tasks) for c in answer) == [4, 4, 4, 4]


def test_host_affinity_split_respects_balance_when_processors_were_added() -> None:
    inputs = [StreamInput("kafka", "events", 2)]
    old = get_ssp_grouper("group-by-partition", elasticity_factor=2).group(inputs)
    new = get_ssp_grouper("group-by-partition", elasticity_factor=4).group(inputs)
    prev = {t.name: "p-0" for t in old}
    procs = {"p-0": "host-0", "p-1": "host-1"}
    md = GrouperMetadata(procs, dict.fromkeys(prev, "host-0"), prev, ssps_of(old))
    answer = HostAffinityGrouper().group(new, md)
    assert sorted(len(c.tasks) for c in answer) == [4, 4]


def test_host_affinity_merge_4_to_2_goes_where_most_parent_state_is() -> None:
    inputs = [StreamInput("kafka", "events", 1), StreamInput("kafka", "clicks", 1)]
    old = get_ssp_grouper("group-by-ssp", elasticity_factor=4).group(inputs)
    new = get_ssp_grouper("group-by-ssp", elasticity_factor=2).group(inputs)
    procs = {"p-a": "host-a", "p-b": "host-b", "p-c": "host-c", "p-d": "host-d"}
    # each merged task has two parents; put both parents of every merged task on one host,
    # except events bucket 1 (parents on host-c and host-d: tie -> host-c)
    old_where = {}
    for t in old:
        (s,) = t.partitions
        if s.stream == "events" and s.key_bucket % 2 == 1:
            old_where[t.name] = "host-c" if s.key_bucket == 1 else "host-d"
        else:
            old_where[t.name] = {("events", 0): "host-a", ("clicks", 0): "host-b"}.get(
                (s.stream, s.key_bucket % 2), "host-d"
            )
    prev = {n: "p-" + loc[-1] for n, loc in old_where.items()}
    md = GrouperMetadata(procs, old_where, prev, ssps_of(old))
    got = _assignment(HostAffinityGrouper().group(new, md))
    assert got == {
        "SystemStreamPartition [kafka, clicks, 0, 0]-2": "p-b",
        "SystemStreamPartition [kafka, clicks, 0, 1]-2": "p-d",
        "SystemStreamPartition [kafka, events, 0, 0]-2": "p-a",
        "SystemStreamPartition [kafka, events, 0, 1]-2": "p-c",
    }


def test_host_affinity_unchanged_without_previous_ssps() -> None:
    new = get_ssp_grouper("group-by-partition", elasticity_factor=2).group([EVENTS])
    md = GrouperMetadata({"p-0": "h0", "p-1": "h1"}, {}, {})
    with_ssps = GrouperMetadata({"p-0": "h0", "p-1": "h1"}, {}, {}, FrozenMap())
    assert HostAffinityGrouper().group(new, md) == HostAffinityGrouper().group(new, with_ssps)


def test_conformance_kit_draws_virtual_splits_and_merges() -> None:
    from groupers.testing import check_grouper, virtual_grouper_inputs

    seen: set[tuple[bool, bool]] = set()

    @settings(max_examples=60, database=None)
    @given(virtual_grouper_inputs())
    def shapes(data: GrouperInput) -> None:
        new_names = {t.name for t in data.tasks}
        old_names = set(data.metadata.previous_task_to_ssps)
        seen.add((bool(new_names - old_names), new_names == old_names))

    shapes()
    assert (True, False) in seen  # some draws rename every task (split or merge)
    check_grouper(HostAffinityGrouper(), max_examples=20, virtual_examples=60, hash_seeds=("5",))
