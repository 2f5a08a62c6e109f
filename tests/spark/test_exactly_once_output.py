"""Exactly-once output from the Kafka query to a topic, on the real broker and the 3-worker
cluster: through a sink crash before the commit, the driver dying between the commit and the
publish (a new driver publishes what is owed, once), a publish run again, and an executor killed
in the middle of a publish (its records written, its transaction open), a read_committed reader
of the output topic sees each batch's output exactly once. The same crash with
``delivery="at-least-once"`` shows the duplicates exactly once removes."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from affinity_pipeline.cluster import StandaloneCluster
from pyspark import cloudpickle
from spark_app import SparkApp
from stalls import kill_when_marked
from streaming_soak import InjectedCrash, crash_after_commit
from test_kafka_query import OUTPUT, count, kafka_config, produce

from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming.kafka_query import KafkaQuery, stateful_kafka_query
from locality.spark.kafka import OffsetRange, end_offsets, read_range
from locality.spark.state import latest_commit
from locality.spark.state.task_output import Publisher

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
        query.handler.sink.crash = True  # type: ignore[union-attr]
        with pytest.raises(InjectedCrash):
            query.run_batch()
        again = query.run_batch()  # Spark runs the same batch again
        assert again is not None and (again.batch, again.rows_in) == (1, 200)
        produce(broker, topic, 500, 300)
        crash_after_commit(query.handler)
        with pytest.raises(InjectedCrash):
            query.run_batch()
        commit = latest_commit(query.handler.storage)
        assert commit is not None and commit.batch == 2  # committed, not published
    finally:
        query.close()
    query = make()  # a new driver
    try:
        produce(broker, topic, 800, 100)
        replayed = query.run_batch()  # Spark runs batch 2 again (not in its commit log)
        assert replayed is not None and (replayed.batch, replayed.rows_in) == (2, 300)
        report = query.run_batch()
        assert report is not None and (report.batch, report.rows_in) == (3, 100)
        output = query.handler.output
        if output is not None and output.publisher is not None:
            output.published = -1  # a publish run again (a zombie): it finds the mark
            assert output.publish(app.sc, latest_commit(query.handler.storage)) == 0  # type: ignore[arg-type]
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


@dataclass(frozen=True)
class StallsMidPublish:
    """A publisher whose first publish once ``armed`` exists stops right before its transaction
    commits (its records written, the transaction open), writing its executor id to ``marker``
    (to be killed there); every other publish, and the retry, runs as it is."""

    inner: Publisher
    armed: str
    marker: str

    def __call__(self, task: str, payload: tuple[int, str]) -> int:
        import os
        import time

        import locality.spark.kafka.publish as publish
        from locality.spark import current_executor_id

        if not os.path.exists(self.armed) or os.path.exists(self.marker):
            return self.inner(task, payload)
        real = publish.TransactionalWriter.commit

        def stalled(writer: Any) -> int:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return real(writer)
            os.write(fd, (current_executor_id() or "").encode())
            os.close(fd)
            time.sleep(120)  # killed here
            return real(writer)

        publish.TransactionalWriter.commit = stalled  # type: ignore[method-assign]
        try:
            return self.inner(task, payload)
        finally:
            publish.TransactionalWriter.commit = real  # type: ignore[method-assign]


def test_an_executor_killed_in_the_middle_of_a_publish_publishes_once(
    app: SparkApp,
    spark_cluster: StandaloneCluster,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    topic, out = kafka_topic(4), kafka_topic(3)
    config = kafka_config(zk_server, tmp_path, topic, 4)
    armed, marker = tmp_path / "armed", tmp_path / "stalled"
    assert app.session is not None
    query = stateful_kafka_query(
        count, spark=app.session, kafka=kafka_broker.bootstrap_servers, output_schema=OUTPUT,
        state_schema="n long, total long", config=config, output_topic=out,
    )  # fmt: skip
    output = query.handler.output
    assert output is not None and output.publisher is not None
    output.publisher = StallsMidPublish(output.publisher, str(armed), str(marker))  # type: ignore[assignment]
    produced = [range(0, 300), range(300, 500), range(500, 600)]
    killed: list[str] = []
    try:
        produce(kafka_broker, topic, 0, 300)
        query.run_batch()
        produce(kafka_broker, topic, 300, 200)
        armed.touch()
        watcher = kill_when_marked(marker, spark_cluster, app.app_id, killed)
        during = query.run_batch()  # committed; its publish is killed mid-transaction
        watcher.join(5)
        armed.unlink()
        assert killed, "no publish stalled"
        app.ready(exclude=tuple(killed))
        produce(kafka_broker, topic, 500, 100)
        after = query.run_batch()  # publishes what batch 1 still owes (if anything) first
    finally:
        query.close()
    assert during is not None and after is not None and (during.batch, after.batch) == (1, 2)
    assert output_records(kafka_broker, out) == expected_records(produced)  # each record once
