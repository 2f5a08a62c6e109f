"""Executor side of a stateful query's Kafka output: a task's output rows written to a topic from
the executor that produced them.

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

from dataclasses import dataclass
from typing import TYPE_CHECKING

from locality.spark.state.durable import Storage, output_name

if TYPE_CHECKING:
    import pandas as pd

    from locality.spark.kafka import KafkaClientConfig

__all__ = [
    "KeptOutputMissing",
    "KafkaTaskOutput",
    "KeptOutput",
    "Publisher",
    "publish_group",
    "transactional_id",
]


class KeptOutputMissing(ValueError):
    """A batch's kept output is gone before it was published: it cannot be published."""


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
            raise KeptOutputMissing(
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
