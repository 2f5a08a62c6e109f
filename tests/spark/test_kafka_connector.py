"""Spark's own Kafka connector (``readStream.format("kafka")``, Maven Central's
spark-sql-kafka-0-10 4.2.0: none is served for pyspark 4.3.0) on the 3-worker cluster, reading
the real broker: every record once under a per-trigger cap, a restart from its checkpoint, and
the same records as :func:`locality.spark.kafka.read_range` reads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from spark_app import SparkApp

from coordinator.launchers.kafka import KafkaBroker
from locality.spark.kafka import OffsetRange, end_offsets, read_range, write_records

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

Record = tuple[int, int, str, str]  # partition, offset, key, value


def _run(app: SparkApp, servers: str, topic: str, checkpoint: Path) -> list[list[Record]]:
    """One availableNow run of the query; the records of each of its batches."""
    assert app.session is not None
    batches: list[list[Record]] = []

    def collect(frame: Any, _batch_id: int) -> None:
        rows = frame.selectExpr(
            "partition", "offset", "CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v"
        ).collect()
        batches.append(sorted((r.partition, r.offset, r.k, r.v) for r in rows))

    query = (
        app.session.readStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 250)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240), "the query did not finish"
    assert query.exception() is None
    return batches


def _rows(first: int, count: int) -> pd.DataFrame:
    numbers = range(first, first + count)
    return pd.DataFrame({"key": [f"k{i % 11}" for i in numbers], "value": list(map(str, numbers))})


def test_spark_reads_the_broker_through_its_kafka_connector(
    app: SparkApp, kafka_broker: KafkaBroker, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(3)
    write_records(servers, topic, _rows(0, 600))

    batches = _run(app, servers, topic, tmp_path / "checkpoint")
    assert len([b for b in batches if b]) == 3  # 600 offsets, at most 250 a trigger
    assert all(len(b) <= 250 for b in batches)
    records = sorted(r for b in batches for r in b)
    assert sorted(int(r[3]) for r in records) == list(range(600))  # every record once

    ours = []
    for part, end in end_offsets(servers, [topic]).items():
        table = read_range(servers, OffsetRange(topic, part.partition, 0, end))
        ours += zip(
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            [k.decode() for k in table.column("key").to_pylist()],
            [v.decode() for v in table.column("value").to_pylist()],
            strict=True,
        )
    assert records == sorted(ours)  # the connector and the range reader agree

    write_records(servers, topic, _rows(600, 100))
    again = _run(app, servers, topic, tmp_path / "checkpoint")  # resumes from its checkpoint
    assert sorted(int(r[3]) for b in again for r in b) == list(range(600, 700))
