"""What the tests of ``stateful_foreach_batch`` over a Kafka topic share: a topic's streaming
reader, records written to a topic from columns, each batch's end offsets from Spark's progress
reports, and :class:`Stream`, the handler as a query's ``foreachBatch`` run ``availableNow``
(each batch's output, end offsets and Spark's input rows)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark import cloudpickle
from spark_app import SparkApp
from test_kafka_query import OUTPUT, count

from coordinator.streaming import BatchReport, StatefulQuery, stateful_foreach_batch
from locality.spark import status
from locality.spark.kafka import write_records
from locality.spark.kafka_source import KAFKA_FORMAT

cloudpickle.register_pickle_by_value(sys.modules[__name__])

# the stateful query's input: key and value as strings, and the record's partition
COLUMNS = ("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition")


def shuffle_bytes(app: SparkApp) -> int:
    """Shuffle bytes written and read by every stage of the application so far."""
    return status.shuffle_bytes(app.sc)


def kafka_reader(
    app: SparkApp,
    servers: str,
    topics: str | list[str],
    source: str = KAFKA_FORMAT,
    starting: str = "earliest",
    **options: Any,
) -> Any:
    """A ``readStream`` of ``topics`` (one, or co-partitioned ones) by ``source`` from the
    ``starting`` offsets, with the source's ``options``; not loaded yet."""
    assert app.session is not None
    reader = (
        app.session.readStream.format(source)
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topics if isinstance(topics, str) else ",".join(topics))
        .option("startingOffsets", starting)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader


def write_columns(servers: str, topic: str, **columns: Any) -> None:
    """Records of ``columns`` (``key``, ``value``, and ``partition`` to choose the partition
    instead of the key's hash) written to ``topic``."""
    partition = "partition" if "partition" in columns else None
    write_records(servers, topic, pd.DataFrame(columns), partition_column=partition)


def batch_ends(document: Any) -> dict[str, int]:
    """``topic-p`` -> offset of a progress report's ``endOffset`` (every topic)."""
    parsed = json.loads(document) if isinstance(document, str) else document
    return {f"{t}-{p}": int(o) for t, parts in parsed.items() for p, o in parts.items()}


class Stream:
    """``stateful_foreach_batch`` (``count``'s state by default) as a query's ``foreachBatch``
    over ``topics``: each batch's output, end offsets (``topic-p`` -> offset, from Spark's
    progress reports: the reference's input) and Spark's ``numInputRows``. ``kafka``: the
    servers that show the commit's offsets under the job's consumer group (and take the output
    of ``output_topic``, exactly once, when given); ``cap``: the source's
    ``maxOffsetsPerTrigger``."""

    def __init__(
        self,
        app: SparkApp,
        servers: str,
        topics: list[str],
        config: Any,
        function: Any = count,
        kafka: str | None = None,
        cap: int = 700,
        output_topic: str | None = None,
    ) -> None:
        self.app, self.servers, self.topics, self.config = app, servers, topics, config
        self.function, self.kafka, self.cap = function, kafka, cap
        self.output_topic = output_topic
        self.outputs: dict[int, list[tuple[Any, ...]]] = {}
        self.ends: dict[int, dict[str, int]] = {}
        self.input_rows: dict[int, int] = {}
        self.handler = self.make()

    def make(self) -> StatefulQuery:
        """The handler; its output to the sink, or with ``output_topic`` to that topic only."""
        out: dict[str, Any] = {"sink": self.sink}
        if self.output_topic is not None:
            out = {"output_topic": self.output_topic}
        return stateful_foreach_batch(
            self.function, key_columns=["key"], output_schema=OUTPUT,
            state_schema="n long, total long", config=self.config, kafka=self.kafka, **out,
        )  # fmt: skip

    def sink(self, df: Any, batch: int) -> None:
        self.outputs[batch] = sorted(tuple(r) for r in df.collect())

    def run(
        self, checkpoint: Path, reader: Any = None, source: str = KAFKA_FORMAT, **options: Any
    ) -> list[BatchReport]:
        """One availableNow run of the query over ``reader`` (a ``readStream`` naming the
        topics, when given) or the topics read by ``source``, from the earliest offsets under
        the cap, with the source's ``options``; the reports of its batches."""
        if reader is None:
            reader = kafka_reader(self.app, self.servers, self.topics, source)
        else:
            reader = reader.option("kafka.bootstrap.servers", self.servers)
            reader = reader.option("startingOffsets", "earliest")
        for name, value in {"maxOffsetsPerTrigger": self.cap, **options}.items():
            reader = reader.option(name, value)
        before = len(self.handler.reports)
        query = self.start(reader, checkpoint, availableNow=True)
        assert query.awaitTermination(300), "the query did not finish"
        assert query.exception() is None, query.exception()
        for progress in query.recentProgress:
            (source_progress,) = progress["sources"]
            self.ends[progress["batchId"]] = batch_ends(source_progress["endOffset"])
            self.input_rows[progress["batchId"]] = progress["numInputRows"]
        return self.handler.reports[before:]

    def start(self, reader: Any, checkpoint: Path, **trigger: Any) -> Any:
        """The query over ``reader`` (the handler its ``foreachBatch``), started with
        ``trigger``."""
        return (
            reader.load()
            .selectExpr(*COLUMNS)
            .writeStream.foreachBatch(self.handler)
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    def committed_offsets(self) -> dict[str, int]:
        """The offsets the state's latest commit record keeps."""
        latest = self.handler._commit_log().latest()
        assert latest is not None
        return dict(latest.offsets)
