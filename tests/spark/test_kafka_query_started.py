"""The Kafka query (coordinator.streaming.kafka_query) started as Spark's own streaming query, on
the 3-worker cluster and a real broker: a trigger, progress reports, a listener told of each
batch, ``awaitTermination``, Spark's options, then an ``availableNow`` run on its checkpoint."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle
from spark_app import SparkApp
from test_kafka_query import OUTPUT, count, kafka_config, produce

from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming.kafka_query import KafkaQuery, stateful_kafka_query

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def wait_for_rows(query: KafkaQuery, streaming: Any, rows: int, timeout_s: float = 180) -> None:
    """Until the running query's batches have read ``rows`` records in all."""
    deadline = time.monotonic() + timeout_s
    while sum(r.rows_in for r in query.reports) < rows and time.monotonic() < deadline:
        assert streaming.exception() is None, streaming.exception()
        time.sleep(0.2)
    assert sum(r.rows_in for r in query.reports) == rows, query.reports


def test_started_it_is_a_spark_query_with_progress_listeners_and_its_options(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    """``start()``: Spark's own streaming query (a trigger, progress reports, a listener told of
    each batch, ``awaitTermination``), Spark's options honoured (``maxOffsetsPerTrigger`` from
    ``max_records_per_batch``, ``minOffsetsPerTrigger`` through ``source_options``); a
    ``run_batch()`` after it carries on from Spark's checkpoint."""
    from test_pinned_kafka_source import _Progress

    from locality.spark.kafka_source import KAFKA_FORMAT

    assert app.session is not None
    topic = kafka_topic(3)
    query = stateful_kafka_query(
        count, spark=app.session, kafka=kafka_broker.bootstrap_servers, output_schema=OUTPUT,
        state_schema="n long, total long", config=kafka_config(zk_server, tmp_path, topic, 3),
        sink=lambda df, b: None, max_records_per_batch=300,
        source_options={"minOffsetsPerTrigger": 150, "maxTriggerDelay": "60s"},
    )  # fmt: skip
    listener = _Progress()
    app.session.streams.addListener(listener)
    try:
        produce(kafka_broker, topic, 0, 600)
        streaming = query.start(processingTime="1 second")
        wait_for_rows(query, streaming, 600)
        produce(kafka_broker, topic, 600, 100)  # below minOffsetsPerTrigger: no batch yet
        time.sleep(4)
        assert sum(r.rows_in for r in query.reports) == 600
        produce(kafka_broker, topic, 700, 100)
        wait_for_rows(query, streaming, 800)
        last = streaming.lastProgress
        streaming.stop()
        assert streaming.awaitTermination(60)
        produce(kafka_broker, topic, 800, 200)
        after = query.run_batch()  # an availableNow run over the same checkpoint
    finally:
        app.session.streams.removeListener(listener)
        query.close()
    reports = query.reports
    assert all(r.rows_in <= 300 and r.pinned_ok == r.tasks == 3 for r in reports)
    assert after is not None and (after.batch, after.rows_in) == (reports[-2].batch + 1, 200)
    assert last is not None and last["sources"][0]["description"].startswith(KAFKA_FORMAT)
    deadline = time.monotonic() + 30  # listener events come asynchronously
    while sum(n for _, n in listener.batches) < 1000 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [b for b in listener.batches if b[1] > 0] == [(r.batch, r.rows_in) for r in reports]
