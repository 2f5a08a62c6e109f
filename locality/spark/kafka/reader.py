"""Executor side: read one partition's offset range straight from the broker, as Arrow.

:func:`iter_range` assigns the partition to a consumer of its own (no group, no commits),
starts at ``start`` and consumes in batches until it has passed ``end - 1``, yielding Arrow
record batches of :data:`RECORD_SCHEMA` (the columns of Spark's Kafka source). Offsets without a
record (compacted away, transaction markers, aborted records) are skipped: the read ends at the
first record at or past ``end``, or when the consumer reaches the end of the partition at or past
``end`` (``end`` may be a gap). It reads committed records only (``read_committed``; end offsets
from :func:`locality.spark.kafka.admin.end_offsets` are last stable offsets).

A broker that goes away mid-read (a restart) is waited for: the read fails only when it makes no
progress for ``stall_timeout_s``. A range that cannot be read is a :class:`RangeNotReadable`
naming it: the partition does not exist, its first offsets were deleted (retention), or the
records up to ``end`` did not arrive in time (an ``end`` past the partition's end).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import pyarrow as pa
from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from locality.spark.kafka.client import KafkaClientConfig, OffsetRange, as_client_config
from locality.spark.kafka.clients import new_client

__all__ = ["RECORD_SCHEMA", "RangeNotReadable", "iter_range", "read_range", "read_ranges"]

#: The records' columns (as Spark's Kafka source names them).
RECORD_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)
_FAILING = {
    KafkaError._AUTO_OFFSET_RESET: "its first offsets were deleted (retention) or it is shorter",
    KafkaError.OFFSET_OUT_OF_RANGE: "its first offsets were deleted (retention) or it is shorter",
    KafkaError._UNKNOWN_PARTITION: "the partition does not exist",
    KafkaError._UNKNOWN_TOPIC: "the topic does not exist",
    KafkaError.UNKNOWN_TOPIC_OR_PART: "the topic or partition does not exist",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "reading the topic is not authorized",
}


class RangeNotReadable(RuntimeError):
    """An offset range could not be read (the message names the range and why)."""


class _Columns:
    """Column lists of the records read so far, turned into one Arrow batch."""

    def __init__(self, rng: OffsetRange) -> None:
        self.rng = rng
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.types: list[int] = []

    def add(self, message: Message, offset: int) -> None:
        self.keys.append(message.key())
        self.values.append(message.value())
        self.offsets.append(offset)
        kind, stamp = message.timestamp()
        self.timestamps.append(None if kind == TIMESTAMP_NOT_AVAILABLE else stamp)
        self.types.append(kind)

    def __len__(self) -> int:
        return len(self.offsets)

    def batch(self) -> pa.RecordBatch:
        n = len(self.offsets)
        columns = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([self.rng.topic] * n, pa.string()),
            pa.array([self.rng.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, RECORD_SCHEMA.field("timestamp").type),
            pa.array(self.types, pa.int32()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=RECORD_SCHEMA)


def _check_partition(consumer: Consumer, rng: OffsetRange, timeout_s: float) -> None:
    try:
        metadata = consumer.list_topics(rng.topic, timeout=timeout_s)
    except KafkaException as exc:
        raise RangeNotReadable(f"{rng}: no metadata for topic {rng.topic}: {exc}") from None
    topic = metadata.topics.get(rng.topic)
    if topic is None or (
        topic.error is not None and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    ):
        raise RangeNotReadable(f"{rng}: topic {rng.topic} does not exist")
    if topic.error is not None:
        raise RangeNotReadable(f"{rng}: topic {rng.topic} cannot be read: {topic.error}")
    if rng.partition not in topic.partitions:
        raise RangeNotReadable(
            f"{rng}: topic {rng.topic} has {len(topic.partitions)} partitions, "
            f"no partition {rng.partition}"
        )


def _consume(
    consumer: Consumer, rng: OffsetRange, batch_size: int, stall_timeout_s: float, poll_s: float
) -> Iterator[pa.RecordBatch]:
    position = rng.start  # every offset below it is read (or has no record)
    columns = _Columns(rng)
    last_progress = time.monotonic()
    while position < rng.end:
        # the rest of the batch, or the rest of the range and the end-of-partition event
        wanted = min(batch_size - len(columns), rng.end - position + 1)
        before = position
        for message in consumer.consume(num_messages=wanted, timeout=poll_s):
            error, offset = message.error(), message.offset()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    if offset is not None and offset >= rng.end:
                        position = rng.end
                elif error.code() in _FAILING or error.fatal():
                    reason = _FAILING.get(error.code(), "a fatal client error")
                    raise RangeNotReadable(f"{rng}: {reason} ({error.str()})")
                continue  # transient (e.g. the broker is restarting): keep polling
            if offset is None or offset < position:
                continue
            if offset >= rng.end:
                position = rng.end
                break
            columns.add(message, offset)
            position = offset + 1
        if position > before:
            last_progress = time.monotonic()
        if len(columns) >= batch_size or (position >= rng.end and len(columns)):
            yield columns.batch()
            columns = _Columns(rng)
        if time.monotonic() - last_progress > stall_timeout_s:
            raise RangeNotReadable(
                f"{rng}: read up to offset {position} and no further within {stall_timeout_s}s "
                "(is the end past the partition's end, or the broker down?)"
            )


def iter_range(
    client: KafkaClientConfig | str,
    rng: OffsetRange,
    *,
    batch_size: int = 50_000,
    stall_timeout_s: float = 60.0,
    poll_s: float = 0.1,
) -> Iterator[pa.RecordBatch]:
    """The records of ``rng`` in offset order, as Arrow batches of up to ``batch_size`` rows."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1 (got {batch_size})")
    if rng.size == 0:
        return
    consumer = new_client(Consumer, as_client_config(client).consumer())
    try:
        _check_partition(consumer, rng, stall_timeout_s)
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        yield from _consume(consumer, rng, batch_size, stall_timeout_s, poll_s)
    finally:
        consumer.close()


def read_range(
    client: KafkaClientConfig | str,
    rng: OffsetRange,
    *,
    batch_size: int = 50_000,
    stall_timeout_s: float = 60.0,
) -> pa.Table:
    """The records of ``rng`` as one Arrow table of :data:`RECORD_SCHEMA`."""
    batches = iter_range(client, rng, batch_size=batch_size, stall_timeout_s=stall_timeout_s)
    return pa.Table.from_batches(list(batches), schema=RECORD_SCHEMA)


def read_ranges(
    client: KafkaClientConfig | str,
    ranges: Iterable[OffsetRange],
    *,
    batch_size: int = 50_000,
    stall_timeout_s: float = 60.0,
) -> pa.Table:
    """The records of several ranges (e.g. partition 3 of every input topic), one after the
    other, as one table."""
    config = as_client_config(client)
    batches = [
        batch
        for rng in ranges
        for batch in iter_range(config, rng, batch_size=batch_size, stall_timeout_s=stall_timeout_s)
    ]
    return pa.Table.from_batches(batches, schema=RECORD_SCHEMA)
