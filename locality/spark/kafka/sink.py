"""Write a DataFrame's rows to a topic as records: idempotent, or in one transaction.

The rows' ``key`` and ``value`` columns (names configurable; bytes or strings, strings are
written as UTF-8; null is a record without key, or a tombstone) become one record each, in row
order, to the partition the producer's partitioner picks for the key (librdkafka's default,
``consistent_random``: murmur2 is Java's), or to the row's ``partition`` column when named.

Guarantees (see docs/kafka.md):

- :func:`write_records`: an idempotent producer (``enable.idempotence``, ``acks=all``): a
  producer's retries never duplicate or reorder a record; it returns after every record is
  acknowledged, else raises :class:`KafkaWriteError`. A task that is run again writes its rows
  again: at least once.
- :class:`TransactionalWriter`: all the rows written in one ``with`` block become visible
  together to ``read_committed`` readers, or not at all. Opening a writer with a
  ``transactional.id`` aborts the unfinished transaction of any earlier writer with that id and
  fences it: a later write or commit by the earlier one raises :class:`ProducerFenced`. With a
  ``transactional.id`` per task and batch, an attempt killed mid-batch leaves nothing visible
  and a re-run writes the batch once. Records of an attempt whose transaction committed stay:
  if the run stops after that commit but before the batch's own commit record, the re-run
  writes them a second time. Exactly once therefore needs the batch to be committed by the
  same decision as its transactions (or a re-run to skip tasks whose transaction committed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer

from locality.spark.kafka.client import KafkaClientConfig, as_client_config
from locality.spark.kafka.clients import new_client

__all__ = ["KafkaWriteError", "ProducerFenced", "TransactionalWriter", "write_records"]


class KafkaWriteError(RuntimeError):
    """Records could not be written (the message names the topic and the first error)."""


class ProducerFenced(KafkaWriteError):
    """A newer writer with the same ``transactional.id`` took over; this one may not write."""


def _as_table(data: Any) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if hasattr(data, "columns") and hasattr(data, "dtypes"):  # a pandas DataFrame
        return pa.Table.from_pandas(data, preserve_index=False)
    raise TypeError(
        f"cannot write {type(data).__name__} as records: give an Arrow table or record batch, "
        "or a pandas DataFrame"
    )


def _column(table: pa.Table, name: str | None, role: str) -> list[Any]:
    if name is None:
        return [None] * table.num_rows
    if name not in table.column_names:
        raise ValueError(f"no {role} column {name!r} among the columns {table.column_names}")
    column = table.column(name)
    kind = column.type
    if role == "partition":
        if not pa.types.is_integer(kind):
            raise ValueError(f"the partition column {name!r} is {kind}, not an integer")
        if column.null_count:
            raise ValueError(f"the partition column {name!r} has nulls")
        return list(column.to_pylist())
    if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind) or pa.types.is_null(kind)):  # fmt: skip
        raise ValueError(
            f"the {role} column {name!r} is {kind}: records take bytes or strings (serialize it "
            "first, e.g. to JSON)"
        )
    return list(column.to_pylist())


class _Delivery:
    """Counts acknowledged records and keeps the first failure."""

    def __init__(self) -> None:
        self.acknowledged = 0
        self.failed = 0
        self.first_error: KafkaError | None = None

    def __call__(self, error: KafkaError | None, _message: Any) -> None:
        if error is None:
            self.acknowledged += 1
            return
        self.failed += 1
        self.first_error = self.first_error or error


def _fenced(error: KafkaError) -> bool:
    return error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)


def _raise(topic: str, error: KafkaError, what: str) -> None:
    if _fenced(error):
        raise ProducerFenced(f"{what} on {topic}: a newer writer took over ({error.str()})")
    raise KafkaWriteError(f"{what} on {topic}: {error.str()}")


def _require_topic(producer: Producer, topic: str, timeout_s: float) -> None:
    """Fail at once on a missing topic (librdkafka would wait ``topic.metadata.propagation.max.ms``,
    30 s, before it fails the records)."""
    try:
        found = producer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except KafkaException as exc:
        raise KafkaWriteError(f"no metadata for topic {topic}: {exc.args[0]}") from None
    if found is None or (
        found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    ):
        raise KafkaWriteError(f"topic {topic} does not exist (create it first)")


def _produce(
    producer: Producer,
    topic: str,
    table: pa.Table,
    columns: Sequence[str | None],
    delivery: _Delivery,
) -> int:
    keys = _column(table, columns[0], "key")
    values = _column(table, columns[1], "value")
    partitions = _column(table, columns[2], "partition")
    for key, value, partition in zip(keys, values, partitions, strict=True):
        target = -1 if partition is None else int(partition)  # -1: the partitioner picks
        while True:
            try:
                producer.produce(topic, value, key, target, on_delivery=delivery)
                break
            except BufferError:  # the local queue is full: serve deliveries, then retry
                producer.poll(0.05)
            except KafkaException as exc:
                _raise(topic, exc.args[0], "producing")
        producer.poll(0)
    return int(table.num_rows)


def write_records(
    client: KafkaClientConfig | str,
    topic: str,
    data: Any,
    *,
    key_column: str | None = "key",
    value_column: str = "value",
    partition_column: str | None = None,
    timeout_s: float = 60.0,
) -> int:
    """Write every row of ``data`` (an Arrow table or batch, or a pandas DataFrame) to ``topic``
    with an idempotent producer; returns the number of records, all acknowledged."""
    table = _as_table(data)
    producer = new_client(Producer, as_client_config(client).producer())
    _require_topic(producer, topic, timeout_s)
    delivery = _Delivery()
    count = _produce(producer, topic, table, (key_column, value_column, partition_column), delivery)
    left = producer.flush(timeout_s)
    if delivery.first_error is not None:
        _raise(topic, delivery.first_error, f"{delivery.failed} of {count} records failed")
    if left:
        raise KafkaWriteError(
            f"{left} of {count} records to {topic} unacknowledged after {timeout_s}s"
        )
    return count


class TransactionalWriter:
    """One transaction of a producer with ``transactional_id`` (see the module's guarantees)::

    with TransactionalWriter(client, f"{query}-{task}-{batch}") as tx:
        tx.write("out", table)        # more writes, to any topics, join the transaction
    # committed here; aborted if the block raised
    """

    def __init__(
        self, client: KafkaClientConfig | str, transactional_id: str, *, timeout_s: float = 60.0
    ) -> None:
        self.transactional_id = transactional_id
        self.timeout_s = timeout_s
        self._producer = new_client(Producer, as_client_config(client).producer(transactional_id))
        self._delivery = _Delivery()
        self.written = 0
        self._open = False

    def _call(self, what: str, step: Any, *args: Any) -> None:
        try:
            step(*args)
        except KafkaException as exc:
            _raise(f"transaction {self.transactional_id}", exc.args[0], what)

    def begin(self) -> TransactionalWriter:
        """Fence every earlier writer with this id (aborting its open transaction), then begin."""
        self._call("initializing", self._producer.init_transactions, self.timeout_s)
        self._call("beginning", self._producer.begin_transaction)
        self._open = True
        return self

    def write(
        self,
        topic: str,
        data: Any,
        *,
        key_column: str | None = "key",
        value_column: str = "value",
        partition_column: str | None = None,
    ) -> int:
        """Add the rows of ``data`` to the transaction; returns how many."""
        if not self._open:
            raise KafkaWriteError(f"transaction {self.transactional_id} is not open")
        columns = (key_column, value_column, partition_column)
        _require_topic(self._producer, topic, self.timeout_s)
        count = _produce(self._producer, topic, _as_table(data), columns, self._delivery)
        self.written += count
        return count

    def flush(self) -> None:
        """Wait until every record written so far is on the broker (still uncommitted)."""
        left = self._producer.flush(self.timeout_s)
        if left:
            raise KafkaWriteError(
                f"transaction {self.transactional_id}: {left} records not acknowledged within "
                f"{self.timeout_s}s"
            )

    def commit(self) -> int:
        """Commit: every record written becomes visible; returns how many there were."""
        self._open = False
        self._call("committing", self._producer.commit_transaction, self.timeout_s)
        if self._delivery.first_error is not None:
            _raise(f"transaction {self.transactional_id}", self._delivery.first_error, "writing")
        return self.written

    def abort(self) -> None:
        """Abort: nothing written in this transaction becomes visible."""
        self._open = False
        self._call("aborting", self._producer.abort_transaction, self.timeout_s)

    def mark(self, offsets: Sequence[Any], group_metadata: Any) -> None:
        """Commit consumer-group offsets (``TopicPartition`` s, a consumer's
        ``consumer_group_metadata()``) with this transaction: they count only if it commits."""
        if not self._open:
            raise KafkaWriteError(f"transaction {self.transactional_id} is not open")
        self._call(
            "adding offsets to",
            self._producer.send_offsets_to_transaction,
            list(offsets),
            group_metadata,
            self.timeout_s,
        )

    def close_quietly(self) -> None:
        """Abort an open transaction after an error (the error raised matters more)."""
        if self._open:
            with contextlib.suppress(KafkaWriteError):
                self.abort()

    def __enter__(self) -> TransactionalWriter:
        return self.begin()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._open:
            return
        if exc_type is None:
            self.commit()
        elif not isinstance(exc, ProducerFenced):
            # the original error matters more; the broker aborts the transaction on its timeout
            with contextlib.suppress(KafkaWriteError):
                self.abort()
