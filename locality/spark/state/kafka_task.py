"""Executor side of a Kafka query whose tasks own their partitions: a task's records of a batch,
read straight from the broker on the executor that runs it (Samza's model), and its output
written to a topic from there.

Task ``Partition p`` (``group-by-partition``) reads partition p of every input topic, each over
the batch's offset range ``[start, end)`` the driver planned (:mod:`locality.spark.kafka`). A
virtual task (SEP-32: ``Partition p`` split into ``f`` key buckets) reads the whole partition
and keeps the records whose key hashes to its bucket (``key_hash(key) mod f``; a record without
a key hashes its offset, as SEP-32 says); so each of the ``f`` tasks of a partition reads it once.

The records become the function's columns through ``decode`` (on the executor; default: the
key and the value as UTF-8 strings, plus Spark's Kafka columns ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType``), and every row gets the task's key group (one per
task: ``p x f + bucket``).

:class:`KafkaTaskOutput` writes a task's output rows to a topic: in one Kafka transaction per
task and batch under one stable ``transactional.id`` per task (``<query>-<task>``): an attempt
opening its writer aborts any transaction an earlier attempt of the task left open and fences
that attempt's writer, so a reader with ``read_committed`` sees a task's batch whole or not at
all; or with an idempotent producer. Fencing is "the last to initialise wins": a zombie attempt
that opens its writer *after* the live attempt committed commits its own copy. So delivery is
**at least once**: that zombie, or a batch whose tasks wrote their output but which was not
committed (the driver failed before its commit record) and runs again, writes the output
again. Imports confluent-kafka (through
:mod:`locality.spark.kafka`), pyarrow and numpy lazily.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from locality.spark.state.durable import Storage, output_name
from locality.spark.state.pinned_task import GROUP_COLUMN

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from locality.spark.kafka import KafkaClientConfig, OffsetRange

__all__ = [
    "KafkaDecodeError",
    "KafkaTaskInput",
    "KafkaTaskOutput",
    "KeptOutput",
    "Publisher",
    "decode_utf8",
    "in_bucket",
    "publish_group",
    "transactional_id",
]


class KafkaDecodeError(ValueError):
    """A task's records could not be turned into the function's columns."""


def decode_utf8(records: pa.Table) -> pa.Table:
    """The default ``decode``: ``key`` and ``value`` as UTF-8 strings, the other columns as read."""
    import pyarrow as pa

    try:
        key = records.column("key").cast(pa.string())
        value = records.column("value").cast(pa.string())
    except pa.ArrowInvalid as exc:
        raise KafkaDecodeError(
            f"a record's key or value is not UTF-8 text ({exc}); pass decode= to read it"
        ) from None
    return records.set_column(0, "key", key).set_column(1, "value", value)


def in_bucket(
    records: pa.Table, bucket: int, factor: int, key_hash: Callable[..., int]
) -> pa.Table:
    """The records whose key is in SEP-32 bucket ``bucket`` of ``factor`` (a null key: its
    offset's). Each distinct key is hashed once."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if factor == 1 or records.num_rows == 0:
        return records
    encoded = pc.dictionary_encode(records.column("key")).combine_chunks()
    buckets = np.array(
        [key_hash(bytes(k)) % factor for k in encoded.dictionary.to_pylist()] or [0], dtype=np.int64
    )
    indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
    keep = buckets[indices] == bucket
    nulls = np.asarray(encoded.indices.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if nulls.any():
        offsets = records.column("offset").to_numpy()
        by_offset = np.array([key_hash(None, offset=int(o)) % factor == bucket for o in offsets])
        keep = np.where(nulls, by_offset, keep)
    return records.filter(pa.array(keep))


@dataclass(frozen=True)
class KafkaTaskInput:
    """The ``source`` of a Kafka query's pinned tasks: task -> its records of the batch, read
    whole into one table (the runner sorts it by key in memory, so this path's executor memory
    grows with the batch: the records come from the broker in offset order, not by key, and
    only a sort that spills could bound it; ``readStream.format("affinity-kafka")`` into
    ``stateful_foreach_batch`` has Spark's sort do that)."""

    client: KafkaClientConfig
    ranges: Mapping[str, tuple[OffsetRange, ...]]  # task -> its partition of every input topic
    buckets: Mapping[
        str, tuple[int, int]
    ]  # task -> (bucket, factor); factor 1: the whole partition
    key_groups: Mapping[str, int]  # task -> its key group
    key_hash: Callable[..., Any]  # SEP-32's stable hash (groupers.keys.stable_hash)
    decode: Callable[[pa.Table], pa.Table] = decode_utf8

    def __call__(self, task: str) -> pa.Table:
        import pyarrow as pa

        from locality.spark.kafka import read_ranges

        records = read_ranges(self.client, self.ranges[task])
        bucket, factor = self.buckets[task]
        records = in_bucket(records, bucket, factor, self.key_hash)
        table = self.decode(records)
        if not isinstance(table, pa.Table):
            raise KafkaDecodeError(
                f"decode must return a pyarrow Table, got {type(table).__name__}"
            )
        group = pa.array([self.key_groups[task]] * table.num_rows, pa.int64())
        return table.append_column(GROUP_COLUMN, group)


@dataclass(frozen=True)
class KafkaTaskOutput:
    """The ``deliver`` of a Kafka query's pinned tasks: a task's output rows to ``topic``."""

    client: KafkaClientConfig
    topic: str
    query: str  # the query's name in transactional ids
    key_column: str | None = "key"  # the record key (as text); None: no key
    value_column: str | None = None  # the record value (bytes or text); None: the row as JSON
    transactional: bool = True

    def __call__(self, task: str, batch: int, output: pd.DataFrame, token: str = "") -> int:
        from locality.spark.kafka import TransactionalWriter, write_records

        key, value = self.key_column, self.value_column or "_affinity_json"
        output = _records(output, self.key_column, self.value_column)
        if not self.transactional:
            if not len(output):
                return 0
            return write_records(
                self.client, self.topic, output, key_column=key, value_column=value
            )
        with TransactionalWriter(self.client, transactional_id(self.query, task)) as transaction:
            if not len(output):
                return 0
            return transaction.write(self.topic, output, key_column=key, value_column=value)


@dataclass(frozen=True)
class KeptOutput:
    """The ``deliver`` of an exactly-once Kafka query: a task attempt's output records kept with
    its checkpoint (Arrow IPC in the query's durable storage, named for the batch, the task and
    the attempt's token), for :class:`Publisher` to publish once the batch is committed."""

    storage: Storage
    key_column: str | None = "key"
    value_column: str | None = None

    def __call__(self, task: str, batch: int, output: pd.DataFrame, token: str = "") -> int:
        import pyarrow as pa

        records = _records(output, self.key_column, self.value_column)
        value = self.value_column or "_affinity_json"
        columns = [c for c in (self.key_column, value) if c is not None]
        table = (
            pa.Table.from_pandas(records[columns], preserve_index=False)
            if len(records)
            else pa.table({c: pa.array([], pa.string()) for c in columns})
        )
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as stream:
            stream.write_table(table)
        self.storage.put_output(output_name(batch, task, token), sink.getvalue().to_pybytes())
        return int(table.num_rows)


@dataclass(frozen=True)
class Publisher:
    """Publishes one task's kept output of a committed batch exactly once (run on an executor:
    :func:`locality.spark.kafka.publish.publish_once`); payload ``(batch, token)``."""

    storage: Storage
    client: KafkaClientConfig
    topic: str
    query: str
    key_column: str | None = "key"
    value_column: str | None = None

    def __call__(self, task: str, payload: tuple[int, str]) -> int:
        import pyarrow as pa

        from locality.spark.kafka.publish import publish_once, published_batch

        batch, token = payload
        group = publish_group(self.query, task)
        data = self.storage.read_output(output_name(batch, task, token))
        if data is None:  # published, and pruned after (a new driver publishing what is owed)
            if published_batch(self.client, group, self.topic) >= batch:
                return 0
            raise KafkaDecodeError(
                f"batch {batch}, task {task}: its kept output {output_name(batch, task, token)} "
                "is missing: it cannot be published"
            )
        records = pa.ipc.open_stream(data).read_all()
        return publish_once(
            self.client,
            transactional_id(self.query, task),
            group,
            self.topic,
            batch,
            records,
            key_column=self.key_column,
            value_column=self.value_column or "_affinity_json",
        )


def publish_group(query: str, task: str) -> str:
    """The consumer group whose offset marks a task's last published batch."""
    return f"{query}-{task}-published"


def transactional_id(query: str, task: str) -> str:
    """The one ``transactional.id`` of a task of a query, stable across batches and attempts
    (the broker keeps each id it sees for ``transactional.id.expiration.ms``: an id per batch
    would pile up ~100k a day at 12 tasks and a 10 s trigger)."""
    return f"{query}-{task}"


def _records(output: pd.DataFrame, key: str | None, value: str | None) -> pd.DataFrame:
    """``output`` with its key column as text, and the row as a JSON object when ``value`` is
    None (in ``_affinity_json``)."""
    if not len(output):
        return output
    records = output.copy()
    if value is None:
        records["_affinity_json"] = output.to_json(orient="records", lines=True).splitlines()
    if key is not None and key in records.columns:
        records[key] = records[key].map(
            lambda k: k if k is None or isinstance(k, bytes | str) else str(k)
        )
    return records


def _text(value: object) -> object:
    return value if value is None or isinstance(value, bytes | str) else str(value)
