"""Reading partitions' offset ranges straight from a real broker: exact counts and offsets, gaps
at the end of a range, a broker killed mid-read, partitions added, and ranges that cannot be
read."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable

import pandas as pd
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from coordinator.launchers.kafka import KafkaBroker
from locality.spark.kafka import (
    RECORD_SCHEMA,
    KafkaClientConfig,
    KafkaPartition,
    OffsetRange,
    RangeNotReadable,
    TransactionalWriter,
    UnknownTopic,
    add_partitions,
    beginning_offsets,
    end_offsets,
    iter_range,
    partition_counts,
    plan_ranges,
    read_range,
    read_ranges,
    write_records,
)

pytestmark = pytest.mark.kafka

N = 20_000
KEYS = 97


def _rows(first: int, count: int) -> pd.DataFrame:
    numbers = range(first, first + count)
    keys = [f"user-{i % KEYS}" for i in numbers]
    return pd.DataFrame({"key": keys, "value": list(map(str, numbers))})


def test_each_partition_range_is_read_exactly(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(4)
    assert write_records(servers, topic, _rows(0, N)) == N

    assert partition_counts(servers, [topic]) == {topic: 4}
    ends = end_offsets(servers, [topic])
    assert sorted(ends) == [KafkaPartition(topic, p) for p in range(4)]
    assert sum(ends.values()) == N and min(ends.values()) > 0
    assert set(beginning_offsets(servers, [topic]).values()) == {0}

    seen: list[int] = []
    partition_of_key: dict[bytes, set[int]] = defaultdict(set)
    for part, end in ends.items():
        table = read_range(servers, OffsetRange(topic, part.partition, 0, end))
        assert table.schema == RECORD_SCHEMA
        assert table.column("offset").to_pylist() == list(range(end))
        assert set(table.column("partition").to_pylist()) == {part.partition}
        assert set(table.column("topic").to_pylist()) == {topic}
        values = [int(v) for v in table.column("value").to_pylist()]
        for key, value in zip(table.column("key").to_pylist(), values, strict=True):
            partition_of_key[key].add(part.partition)
            assert int(key.split(b"-")[1]) == value % KEYS
        by_key: dict[bytes, list[int]] = defaultdict(list)
        for key, value in zip(table.column("key").to_pylist(), values, strict=True):
            by_key[key].append(value)
        assert all(vs == sorted(vs) for vs in by_key.values())  # a key's records keep their order
        seen += values
    assert sorted(seen) == list(range(N))  # every record once
    assert all(len(parts) == 1 for parts in partition_of_key.values())  # keyed: co-partitioned

    part, end = next(iter(ends.items()))
    middle = OffsetRange(topic, part.partition, end // 3, 2 * end // 3)
    batches = list(iter_range(servers, middle, batch_size=500))
    assert len(batches) > 1 and all(b.num_rows <= 500 for b in batches)
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(middle.start, middle.end))
    assert read_range(servers, OffsetRange(topic, part.partition, 7, 7)).num_rows == 0


def test_a_range_ending_in_offsets_without_records_ends_at_its_end(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    """Transaction markers and aborted records leave offsets a reader never sees; a range whose
    last offsets are such gaps still ends (at once, not by a time-out)."""
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(1)
    committed = pd.DataFrame({"key": ["a"] * 5, "value": [f"c{i}" for i in range(5)]})
    with TransactionalWriter(servers, f"{topic}-tx") as tx:  # offsets 0-4, marker at 5
        tx.write(topic, committed)
    with (
        pytest.raises(RuntimeError, match="abandon"),
        TransactionalWriter(servers, f"{topic}-tx") as tx,
    ):  # offsets 6-8 aborted, marker at 9
        tx.write(topic, committed.head(3))
        tx.flush()
        raise RuntimeError("abandon the batch")
    end = end_offsets(servers, [topic])[KafkaPartition(topic, 0)]
    assert end == 10

    for start, stop, expected in [(0, 10, 5), (0, 6, 5), (3, 10, 2), (5, 10, 0), (6, 9, 0)]:
        began = time.monotonic()
        table = read_range(servers, OffsetRange(topic, 0, start, stop), stall_timeout_s=10)
        assert table.num_rows == expected, (start, stop)
        assert time.monotonic() - began < 5, f"[{start}, {stop}) waited for offsets it never gets"
    assert read_range(servers, OffsetRange(topic, 0, 0, 10)).column("value").to_pylist() == [
        f"c{i}".encode() for i in range(5)
    ]


def test_an_open_transaction_holds_the_end_offset_back(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(1)
    write_records(servers, topic, _rows(0, 10))
    part = KafkaPartition(topic, 0)
    with TransactionalWriter(servers, f"{topic}-tx") as tx:
        tx.write(topic, _rows(10, 5))
        tx.flush()
        assert end_offsets(servers, [topic])[part] == 10  # the last stable offset
        assert end_offsets(servers, [topic], committed_only=False)[part] == 15
        assert read_range(servers, OffsetRange(topic, 0, 0, 10)).num_rows == 10
    assert end_offsets(servers, [topic])[part] == 16  # 15 records and the commit marker
    assert read_range(servers, OffsetRange(topic, 0, 0, 16)).num_rows == 15


def test_a_read_goes_on_across_a_broker_kill_and_restart(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(1)
    write_records(servers, topic, _rows(0, N))
    small_fetches = KafkaClientConfig(
        servers,
        {"queued.max.messages.kbytes": "16", "fetch.max.bytes": "16384",
         "message.max.bytes": "16384", "max.partition.fetch.bytes": "16384",
         "reconnect.backoff.max.ms": "200"},
    )  # fmt: skip
    batches = iter_range(small_fetches, OffsetRange(topic, 0, 0, N), batch_size=200)
    first = next(batches)
    kafka_broker.kill()
    restarted = threading.Thread(target=kafka_broker.start)
    restarted.start()
    rest = list(batches)  # waits for the broker while it is down
    restarted.join()
    offsets = [o for b in [first, *rest] for o in b.column("offset").to_pylist()]
    assert offsets == list(range(N))
    assert first.num_rows < N // 10  # most of the range was fetched after the restart

    write_records(servers, topic, _rows(N, 100))  # the restarted broker takes writes again
    assert read_range(servers, OffsetRange(topic, 0, N, N + 100)).num_rows == 100


def test_partitions_added_to_a_topic_are_read_from_their_beginning(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(2)
    write_records(servers, topic, _rows(0, 1_000))
    first_ends = end_offsets(servers, [topic])

    add_partitions(servers, topic, 5)
    assert partition_counts(servers, [topic]) == {topic: 5}
    ends = end_offsets(servers, [topic])
    assert sorted(ends) == [KafkaPartition(topic, p) for p in range(5)]
    new = set(ends) - set(first_ends)
    assert {ends[p] for p in new} == {0}

    write_records(servers, topic, _rows(1_000, 2_000))
    ends = end_offsets(servers, [topic])
    assert all(ends[p] > 0 for p in new)  # keyed records reach the new partitions
    starts = {**beginning_offsets(servers, [topic]), **first_ends}  # batch 2 after batch 1
    table = read_ranges(servers, plan_ranges(starts, ends))
    assert sorted(int(v) for v in table.column("value").to_pylist()) == list(range(1_000, 3_000))


def test_ranges_that_cannot_be_read_say_why(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(2)
    write_records(servers, topic, _rows(0, 100), partition_column=None)
    ends = end_offsets(servers, [topic])
    end0 = ends[KafkaPartition(topic, 0)]

    with pytest.raises(RangeNotReadable, match="has 2 partitions, no partition 2"):
        read_range(servers, OffsetRange(topic, 2, 0, 1))
    with pytest.raises(RangeNotReadable, match="does not exist"):
        read_range(servers, OffsetRange(f"{topic}-missing", 0, 0, 1))
    with pytest.raises(UnknownTopic, match="missing"):
        end_offsets(servers, [topic, f"{topic}-missing"])
    with pytest.raises(RangeNotReadable, match="no further within 2"):
        read_range(servers, OffsetRange(topic, 0, 0, end0 + 5), stall_timeout_s=2)

    admin = AdminClient({"bootstrap.servers": servers})
    deleted = admin.delete_records([TopicPartition(topic, 0, end0 // 2)])
    next(iter(deleted.values())).result(timeout=30)
    assert beginning_offsets(servers, [topic])[KafkaPartition(topic, 0)] == end0 // 2
    with pytest.raises(RangeNotReadable, match="deleted"):
        read_range(servers, OffsetRange(topic, 0, 0, end0), stall_timeout_s=10)
    assert read_range(servers, OffsetRange(topic, 0, end0 // 2, end0)).num_rows == end0 - end0 // 2
