"""Exactly-once output from the Kafka query to a topic, on the real broker and the 3-worker
cluster: through a sink crash before the commit, the driver dying between the commit and the
publish (a new driver publishes what is owed, once), and a publish run again, a read_committed
reader of the output topic sees each batch's output exactly once. The same crash with
``delivery="at-least-once"`` shows the duplicates exactly once removes."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle
from spark_app import SparkApp
from streaming_soak import InjectedCrash, crash_after_commit
from test_kafka_query import OUTPUT, count, kafka_config, produce

from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming.kafka_query import KafkaQuery, stateful_kafka_query
from locality.spark.kafka import OffsetRange, end_offsets, read_range
from locality.spark.state import latest_commit

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class CrashingSink:
    def __init__(self) -> None:
        self.crash = False

    def __call__(self, df: Any, batch: int) -> None:
        df.count()
        if self.crash:
            self.crash = False
            raise InjectedCrash(f"the driver died in batch {batch}, before the commit")


def output_records(broker: KafkaBroker, topic: str) -> Counter[tuple[str, int]]:
    """(key, count) of every record a read_committed reader sees in ``topic``."""
    seen: Counter[tuple[str, int]] = Counter()
    for p, end in end_offsets(broker.bootstrap_servers, [topic]).items():
        table = read_range(broker.bootstrap_servers, OffsetRange(topic, p.partition, 0, end))
        for record in table.to_pylist():
            row = json.loads(record["value"])
            seen[row["key"], int(row["n"])] += 1
    return seen


def expected_records(batches: list[range]) -> Counter[tuple[str, int]]:
    """Each batch's output: every key it touched, with its count after the batch."""
    counts: Counter[str] = Counter()
    expected: Counter[tuple[str, int]] = Counter()
    for produced in batches:
        keys = [f"k{i % 60:03d}" for i in produced]
        counts.update(keys)
        expected.update((k, counts[k]) for k in set(keys))
    return expected


def run_through_crashes(
    app: SparkApp, broker: KafkaBroker, make: Callable[[], KafkaQuery], topic: str
) -> list[range]:
    """Four batches: one plain, one whose sink crashes before the commit (run again), one
    whose driver dies after the commit (a new driver goes on), one plain."""
    produced = [range(0, 300), range(300, 500), range(500, 800), range(800, 900)]
    query = make()
    try:
        produce(broker, topic, 0, 300)
        query.run_batch()
        produce(broker, topic, 300, 200)
        query.sink.crash = True  # type: ignore[union-attr]
        with pytest.raises(InjectedCrash):
            query.run_batch()
        query.run_batch()  # the same batch again
        produce(broker, topic, 500, 300)
        crash_after_commit(query)
        with pytest.raises(InjectedCrash):
            query.run_batch()
        commit = latest_commit(query.storage)
        assert commit is not None and commit.batch == 2  # committed, not published
    finally:
        query.close()
    query = make()  # a new driver
    try:
        produce(broker, topic, 800, 100)
        report = query.run_batch()  # publishes batch 2 first, then runs batch 3
        assert report.batch == 3 and report.rows_in == 100
        if query.output is not None and query.output.publisher is not None:
            query.output.published = -1  # a publish run again (a zombie): it finds the mark
            assert query.output.publish(app.sc, latest_commit(query.storage)) == 0  # type: ignore[arg-type]
    finally:
        query.close()
    return produced


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_each_batch_reaches_the_topic_once_through_crashes(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
    delivery: str,
) -> None:
    topic, out = kafka_topic(4), kafka_topic(3)
    config = kafka_config(zk_server, tmp_path, topic, 4)

    def make() -> KafkaQuery:
        assert app.session is not None
        return stateful_kafka_query(
            count, spark=app.session, kafka=kafka_broker.bootstrap_servers, output_schema=OUTPUT,
            state_schema="n long, total long", config=config, sink=CrashingSink(),
            output_topic=out, delivery=delivery,
        )  # fmt: skip

    produced = run_through_crashes(app, kafka_broker, make, topic)
    seen, expected = output_records(kafka_broker, out), expected_records(produced)
    if delivery == "exactly-once":
        assert seen == expected  # every record once: 0 duplicates, 0 missing
        assert list((tmp_path / "durable" / "outputs").glob("output-*")) == []  # all published
    else:
        assert set(seen) == set(expected) and seen != expected  # at least once: duplicates
        assert sum(seen.values()) > sum(expected.values())
