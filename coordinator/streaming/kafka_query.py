"""A stateful Kafka query whose tasks own their partitions, in one call:
:func:`stateful_kafka_query` builds the Structured Streaming query docs/kafka.md writes by hand,
and runs it.

It is a thin convenience over the one path every stateful Kafka query takes:

- the stream is Spark's own Kafka source with its partitions pinned
  (``spark.readStream.format("affinity-kafka")``, :mod:`locality.spark.kafka_source`): the job
  config's input topics subscribed, one input partition per affinity task
  (``affinity.tasksPerPartition``: the job's elasticity factor), ``kafka.isolation.level``
  ``read_committed``, ``startingOffsets``/``maxOffsetsPerTrigger``/``failOnDataLoss`` from this
  query's own arguments, and any other option of Spark's Kafka source in ``source_options``;
- ``decode`` turns Kafka's records (``key``, ``value``, ``topic``, ``partition``, ``offset``,
  ``timestamp``, ``timestampType``) into the function's rows: by default ``key`` and ``value``
  cast to strings in Spark SQL; a function of an Arrow table runs as a ``mapInArrow`` (narrow:
  each task still runs where its partition is read, its rows streamed batch by batch);
- the ``foreachBatch`` handler is a :class:`~coordinator.streaming.query.StatefulQuery`
  (:attr:`KafkaQuery.handler`): no shuffle, each task on its executor, the commit record with
  each task's checkpoint token and each partition's next offset, the output to a topic exactly
  once (``output_topic=``), a partition added placed as a new task;
- Spark keeps the offsets (its checkpoint: ``checkpoint_location``, by default under the job's
  ``state.checkpoint_dir``), so progress reports, listeners, ``awaitTermination`` and the Spark
  UI's streaming tab all work.

:meth:`KafkaQuery.start` starts it as a long-running Spark query (any trigger);
:meth:`KafkaQuery.run_batch` runs one batch of what is new (a ``Trigger.AvailableNow`` run the
source ends after one batch: its option ``affinity.availableNowBatches``) and
:meth:`KafkaQuery.run` every batch up to the offsets latest when it starts. As in Spark, a batch
runs only when records are new: a key's processing-time timeout fires at the next batch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, Unpack

from coordinator.config import JobConfig
from coordinator.streaming.kafka_layout import KafkaLayoutError, config_layout
from coordinator.streaming.kafka_offsets import StartingOffsets, batch_cap
from coordinator.streaming.kafka_progress import consumer_group
from coordinator.streaming.options import QueryOptions
from coordinator.streaming.query import StatefulQuery
from coordinator.streaming.runtime import (
    BatchReport,
    StreamingBatchError,
    StreamingUsageError,
    failure_cause,
)
from locality.spark.kafka import (
    KafkaClientConfig,
    KafkaPartition,
    as_client_config,
    partition_counts,
)
from locality.spark.kafka_source import KAFKA_FORMAT, RUN_OPTION, TASKS_OPTION

__all__ = ["KafkaQuery", "stateful_kafka_query"]

#: An Arrow table of Kafka records to an Arrow table of the function's rows.
Decode = Callable[[Any], Any]


class KafkaQuery:
    """A stateful Kafka query (module docstring): :meth:`start`, :meth:`run_batch`, :meth:`run`."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        spark: Any,
        kafka: KafkaClientConfig | str,
        output_schema: Any,
        state_schema: Any,
        config: JobConfig,
        key_columns: Iterable[str] = ("key",),
        sink: Callable[[Any, int], None] | None = None,
        decode: Decode | None = None,
        max_records_per_batch: int | Literal["default"] | None = "default",
        starting_offsets: str | Mapping[str, Any] = "earliest",
        fail_on_data_loss: bool = True,
        source_options: Mapping[str, Any] | None = None,
        checkpoint_location: str | None = None,
        event_time: Any = None,
        **options: Unpack[QueryOptions],
    ) -> None:
        self.spark, self.decode = spark, decode
        self.client = as_client_config(kafka)
        try:
            layout = config_layout(config)
        except KafkaLayoutError as exc:
            raise StreamingUsageError(f"a Kafka query's tasks own its partitions: {exc}") from None
        self.topics, self.factor = layout.topics, layout.factor
        try:
            self.max_records = batch_cap(max_records_per_batch)
            starting = StartingOffsets.parse(starting_offsets, self.topics)
        except ValueError as exc:
            raise StreamingUsageError(str(exc)) from None
        self.handler = StatefulQuery(
            func,
            key_columns=key_columns,
            output_schema=output_schema,
            state_schema=state_schema,
            config=config,
            sink=sink,
            kafka=kafka,
            event_time=event_time,
            **options,
        )
        self.checkpoint_location = checkpoint_location or _default_checkpoint(config)
        self.options = self._source_options(starting, fail_on_data_loss, source_options or {})
        self._failure: BaseException | None = None
        self.streaming_query: Any = None  # the Spark query run_batch/run/start started last

    # ------------------------------------------------------------------ the stream

    def stream(self, *, available_now_batches: int | None = None) -> Any:
        """The query's streaming DataFrame: the pinned source with :attr:`options`, decoded;
        ``available_now_batches``: a ``Trigger.AvailableNow`` run over it ends after that many
        batches."""
        reader = self.spark.readStream.format(KAFKA_FORMAT)
        for name, value in self.options.items():
            reader = reader.option(name, value)
        if available_now_batches is not None:
            reader = reader.option(RUN_OPTION, str(available_now_batches))
        records = reader.load()
        if self.decode is None:
            return records.selectExpr(
                "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                "topic", "partition", "offset", "timestamp", "timestampType",
            )  # fmt: skip
        return records.mapInArrow(_arrow_decoder(self.decode), decoded_schema(records, self.decode))

    def _source_options(
        self, starting: StartingOffsets, fail_on_data_loss: bool, extra: Mapping[str, Any]
    ) -> dict[str, str]:
        """Spark's Kafka source options this query reads with (module docstring)."""
        options = {
            "kafka.bootstrap.servers": self.client.bootstrap_servers,
            **{f"kafka.{name}": str(value) for name, value in self.client.options.items()},
            "subscribe": ",".join(self.topics),
            TASKS_OPTION: str(self.factor),
            "startingOffsets": self._spark_offsets(starting),
            "failOnDataLoss": "true" if fail_on_data_loss else "false",
            "kafka.isolation.level": "read_committed",
        }
        if self.max_records is not None:
            options["maxOffsetsPerTrigger"] = str(self.max_records)
        options.update({str(name): str(value) for name, value in extra.items()})
        return options

    def _spark_offsets(self, starting: StartingOffsets) -> str:
        """``starting_offsets`` as Spark's option: a partition not named starts at the earliest
        (Spark's JSON names every partition of the topics, read from the broker here)."""
        if not starting.per_partition:
            return "earliest" if starting.default == -2 else "latest"
        counts = partition_counts(self.client, self.topics)
        named = starting.per_partition
        return json.dumps(
            {
                topic: {
                    str(p): named.get(KafkaPartition(topic, p), -2) for p in range(counts[topic])
                }
                for topic in self.topics
            }
        )

    # ------------------------------------------------------------------ running it

    def start(self, **trigger: Any) -> Any:
        """Start the query as a Spark streaming query and return it (``StreamingQuery``:
        ``awaitTermination``, ``lastProgress``, ``stop``); ``trigger``: ``writeStream.trigger``'s
        keywords (e.g. ``processingTime="10 seconds"``), none: Spark's default."""
        writer = (
            self.stream()
            .writeStream.foreachBatch(self._handle)
            .option("checkpointLocation", self.checkpoint_location)
        )
        self.streaming_query = (writer.trigger(**trigger) if trigger else writer).start()
        return self.streaming_query

    def run_batch(self) -> BatchReport | None:
        """Run one batch of what is new (at most ``max_records_per_batch`` records) and return
        its report; None when nothing is new (no batch runs)."""
        done = self._available_now(batches=1)
        return done[-1] if done else None

    def run(self, *, batches: int | None = None) -> list[BatchReport]:
        """Run every batch up to the offsets latest now (at most ``batches`` of them) and return
        their reports."""
        return self._available_now(batches=batches)

    def _available_now(self, *, batches: int | None) -> list[BatchReport]:
        before = len(self.handler.reports)
        query = (
            self.stream(available_now_batches=batches)
            .writeStream.foreachBatch(self._handle)
            .option("checkpointLocation", self.checkpoint_location)
            .trigger(availableNow=True)
            .start()
        )
        self.streaming_query = query
        try:
            query.awaitTermination()
        except Exception as exc:
            raise self._batch_failure(exc) from exc
        return self.handler.reports[before:]

    def _handle(self, df: Any, batch_id: int) -> None:
        """The ``foreachBatch`` function: the handler, its error kept for :meth:`run_batch`."""
        self._failure = None
        try:
            self.handler(df, batch_id)
        except BaseException as exc:
            self._failure = exc
            raise

    def _batch_failure(self, exc: Exception) -> BaseException:
        """The error a failed run raises: the handler's own, else (Spark's source failed, e.g.
        records lost with ``failOnDataLoss``) a :class:`StreamingBatchError` naming Spark's."""
        failure, self._failure = self._failure, None
        if failure is not None:
            return failure
        return StreamingBatchError(f"the Kafka query's batch failed: {failure_cause(exc)}")

    # ------------------------------------------------------------------ what it keeps

    @property
    def reports(self) -> list[BatchReport]:
        """Every batch's report, oldest first."""
        return self.handler.reports

    @property
    def group(self) -> str:
        """The consumer group the query's committed offsets are shown under."""
        return consumer_group(self.handler.config)

    def close(self) -> None:
        """Release the handler's connections (ZooKeeper, the embedded coordinator)."""
        self.handler.close()


