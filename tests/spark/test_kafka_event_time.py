"""Event time over the pinned Kafka source (``format("affinity-kafka")``) on the real broker and
the 3-worker cluster: the event-time session window of :mod:`test_event_time` (its function, its
processor, its batches), each batch's records produced to a topic keyed by user (the event time
in the record's JSON value), one ``availableNow`` run per produced batch. Spark's own operator
(``withWatermark`` then ``applyInPandasWithState`` with ``EventTimeTimeout`` or
``transformWithStateInPandas`` in time mode ``EventTime``) reads the same topic with
``format("kafka")``; affinity (``event_time=``) reads it with ``format("affinity-kafka")``, each
task where its partition is read. Outputs (each row carries the batch's watermark) and late rows
dropped are equal batch by batch, also through an executor killed between batches and an
application restart (the watermark comes back from the commit record), and affinity's side
writes no shuffle bytes."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from affinity_pipeline.cluster import StandaloneCluster
from kafka_streams import kafka_reader, shuffle_bytes, write_columns
from pyspark import cloudpickle
from pyspark.sql.streaming.state import GroupStateTimeout
from spark_app import SparkApp
from test_event_time import (
    BATCHES,
    DELAY,
    LATE,
    OUTPUT,
    SPARK_CONF,
    STATE,
    T0,
    Outputs,
    Sessions,
    sessions,
)
from test_kafka_query import kafka_config

from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import (
    StatefulQuery,
    stateful_foreach_batch,
    stateful_processor_foreach_batch,
)
from locality.spark.kafka_source import KAFKA_FORMAT, clear_placement

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PARTITIONS = 3
# the watermark of batches 1..7 (s after T0), as test_event_time derives them
WATERMARKS = [T0 + s * 1000 for s in (-6, 2, 4, 10, 20, 21, 30)]


def produce_batch(servers: str, topic: str, b: int) -> None:
    """Batch ``b``'s records: key the user (one partition per user), value ``{user, t}``."""
    users = [u for u, _ in BATCHES[b]]
    values = [json.dumps({"user": u, "t": T0 + s * 1000}) for u, s in BATCHES[b]]
    write_columns(servers, topic, key=users, value=values)


def kafka_stream(app: SparkApp, servers: str, topic: str, source: str) -> Any:
    """The topic read by ``source`` as (user, t, ts): ts the event time as a timestamp."""
    frame = kafka_reader(app, servers, topic, source).load()
    t = "CAST(get_json_object(CAST(value AS STRING), '$.t') AS BIGINT)"
    return frame.selectExpr("CAST(key AS STRING) AS user", f"{t} AS t").selectExpr(
        "user", "t", "timestamp_millis(t) AS ts"
    )


def run_available(writer: Any, checkpoint: Path) -> Any:
    """One ``availableNow`` run (everything produced so far: one batch); the finished query."""
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    assert query.awaitTermination(300), "the query did not finish"
    assert query.exception() is None, query.exception()
    return query


class SparkSide:
    """Spark's own operator over ``format("kafka")``: outputs, rows dropped per batch and the
    shuffle bytes its runs wrote (its groupBy's exchange)."""

    def __init__(self, app: SparkApp, servers: str, topic: str, tmp: Path, way: str) -> None:
        self.app, self.servers, self.topic, self.way = app, servers, topic, way
        self.checkpoint = tmp / f"spark-{way}-cp"
        self.outputs = Outputs()
        self.dropped: dict[int, int] = {}
        self.shuffled = 0

    def run(self) -> None:
        session = self.app.session
        assert session is not None
        frame = kafka_stream(self.app, self.servers, self.topic, "kafka")
        grouped = frame.withWatermark("ts", DELAY).groupBy("user")
        if self.way == "function":
            out = grouped.applyInPandasWithState(
                sessions, OUTPUT, STATE, "update", GroupStateTimeout.EventTimeTimeout
            )
        else:
            out = grouped.transformWithStateInPandas(Sessions(), OUTPUT, "Update", "EventTime")
        for name, value in SPARK_CONF.items():
            session.conf.set(name, value)
        before = shuffle_bytes(self.app)
        try:
            writer = out.writeStream.outputMode("update").foreachBatch(self.outputs)
            query = run_available(writer, self.checkpoint)
        finally:
            for name in SPARK_CONF:
                session.conf.unset(name)
        self.shuffled += shuffle_bytes(self.app) - before
        for p in query.recentProgress:
            dropped = sum(op["numRowsDroppedByWatermark"] for op in p["stateOperators"])
            self.dropped[int(p["batchId"])] = dropped


