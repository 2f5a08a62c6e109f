"""docs/kafka.md's reference blocks run as written on the real broker, one after the other in one
namespace (as a reader would paste them): reading a partition's range, planning a batch's
ranges, a consumer group's offsets, and writing with and without a transaction. Each block's
placeholders (``servers``, ``start``/``end``, ``last_commit_ends``, ``frame``) are what the
page says they are."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from docs_snippets import snippet

from coordinator.launchers.kafka import KafkaBroker
from locality.spark.kafka import (
    KafkaPartition,
    OffsetRange,
    UnknownTopic,
    commit_group_offsets,
    end_offsets,
    partition_counts,
    read_range,
    write_records,
)

pytestmark = pytest.mark.kafka

PAGE = "docs/kafka.md"
RECORDS = 120  # in partition 3 of "events"


def run(name: str, namespace: dict[str, Any]) -> dict[str, Any]:
    exec(compile(snippet(PAGE, name), f"{PAGE}:{name}", "exec"), namespace)
    return namespace


def ensure_topic(broker: KafkaBroker, topic: str, partitions: int) -> None:
    """Create ``topic`` unless the session's broker has it from an earlier run of this test."""
    try:
        partition_counts(broker.bootstrap_servers, [topic])
    except UnknownTopic:
        broker.create_topic(topic, partitions)


@pytest.fixture
def events(kafka_broker: KafkaBroker) -> str:
    """Topic ``events`` (4 partitions), its partition 3 holding :data:`RECORDS` records."""
    servers = kafka_broker.bootstrap_servers
    ensure_topic(kafka_broker, "events", 4)
    rows = pd.DataFrame(
        {"key": [f"k{i}" for i in range(RECORDS)], "value": [str(i) for i in range(RECORDS)]}
    )
    rows["partition"] = 3
    write_records(servers, "events", rows, partition_column="partition")
    return servers


def test_the_reference_blocks_run_as_written(
    kafka_broker: KafkaBroker, events: str, capsys: pytest.CaptureFixture[str]
) -> None:
    servers = events
    end = end_offsets(servers, ["events"])[KafkaPartition("events", 3)]
    start = end - RECORDS + 20  # the last 100 records written
    ns = run("kafka-read-range", {"servers": servers, "start": start, "end": end})
    assert ns["table"].num_rows == 100
    assert ns["table"].column("value").to_pylist()[0] == b"20"
    assert sum(int(n) for n in capsys.readouterr().out.split()) == 100

    ns["last_commit_ends"] = {KafkaPartition("events", 3): start}
    run("kafka-plan-ranges", ns)
    planned = {(r.key.topic, r.key.partition): (r.start, r.end) for r in ns["ranges"]}
    assert planned[("events", 3)] == (start, end)
    assert ns["ends"][KafkaPartition("events", 3)] == end

    commit_group_offsets(servers, "affinity-clicks-1", {KafkaPartition("events", 3): end})
    run("kafka-group-offsets", ns)
    assert ns["offsets"] == {KafkaPartition("events", 3): end}

    ensure_topic(kafka_broker, "counts", 1)
    before = end_offsets(servers, ["counts"])[KafkaPartition("counts", 0)]
    ns["frame"] = pd.DataFrame({"key": ["a", "b"], "value": ["1", "2"]})
    run("kafka-write", ns)
    after = end_offsets(servers, ["counts"], committed_only=False)[KafkaPartition("counts", 0)]
    written = read_range(servers, OffsetRange("counts", 0, before, after))
    values = written.column("value").to_pylist()
    assert values == [b"1", b"2", b"1", b"2"]  # write_records, then the transaction's
