"""The Kafka query's default per-batch cap on the real broker and the 3-worker cluster: a query
built with no ``max_records_per_batch`` reads at most
:data:`~coordinator.streaming.kafka_offsets.DEFAULT_MAX_RECORDS` records a batch. The default
(5,000,000, pinned in ``tests/unit/test_kafka_layout.py``) is lowered to 1,000 here so a topic
with more records than the cap is small: batch 0 of a new query reads the cap (Spark's
``maxOffsetsPerTrigger``, which rounds down per partition), the next batches go on from there,
and the outputs equal a single-process reference over every record
(nothing lost, nothing read twice)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle
from spark_app import SparkApp
from test_kafka_query import OUTPUT, Run, count, kafka_config, produce, reference

from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import kafka_offsets
from coordinator.streaming.kafka_query import KafkaQuery, stateful_kafka_query

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])

CAP = 1_000
RECORDS = 2_500


def test_a_query_with_no_cap_option_reads_the_default_cap_a_batch(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kafka_offsets, "DEFAULT_MAX_RECORDS", CAP)
    topic = kafka_topic(4)
    config = kafka_config(zk_server, tmp_path, topic, 4)

    def make(sink: Callable[[Any, int], None]) -> KafkaQuery:
        assert app.session is not None
        return stateful_kafka_query(
            count,
            spark=app.session,
            kafka=kafka_broker.bootstrap_servers,
            output_schema=OUTPUT,
            state_schema="n long, total long",
            config=config,
            sink=sink,
        )  # fmt: skip  (no max_records_per_batch: the default)

    produce(kafka_broker, topic, 0, RECORDS)  # a backlog before the query's first batch
    run = Run(make)
    try:
        rows = [run.batch().rows_in for _ in range(3)]
        idle = run.query.run_batch()
    finally:
        run.query.close()
    assert all(CAP - 4 < n <= CAP for n in rows[:2])  # the cap, rounded down per partition
    assert sum(rows) == RECORDS and idle is None  # then nothing new: no batch
    assert run.query.max_records == CAP
    assert run.query.options["maxOffsetsPerTrigger"] == str(CAP)
    ends = [sum(run.ends[b].values()) for b in range(3)]
    assert ends == [rows[0], rows[0] + rows[1], RECORDS]
    assert run.outputs == reference(kafka_broker, topic, run.ends)
