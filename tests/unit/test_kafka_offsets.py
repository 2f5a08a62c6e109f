"""Where a Kafka query's batch starts each partition (coordinator.streaming.kafka_offsets):
Spark's ``startingOffsets`` for a partition never read, ``failOnDataLoss`` for records retention
deleted before they were read, and bad options named."""

from __future__ import annotations

import pytest
import structlog

from coordinator.streaming.kafka_offsets import DataLossError, StartingOffsets, start_offsets
from locality.spark.kafka import KafkaPartition

P0, P1, P2 = (KafkaPartition("clicks", n) for n in range(3))
FIRST = {P0: 100, P1: 0, P2: 50}
ENDS = {P0: 500, P1: 40, P2: 60}
LOG = structlog.get_logger("test")


def _starts(done: dict[str, int], starting: object = "earliest", fail: bool = True) -> list[int]:
    parsed = StartingOffsets.parse(starting, ["clicks"])  # type: ignore[arg-type]
    found = start_offsets([P0, P1, P2], done, FIRST, ENDS, parsed, fail, LOG)
    return [found[P0], found[P1], found[P2]]


def test_a_partition_never_read_starts_where_starting_offsets_says() -> None:
    assert _starts({}) == [100, 0, 50]
    assert _starts({}, "latest") == [500, 40, 60]
    assert _starts({}, '{"clicks": {"0": 120, "2": -1}}') == [120, 0, 60]
    assert _starts({}, {"clicks": {"0": 7, "1": 99}}) == [100, 40, 50]  # within the log
    assert _starts({"clicks-1": 30}, "latest") == [500, 30, 60]  # read ones continue


def test_records_deleted_before_they_were_read_fail_or_are_skipped() -> None:
    with pytest.raises(
        DataLossError,
        match=r"partition clicks-0: the next record to read is offset 80, but the first still in "
        r"the log is 100 \(retention deleted 20 records",
    ):
        _starts({"clicks-0": 80})
    with structlog.testing.capture_logs() as logs:
        assert _starts({"clicks-0": 80}, fail=False) == [100, 0, 50]
    assert [e["event"] for e in logs] == ["kafka.data_lost"]


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
