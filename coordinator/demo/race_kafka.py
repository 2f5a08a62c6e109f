"""The streaming race over a real Kafka broker (``affinity demo``'s default, the Kafka benchmark):
the clicks are records of one topic (keyed by user, so co-partitioned; JSON values), read by
both ways, and affinity writes its output to a second topic.

- :class:`KafkaRaceInput`: batch ``b`` (:class:`~coordinator.demo.race_ways.RaceInput`'s clicks)
  produced once to the input topic; the reference output is the same;
- :class:`KafkaSparkWay`: Spark's own operator over Spark's Kafka connector
  (``readStream.format("kafka")``, the JSON value parsed, ``groupBy("user")
  .applyInPandasWithState``, RocksDB state store);
- :class:`KafkaAffinityWay`: the same function as a Kafka query whose tasks own their partitions
  (:func:`coordinator.streaming.kafka_query.stateful_kafka_query`: the pinned source below in
  one call, the JSON decoded by a Python ``decode`` in a ``mapInArrow``): each task reads its
  partition on its executor, and writes its output to the output topic (exactly once) besides
  the sink the race compares;
- :class:`PinnedSourceAffinityWay` (``StreamingRace(kafka=True, pinned_source=True)``): the same
  function through ``stateful_foreach_batch`` over Spark's own Kafka source with its partitions
  pinned (``readStream.format("affinity-kafka")``): a real Structured Streaming query, one
  ``availableNow`` run per race batch, each task run where its partition is read, no shuffle.
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.config import JobConfig
from coordinator.demo.race_function import count_clicks_random
from coordinator.demo.race_ways import (
    OUTPUT_SCHEMA,
    STATE_SCHEMA,
    AffinityWay,
    RaceBatch,
    RaceInput,
    SparkWay,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "KafkaAffinityWay",
    "KafkaRaceInput",
    "KafkaSparkWay",
    "PinnedSourceAffinityWay",
    "decode_clicks",
]

CLICK_FIELDS = (("user", "string"), ("value", "int64"), ("pad", "int64"))  # Arrow types
CLICK_DDL = "user string, value long, pad long"  # the same, as Spark's


@dataclass(frozen=True)
class KafkaRaceInput(RaceInput):
    """The clicks as records on ``servers``: each way reads a topic of its own (``<topic>-<way>``)
    with the same records, produced when it is the way's turn, as the file race drops each way
    its own file (a query that triggers by itself does not run beside the other way's batch)."""

    servers: str = ""
    topic: str = ""
    output_topic: str = ""

    def topic_of(self, way: str) -> str:
        return f"{self.topic}-{way}"

    def drop(self, b: int, way: str) -> None:
        """Produce batch ``b`` to ``way``'s topic in one transaction, and wait until all of it
        is visible to a ``read_committed`` reader."""
        import pandas as pd

        from locality.spark.kafka import TransactionalWriter

        rows = self.batch(b)
        frame = pd.DataFrame(
            {"key": [r["user"] for r in rows], "value": [json.dumps(r) for r in rows]}
        )
        topic = self.topic_of(way)
        with TransactionalWriter(self.servers, f"race-input-{topic}") as transaction:
            transaction.write(topic, frame)
        self._wait_visible(topic)

    def _wait_visible(self, topic: str, timeout_s: float = 60.0) -> None:
        """Until every partition's last stable offset is its end: the broker writes a
        transaction's commit markers after the commit returns, partition by partition."""
        from locality.spark.kafka import end_offsets

        deadline = time.monotonic() + timeout_s
        while end_offsets(self.servers, [topic]) != end_offsets(
            self.servers, [topic], committed_only=False
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: a committed batch not visible in {timeout_s}s")
            time.sleep(0.05)


def decode_clicks(records: pa.Table) -> pa.Table:
    """The records' JSON values as the columns ``user``, ``value``, ``pad`` (on the executors)."""
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in CLICK_FIELDS])
    if records.num_rows == 0:
        return schema.empty_table()
    data = b"\n".join(records.column("value").to_pylist())
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    return pj.read_json(io.BytesIO(data), parse_options=options)