class AffinitySide:
    """affinity's query over ``format("affinity-kafka")``: outputs, late rows and watermarks per
    batch, and the shuffle bytes its runs wrote."""

    def __init__(self, app: SparkApp, servers: str, topic: str, config: Any, tmp: Path) -> None:
        self.app, self.servers, self.topic, self.config = app, servers, topic, config
        self.checkpoint = tmp / "affinity-cp"
        self.outputs = Outputs()
        self.shuffled = 0
        self.way = "function"
        self.handler: StatefulQuery | None = None
        self.reports: list[Any] = []  # the reports of the handlers closed

    def make(self, way: str) -> None:
        """A new handler (a new application's, or the first)."""
        self.way = way
        common: dict[str, Any] = {
            "key_columns": ["user"],
            "output_schema": OUTPUT,
            "sink": self.outputs,
            "config": self.config,
            "event_time": ("ts", DELAY),
        }
        if way == "function":
            self.handler = stateful_foreach_batch(
                sessions, state_schema=STATE, timeout="EventTimeTimeout", **common
            )
        else:
            self.handler = stateful_processor_foreach_batch(
                Sessions(), time_mode="EventTime", **common
            )

    def run(self) -> None:
        before = shuffle_bytes(self.app)
        frame = kafka_stream(self.app, self.servers, self.topic, KAFKA_FORMAT)
        run_available(frame.writeStream.foreachBatch(self.handler), self.checkpoint)
        self.shuffled += shuffle_bytes(self.app) - before

    def close(self) -> None:
        """Close the handler, its reports kept."""
        assert self.handler is not None
        self.handler.close()
        self.reports += self.handler.reports

    def restart(self) -> None:
        """The application restarted: a new handler, nothing kept but the checkpoints."""
        self.close()
        self.app.restart()
        self.app.ready()
        clear_placement(self.app.session)
        self.make(self.way)


def run_both(
    app: SparkApp, cluster: StandaloneCluster, spark: SparkSide, affinity: AffinitySide
) -> None:
    """Every batch produced, then run by Spark and by affinity, with an executor killed before
    batch 2 and the application restarted before batch 4."""
    for b in range(len(BATCHES)):
        produce_batch(spark.servers, spark.topic, b)
        if b == 2:
            cluster.kill_executor(app.app_id, app.executors()[0].executor_id)
        if b == 4:
            affinity.restart()
        spark.run()
        affinity.run()


@pytest.mark.parametrize("way", ["function", "processor"])
def test_event_time_over_the_pinned_kafka_source_runs_as_spark_runs_it(
    way: str,
    app: SparkApp,
    spark_cluster: StandaloneCluster,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(PARTITIONS)
    spark = SparkSide(app, servers, topic, tmp_path, way)
    config = kafka_config(zk_server, tmp_path, topic, PARTITIONS)
    affinity = AffinitySide(app, servers, topic, config, tmp_path)
    clear_placement(app.session)
    affinity.make(way)
    try:
        run_both(app, spark_cluster, spark, affinity)
        assert affinity.handler is not None
        latest = affinity.handler._commit_log().latest()
    finally:
        affinity.close()

    expected = spark.outputs.batches
    assert sorted(expected) == list(range(len(BATCHES)))  # one Spark batch per produced batch
    assert {b: n for b, n in spark.dropped.items() if n} == LATE  # the late rows it says
    for b in range(len(BATCHES)):
        assert affinity.outputs.batches[b] == expected[b], f"batch {b}"
    reports = {r.batch: r for r in affinity.reports}
    assert sorted(reports) == list(range(len(BATCHES)))
    assert {b: r.late_rows for b, r in reports.items() if r.late_rows} == LATE
    # batch 4 ran in a new application: its watermark (10 s) came from the commit record
    assert [reports[b].watermark_ms for b in range(len(BATCHES))] == [0, *WATERMARKS]
    assert latest is not None and latest.batch == len(BATCHES) - 1
    assert latest.extra["watermark"] == {"ms": WATERMARKS[-1], "next_ms": T0 + 31_000}
    assert all(r.tasks == PARTITIONS for r in reports.values())
    assert affinity.shuffled == 0  # each task ran where its partition was read
    assert spark.shuffled > 0  # the control: Spark's operator shuffles by key, and it is seen
    closed = sum(1 for rows in expected.values() for r in rows if r[1] == "closed")
    assert closed >= 6, closed  # sessions closed by timeouts / timers, compared above
