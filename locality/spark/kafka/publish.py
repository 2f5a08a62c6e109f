"""Publishing a committed batch's output to a topic exactly once, with plain transactions.

A task's output of a batch is kept with its checkpoint (durable, per attempt) and published
only after the batch is committed (:mod:`coordinator.streaming.kafka_query`). One publish of one
task's output (:func:`publish_once`):

1. open a transactional producer under the task's stable ``transactional.id``:
   ``initTransactions`` aborts whatever an earlier publisher of the task left open and fences it
   (its later writes and its commit fail);
2. read the task's *publish mark*: the committed offset of the consumer group
   ``<marker group>`` on partition 0 of the output topic, which the publish of batch ``b`` sets
   to ``b + 1`` (the offset is a number Kafka stores for the group, never read from); read with
   ``isolation.level=read_committed``, only committed transactions' marks count;
3. if the mark says the batch is published, stop (a retried publish, an application restart);
   else write the records and the mark **in one transaction** (``sendOffsetsToTransaction``)
   and commit: a ``read_committed`` reader sees the batch's records and the mark together, or
   neither.

So whatever fails, and whenever (the task, its executor, the driver, the broker), each batch's
records are visible exactly once: a publish either committed (its mark stops every later one) or
left nothing visible. A zombie publisher that initialises after the mark was committed reads the
mark and writes nothing.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, TopicPartition

from locality.spark.kafka.client import KafkaClientConfig, as_client_config
from locality.spark.kafka.clients import new_client
from locality.spark.kafka.sink import KafkaWriteError, TransactionalWriter

__all__ = ["publish_once", "published_batch"]


def _marker_consumer(client: KafkaClientConfig, group: str) -> Any:
    settings = {**client.consumer(), "group.id": group, "isolation.level": "read_committed"}
    return new_client(Consumer, settings)


def published_batch(
    client: KafkaClientConfig | str, group: str, topic: str, *, timeout_s: float = 30.0
) -> int:
    """The last batch the mark of ``group`` says is published (-1: none)."""
    consumer = _marker_consumer(as_client_config(client), group)
    try:
        return _mark(consumer, group, topic, timeout_s)
    finally:
        consumer.close()


def _mark(consumer: Any, group: str, topic: str, timeout_s: float) -> int:
    try:
        (found,) = consumer.committed([TopicPartition(topic, 0)], timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaWriteError(f"reading the publish mark of group {group}: {exc}") from None
    return int(found.offset) - 1 if found.offset >= 0 else -1


def publish_once(
    client: KafkaClientConfig | str,
    transactional_id: str,
    group: str,
    topic: str,
    batch: int,
    records: pa.Table,
    *,
    key_column: str | None,
    value_column: str,
    timeout_s: float = 60.0,
) -> int:
    """Publish ``records`` as batch ``batch`` unless its mark says it is published (module
    docstring); returns how many records this call made visible (0: published before)."""
    config = as_client_config(client)
    writer = TransactionalWriter(config, transactional_id, timeout_s=timeout_s).begin()
    consumer = _marker_consumer(config, group)
    try:
        if _mark(consumer, group, topic, timeout_s) >= batch:
            writer.abort()
            return 0
        if records.num_rows:
            writer.write(topic, records, key_column=key_column, value_column=value_column)
        writer.mark([TopicPartition(topic, 0, batch + 1)], consumer.consumer_group_metadata())
        return writer.commit()
    except BaseException:
        writer.close_quietly()
        raise
    finally:
        consumer.close()
