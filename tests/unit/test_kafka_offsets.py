"""A Kafka query's offsets (coordinator.streaming.kafka_offsets): bad ``starting_offsets`` named,
and the offsets a commit keeps checked against Spark's plan."""

from __future__ import annotations

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from coordinator.streaming.kafka_offsets import (
    OffsetsBehindError,
    StartingOffsets,
    spark_batch_offsets,
)
from locality.spark.kafka import KafkaPartition

P0, P1, P2 = (KafkaPartition("clicks", n) for n in range(3))
LOG = structlog.get_logger("test")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("newest", "must be 'earliest', 'latest' or offsets per partition"),
        ('{"other": {"0": 1}}', "names topic 'other', not an input topic"),
        ({"clicks": {"x": 1}}, r"\['x'\] = 1: a partition number and an offset"),
        ({"clicks": {"0": -3}}, r"\['0'\] = -3"),
        ({"clicks": [1, 2]}, "must map partitions to offsets"),
    ],
)
def test_bad_starting_offsets_are_named(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StartingOffsets.parse(value, ["clicks"])  # type: ignore[arg-type]


# Over Spark's own Kafka source: the offsets a commit keeps, checked against Spark's plan.


def test_spark_offsets_carry_the_commit_forward_and_advance_what_the_batch_read() -> None:
    done = {"clicks-0": 100, "clicks-1": 40}
    ranges = {P0: (100, 180), P2: (0, 7)}  # P1 had nothing new: Spark planned no partition
    assert spark_batch_offsets(done, ranges, LOG) == {
        "clicks-0": 180,
        "clicks-1": 40,
        "clicks-2": 7,
    }
    assert spark_batch_offsets({}, {}, LOG) == {}


def test_a_batch_behind_the_state_is_refused_naming_each_partition() -> None:
    with pytest.raises(
        OffsetsBehindError,
        match=r"reads clicks-1 from 0 \(state counted to 40\): the records before the state's "
        r"offsets would be counted twice",
    ):
        spark_batch_offsets({"clicks-0": 100, "clicks-1": 40}, {P0: (100, 120), P1: (0, 60)}, LOG)


def test_a_batch_past_the_state_is_logged_as_records_lost() -> None:
    with structlog.testing.capture_logs() as logs:
        found = spark_batch_offsets({"clicks-0": 100}, {P0: (130, 150)}, LOG)
    assert found == {"clicks-0": 150}
    assert [(e["event"], e["expected"], e["first"]) for e in logs] == [
        ("kafka.data_lost", 100, 130)
    ]


@given(
    st.dictionaries(st.integers(0, 5), st.integers(0, 1000)),
    st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 10), st.integers(0, 1000))),
)
def test_a_replay_from_the_commit_gives_the_same_offsets(
    before: dict[int, int], reads: dict[int, tuple[int, int]]
) -> None:
    """A batch that starts each partition at the commit's offset (as Spark's replay of a batch
    id does) is never refused, keeps every partition and ends each one it read at ``until``."""
    done = {f"clicks-{p}": o for p, o in before.items()}
    ranges = {
        KafkaPartition("clicks", p): (before.get(p, 0), before.get(p, 0) + n)
        for p, (_, n) in reads.items()
    }
    found = spark_batch_offsets(done, ranges, LOG)
    assert set(found) == set(done) | {str(p) for p in ranges}
    for p, (start, until) in ranges.items():
        assert found[str(p)] == until and until >= start
    for name, offset in done.items():
        assert found[name] >= offset
    assert spark_batch_offsets(done, ranges, LOG) == found  # a replay: the same commit
