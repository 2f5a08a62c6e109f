"""Per-batch offset ranges (pure): every partition from its start toward its end, a cap shared
in proportion to the lag, and input that cannot be planned refused with the partition named;
the client settings the readers and writers use."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from locality.spark.kafka.client import KafkaClientConfig, KafkaPartition, OffsetRange
from locality.spark.kafka.ranges import OffsetsWentBack, plan_ranges

partitions = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 20), st.integers(0, 10**6),
              st.integers(0, 10**6)),
    min_size=1,
    max_size=12,
    unique_by=lambda t: (t[0], t[1]),
)  # fmt: skip


def _offsets(rows: list[tuple[str, int, int, int]]) -> tuple[dict[KafkaPartition, int], ...]:
    starts = {KafkaPartition(t, p): s for t, p, s, _ in rows}
    ends = {KafkaPartition(t, p): s + lag for t, p, s, lag in rows}
    return starts, ends


@given(partitions)
def test_without_a_cap_every_partition_reads_to_its_end(
    rows: list[tuple[str, int, int, int]],
) -> None:
    starts, ends = _offsets(rows)
    ranges = plan_ranges(starts, ends)
    assert [r.key for r in ranges] == sorted(ends)
    assert all((r.start, r.end) == (starts[r.key], ends[r.key]) for r in ranges)


@given(partitions, st.integers(1, 3 * 10**6))
def test_a_cap_is_shared_in_proportion_to_the_lag(
    rows: list[tuple[str, int, int, int]], cap: int
) -> None:
    starts, ends = _offsets(rows)
    ranges = plan_ranges(starts, ends, max_records=cap)
    lags = {p: ends[p] - starts[p] for p in ends}
    total = sum(lags.values())
    assert [r.key for r in ranges] == sorted(ends)
    assert sum(r.size for r in ranges) == min(cap, total)
    for r in ranges:
        assert r.start == starts[r.key] and r.end <= ends[r.key]
        if total > cap:  # the floor or the ceiling of the partition's exact share
            share = lags[r.key] * cap / total
            assert share - 1 < r.size < share + 1
        else:
            assert r.end == ends[r.key]


def test_leftover_offsets_go_to_the_largest_remainders_then_lower_partitions() -> None:
    starts = {KafkaPartition("t", p): 0 for p in range(3)}
    ends = {KafkaPartition("t", 0): 10, KafkaPartition("t", 1): 10, KafkaPartition("t", 2): 10}
    assert [r.size for r in plan_ranges(starts, ends, max_records=4)] == [2, 1, 1]
    ends[KafkaPartition("t", 2)] = 20  # shares 1, 1, 2 (exact)
    assert [r.size for r in plan_ranges(starts, ends, max_records=4)] == [1, 1, 2]


def test_input_that_cannot_be_planned_names_the_partition() -> None:
    p0, p1 = KafkaPartition("events", 0), KafkaPartition("events", 1)
    with pytest.raises(ValueError, match=r"no start offset for partition.*events-1"):
        plan_ranges({p0: 0}, {p0: 5, p1: 5})
    with pytest.raises(OffsetsWentBack, match="events-0: the batch would start at offset 9"):
        plan_ranges({p0: 9}, {p0: 5})
    with pytest.raises(ValueError, match="non-negative"):
        plan_ranges({p0: -1}, {p0: 5})
    with pytest.raises(ValueError, match="max_records must be at least 1"):
        plan_ranges({p0: 0}, {p0: 5}, max_records=0)
    with pytest.raises(ValueError, match=r"offsets \[5, 4\) are not a range"):
        OffsetRange("events", 0, 5, 4)
    with pytest.raises(ValueError, match="partition -1 is negative"):
        OffsetRange("events", -1, 0, 4)
    assert plan_ranges({}, {}) == []


def test_client_settings() -> None:
    config = KafkaClientConfig("127.0.0.1:9092", {"security.protocol": "PLAINTEXT"})
    assert pickle.loads(pickle.dumps(config)) == config  # shipped to executors with a task
    consumer = config.consumer()
    assert consumer["isolation.level"] == "read_committed"
    assert consumer["enable.auto.commit"] is False and consumer["auto.offset.reset"] == "error"
    assert consumer["security.protocol"] == "PLAINTEXT"
    uncommitted = KafkaClientConfig("h:1", {"isolation.level": "read_uncommitted"}).consumer()
    assert uncommitted["isolation.level"] == "read_uncommitted"  # the caller's settings win
    assert config.producer()["enable.idempotence"] is True
    assert "transactional.id" not in config.producer()
    assert config.producer("q-3-7")["transactional.id"] == "q-3-7"
    with pytest.raises(ValueError, match="transactional_id is empty"):
        config.producer("")
    with pytest.raises(ValueError, match="bootstrap_servers is empty"):
        KafkaClientConfig(" ")
