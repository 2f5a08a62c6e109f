"""locality.spark.kafka: Kafka for tasks that own their partitions (confluent-kafka, Arrow).

- :mod:`~locality.spark.kafka.client`: :class:`KafkaClientConfig` (bootstrap servers and
  librdkafka settings, picklable), :class:`KafkaPartition`, :class:`OffsetRange`;
- :mod:`~locality.spark.kafka.ranges`: pure: a batch's offset ranges under a per-batch cap
  (:func:`plan_ranges`);
- :mod:`~locality.spark.kafka.admin`: driver side: topics, partition counts, beginning and end
  offsets;
- :mod:`~locality.spark.kafka.reader`: executor side: one partition's ``[start, end)`` straight
  from the broker as Arrow (:func:`read_range`);
- :mod:`~locality.spark.kafka.sink`: a DataFrame's rows as records, idempotent
  (:func:`write_records`) or in one transaction (:class:`TransactionalWriter`).

Imports the standard library, confluent-kafka and pyarrow (the ``spark`` extra); nothing from
``coordinator``, ``groupers`` or ``metadata``. ``client`` and ``ranges`` import no client
library. Re-exports the modules' public names.
"""

from __future__ import annotations

from locality.spark.kafka.admin import (
    KafkaAdminError,
    UnknownTopic,
    add_partitions,
    beginning_offsets,
    commit_group_offsets,
    create_topic,
    end_offsets,
    group_offsets,
    partition_counts,
)
from locality.spark.kafka.client import (
    LIBRDKAFKA_LOGGER,
    KafkaClientConfig,
    KafkaPartition,
    OffsetRange,
    as_client_config,
)
from locality.spark.kafka.clients import KafkaOptionError
from locality.spark.kafka.ranges import OffsetsWentBack, plan_ranges
from locality.spark.kafka.reader import (
    RECORD_SCHEMA,
    RangeNotReadable,
    iter_range,
    read_range,
    read_ranges,
)
from locality.spark.kafka.sink import (
    KafkaWriteError,
    ProducerFenced,
    TransactionalWriter,
    write_records,
)

__all__ = [
    "LIBRDKAFKA_LOGGER",
    "RECORD_SCHEMA",
    "KafkaAdminError",
    "KafkaOptionError",
    "KafkaClientConfig",
    "KafkaPartition",
    "KafkaWriteError",
    "OffsetRange",
    "OffsetsWentBack",
    "ProducerFenced",
    "RangeNotReadable",
    "TransactionalWriter",
    "UnknownTopic",
    "add_partitions",
    "as_client_config",
    "beginning_offsets",
    "commit_group_offsets",
    "create_topic",
    "end_offsets",
    "group_offsets",
    "iter_range",
    "partition_counts",
    "plan_ranges",
    "read_range",
    "read_ranges",
    "write_records",
]