class KafkaSparkWay(SparkWay):
    """Spark's own operator over Spark's Kafka connector.

    Spark triggers on its own when new offsets show, and plans each partition's end offset
    apart: a race batch (one transaction over every partition) can come as two of Spark's
    batches, and a commit marker alone makes a batch without records. So its outputs are kept
    per race batch: each user's last output row of the batches Spark ran for it (the state after
    the race batch, as the reference gives it)."""

    def __init__(self, source: KafkaRaceInput, checkpoint: Path, partitions: int) -> None:
        super().__init__(source, checkpoint, partitions)
        self.kafka = source
        self._rows: dict[Any, tuple[Any, ...]] = {}

    def _sink(self, df: Any, batch_id: int) -> None:
        for row in df.collect():
            self._rows[row[0]] = tuple(row)

    def run(self, phase: str) -> list[RaceBatch]:
        """What the topic has; the race batch's output (Spark may have begun it on its own
        as soon as it showed, before this call)."""
        done = super().run(phase)
        self.outputs[len(self.outputs)] = sorted(self._rows.values())
        self._rows = {}
        return done

    def stream(self, session: Any) -> Any:
        """The clicks: Spark's Kafka connector over the way's topic, committed records only."""
        return (
            session.readStream.format("kafka")
            .option("kafka.bootstrap.servers", self.kafka.servers)
            .option("subscribe", self.kafka.topic_of(self.name))
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .load()
            .selectExpr(f"from_json(CAST(value AS STRING), '{CLICK_DDL}') AS c")
            .select("c.*")
        )


class KafkaAffinityWay(AffinityWay):
    """The same function as a Kafka query whose tasks own their partitions: one
    ``run_batch()`` (an ``availableNow`` run of one Spark batch, no cap) per race batch."""

    def __init__(self, source: KafkaRaceInput, checkpoint: Path, config: JobConfig) -> None:
        super().__init__(source, checkpoint, config)
        self.kafka = source
        self.kafka_query: Any = None

    def start(self, session: Any) -> None:
        from coordinator.streaming.kafka_query import stateful_kafka_query

        self.session = session
        self.kafka_query = stateful_kafka_query(
            count_clicks_random,
            spark=session,
            kafka=self.kafka.servers,
            key_columns=["user"],
            output_schema=OUTPUT_SCHEMA,
            state_schema=STATE_SCHEMA,
            config=self.config,
            sink=self._sink,
            output_topic=self.kafka.output_topic,
            output_key_column="user",
            decode=decode_clicks,
            max_records_per_batch=None,
            checkpoint_location=str(self.checkpoint),
        )
        self.handler = self.kafka_query.handler

    def run(self, phase: str) -> list[RaceBatch]:
        """One batch: everything the topic has that was not committed yet."""
        report = self.kafka_query.run_batch()
        if report is None:
            raise RuntimeError("the Kafka query found no new record for the race batch")
        self.query = self.kafka_query.streaming_query  # its progress: the batch's seconds
        return self.collect(phase)

    def stop(self) -> None:
        if self.kafka_query is not None:
            self.kafka_query.close()
            self.kafka_query = self.handler = self.query = None


class PinnedSourceAffinityWay(AffinityWay):
    """The same function through ``stateful_foreach_batch`` over the pinned Kafka source; each
    race batch is one ``availableNow`` run of the query (one Spark batch: no cap), so a race
    batch is never split between two triggers."""

    name = "affinity-source"

    def __init__(self, source: KafkaRaceInput, checkpoint: Path, config: JobConfig) -> None:
        super().__init__(source, checkpoint, config)
        self.kafka = source

    def start(self, session: Any) -> None:
        self.session = session
        self.handler = self.make_handler()

    def run(self, phase: str) -> list[RaceBatch]:
        """One availableNow run: what the topic has, in one batch."""
        from locality.spark.kafka_source import KAFKA_FORMAT

        query = (
            self.session.readStream.format(KAFKA_FORMAT)
            .option("kafka.bootstrap.servers", self.kafka.servers)
            .option("subscribe", self.kafka.topic_of(self.name))
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .load()
            .selectExpr(f"from_json(CAST(value AS STRING), '{CLICK_DDL}') AS c")
            .select("c.*")
            .writeStream.foreachBatch(self.handler)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        self.query = query
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"the pinned-source query failed: {query.exception()}")
        return self.collect(phase)