def stateful_kafka_query(func: Callable[..., Any], **options: Any) -> KafkaQuery:
    """A :class:`KafkaQuery` (module docstring): ``func`` is an ``applyInPandasWithState``
    function; ``options``: ``spark``, ``kafka`` (bootstrap servers or a
    :class:`~locality.spark.kafka.KafkaClientConfig`), ``output_schema``, ``state_schema``,
    ``config`` (its inputs: the Kafka topics), ``key_columns`` (default ``("key",)``), ``sink``
    or ``output_topic``, ``decode``, ``max_records_per_batch``, ``starting_offsets``,
    ``fail_on_data_loss``, ``source_options``, ``checkpoint_location``, and every option of
    ``stateful_foreach_batch``; see ``docs/spark.md`` ("Kafka")."""
    return KafkaQuery(func, **options)


def decoded_schema(records: Any, decode: Decode) -> Any:
    """The Spark schema of ``decode``'s output: ``decode`` of an empty table of ``records``'
    columns (a decode must map an empty table to an empty table of its columns)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    try:  # timestamps as mapInArrow gives them: UTC (Spark 3.5 has no timezone argument)
        arrow = to_arrow_schema(records.schema, timezone="UTC")
    except TypeError:
        arrow = to_arrow_schema(records.schema)
    empty = pa.Table.from_batches([], schema=arrow)
    try:
        out = decode(empty)
        return from_arrow_schema(out.schema)
    except Exception as exc:
        raise StreamingUsageError(
            f"decode must map an Arrow table of Kafka records to an Arrow table (run here on an "
            f"empty one to learn its columns): {type(exc).__name__}: {exc}"
        ) from None


def _arrow_decoder(decode: Decode) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def decode_batches(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            yield from decode(pa.Table.from_batches([batch])).to_batches()

    return decode_batches


def _default_checkpoint(config: JobConfig) -> str:
    if not config.state.checkpoint_dir:
        raise StreamingUsageError(
            "a Kafka query keeps Spark's checkpoint under the job's state.checkpoint_dir, "
            "which is not set: set it, or pass checkpoint_location="
        )
    return os.path.join(config.state.checkpoint_dir, "spark-checkpoint")
