"""A Kafka query on the 3-worker cluster and a real broker writes its batches to the job's
history with the lag per partition: each partition's end offset minus the committed one, so a
backlog read under a per-batch cap shows what is left, and a caught-up query shows 0."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from spark_app import SparkApp
from test_kafka_query import OUTPUT, count, kafka_config, produce

from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming.kafka_query import stateful_kafka_query
from locality.spark.kafka import end_offsets

pytestmark = pytest.mark.spark


def test_the_history_shows_the_lag_per_partition(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    assert app.session is not None
    topic = kafka_topic(2)
    query = stateful_kafka_query(
        count,
        spark=app.session,
        kafka=kafka_broker.bootstrap_servers,
        output_schema=OUTPUT,
        state_schema="n long, total long",
        config=kafka_config(zk_server, tmp_path, topic, 2),
        max_records_per_batch=500,
        sink=lambda output, batch: None,
    )
    try:
        produce(kafka_broker, topic, 0, 1200)
        first = query.run_batch()  # 500 of 1200: 700 behind
        ends = {f"{p.topic}-{p.partition}": e for p, e in end_offsets(
            kafka_broker.bootstrap_servers, [topic]).items()}  # fmt: skip
        commits = query.handler.commits
        after_first = commits.latest() if commits else None
        while query.run_batch() is not None:  # the backlog, until nothing is new
            pass
        store = query.handler._store
        assert store is not None
        entries = store.batches.read()
    finally:
        query.close()
    assert first is not None and 498 <= first.rows_in <= 500 and after_first is not None
    assert entries[0].batch == first.batch == 0
    assert entries[0].lag == {p: ends[p] - after_first.offsets[p] for p in ends}
    assert sum(entries[0].lag.values()) == 1200 - first.rows_in
    assert entries[-1].lag == dict.fromkeys(sorted(ends), 0)  # caught up
    rows = [e.rows_in for e in entries]
    assert sum(rows) == 1200 and len(rows) == 3 and all(n <= 500 for n in rows)
