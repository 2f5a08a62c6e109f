"""The pinned Kafka source (``readStream.format("affinity-kafka")``, affinity's jar over Spark's
own Kafka connector) on the real broker and the 3-worker cluster: every partition's Spark task
runs on the executor the placement names (a different one each batch), Spark's options are
honoured (``startingOffsets`` per partition, ``maxOffsetsPerTrigger``), the records are exactly
what ``format("kafka")`` reads, batch by batch, and after a failed batch a restart on the same
checkpoint replays it from Spark's offset log with the same records, a listener told of every
batch."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql.streaming import StreamingQueryListener
from spark_app import SparkApp

from coordinator.launchers.kafka import KafkaBroker
from locality.spark import SparkExecutor
from locality.spark.kafka import KafkaPartition, write_records
from locality.spark.kafka_source import (
    KAFKA_FORMAT,
    clear_placement,
    is_pinned_kafka,
    planned_locations,
    set_placement,
    source_partitions,
)

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

PARTITIONS = 6
Record = tuple[int, int, str, str]  # partition, offset, key, value
Batch = list[tuple[Record, str]]  # each record with the executor that read it


def _rows(first: int, count: int) -> pd.DataFrame:
    numbers = range(first, first + count)
    return pd.DataFrame(
        {
            "key": [f"k{i % 11}" for i in numbers],
            "value": list(map(str, numbers)),
            "partition": [i % PARTITIONS for i in numbers],
        }
    )


def _read(frame: Any) -> Batch:
    """A micro-batch's records, each with the executor whose task read it (a narrow step over
    the source's partitions: the task that runs it is the one that read the partition)."""

    def _with_executor(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from locality.spark import current_executor_id

        executor = current_executor_id() or ""
        for batch in batches:
            column = pa.array([executor] * batch.num_rows, pa.string())
            yield batch.append_column("executor", column)

    selected = frame.selectExpr(
        "partition", "offset", "CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v"
    )
    schema = "partition int, offset long, k string, v string, executor string"
    rows = selected.mapInArrow(_with_executor, schema).collect()
    return sorted(((r.partition, r.offset, r.k, r.v), r.executor) for r in rows)


def _query(
    app: SparkApp,
    source: str,
    options: dict[str, str],
    checkpoint: Path,
    handle: Callable[[Any, int], None],
) -> Any:
    assert app.session is not None
    reader = app.session.readStream.format(source)
    for name, value in options.items():
        reader = reader.option(name, value)
    return (
        reader.load()
        .writeStream.foreachBatch(handle)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def _finish(query: Any) -> None:
    assert query.awaitTermination(240), "the query did not finish"
    assert query.exception() is None, query.exception()


def test_each_partition_is_read_on_the_executor_its_placement_names(
    app: SparkApp, kafka_broker: KafkaBroker, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(PARTITIONS)
    write_records(servers, topic, _rows(0, 1200), partition_column="partition")
    executors: list[SparkExecutor] = app.ready()
    starting = {topic: {str(p): 10 * p for p in range(PARTITIONS)}}
    options = {
        "kafka.bootstrap.servers": servers,
        "subscribe": topic,
        "startingOffsets": json.dumps(starting),
        "maxOffsetsPerTrigger": "400",
    }
    pinned: list[tuple[SparkExecutor, Batch]] = []

    def pin_and_read(frame: Any, batch_id: int) -> None:
        target = executors[batch_id % len(executors)]  # all partitions on one executor
        where = {KafkaPartition(topic, p): target.task_location for p in range(PARTITIONS)}
        set_placement(app.session, where)
        assert is_pinned_kafka(frame)
        keys = source_partitions(frame)  # each Spark partition reads one Kafka partition
        assert keys is not None and len(keys) == len(set(keys)) == PARTITIONS
        pinned.append((target, _read(frame)))

    clear_placement(app.session)
    _finish(_query(app, KAFKA_FORMAT, options, tmp_path / "pinned", pin_and_read))
    planned = planned_locations(app.session)
    clear_placement(app.session)

    plain: list[Batch] = []
    query = _query(app, "kafka", options, tmp_path / "kafka", lambda f, _: plain.append(_read(f)))
    _finish(query)

    batches = [(target, batch) for target, batch in pinned if batch]
    # 1200 records from offsets 0, 10, .., 50 of the 6 partitions: 1050, at most 400 a trigger
    assert sum(len(b) for _, b in batches) == 1050
    assert all(len(b) <= 400 for _, b in batches) and len(batches) >= 3
    assert len({target for target, _ in batches}) == 3  # every executor had a batch
    for target, batch in batches:  # every record read on the batch's placed executor
        assert {executor for _, executor in batch} == {target.executor_id}
    last = pinned[-1][0].task_location
    assert planned == {KafkaPartition(topic, p): last for p in range(PARTITIONS)}
    records = [[record for record, _ in batch] for _, batch in batches]
    assert records == [[record for record, _ in batch] for batch in plain if batch]
    for p in range(PARTITIONS):  # startingOffsets honoured per partition
        offsets = [r[1] for batch in records for r in batch if r[0] == p]
        assert min(offsets) == 10 * p and len(offsets) == 200 - 10 * p
    assert not is_pinned_kafka(app.session.range(1))


class _Fail(RuntimeError):
    pass


class _Progress(StreamingQueryListener):
    """The batches a listener is told about: (batch id, rows read)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int]] = []

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if progress.sources and progress.sources[0].description.startswith(KAFKA_FORMAT):
            self.batches.append((progress.batchId, progress.numInputRows))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def test_a_failed_batch_replays_from_spark_offset_log_after_a_restart(
    app: SparkApp, kafka_broker: KafkaBroker, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(PARTITIONS)
    write_records(servers, topic, _rows(0, 600), partition_column="partition")
    options = {
        "kafka.bootstrap.servers": servers,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "240",
    }
    seen: list[tuple[int, list[Record]]] = []

    def fail_batch_one(frame: Any, batch_id: int) -> None:
        seen.append((batch_id, [record for record, _ in _read(frame)]))
        if batch_id == 1:
            raise _Fail("batch 1 fails once")

    clear_placement(app.session)
    first = _query(app, KAFKA_FORMAT, options, tmp_path / "checkpoint", fail_batch_one)
    with pytest.raises(Exception, match="batch 1 fails once"):
        first.awaitTermination(240)
    assert [b for b, _ in seen] == [0, 1]

    write_records(servers, topic, _rows(600, 120), partition_column="partition")
    again: list[tuple[int, list[Record]]] = []
    listener = _Progress()
    app.session.streams.addListener(listener)
    query = _query(
        app,
        KAFKA_FORMAT,
        options,
        tmp_path / "checkpoint",
        lambda f, b: again.append((b, [r for r, _ in _read(f)])),
    )
    try:
        _finish(query)
        deadline = time.monotonic() + 30  # the listener bus delivers after the query ends
        while len(listener.batches) < len(again) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        app.session.streams.removeListener(listener)
    # a listener sees every batch of the restarted query, with the source's rows
    assert listener.batches == [(b, len(rows)) for b, rows in again]
    assert again[0] == seen[1]  # batch 1 again, the same records (Spark's offset log)
    assert [b for b, _ in again] == list(range(1, len(again) + 1))
    records = [r for _, batch in [seen[0], *again] for r in batch]
    assert sorted(int(r[3]) for r in records) == list(range(720))  # every record once
    progress = query.lastProgress
    assert progress is not None and progress["sources"][0]["description"].startswith(KAFKA_FORMAT)
