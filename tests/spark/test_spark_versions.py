"""The smoke test of an older supported Spark: one pinned stateful query through an executor
kill. ``make test`` runs it, with the README's quick start, in ``.venv-spark35`` (pyspark 3.5,
the oldest ``pyproject.toml`` allows: ``make spark35``); on Spark 4 the main suite's
``test_stateful_streaming.py`` runs the same query through more (a rolling restart, an
application restart, a crash mid-batch), so it is skipped there.

The query's output equals the single-process reference, batch by batch; every task runs on the
executor its job model names (the pinned shuffle: affinity's jar compiled against this pyspark's
Scala), before and after the kill; the tasks the kill did not touch stay warm.

And the pinned Kafka source (``format("affinity-kafka")``, delegating to Spark's connector for
Scala 2.12, ``spark-sql-kafka-0-10_2.12`` 3.5.7) on the real broker with one input partition per
affinity task (``affinity.tasksPerPartition`` 2, two co-partitioned topics split by
``minPartitions``): the Spark 4 suite's ``test_kafka_source_groups.py`` in short.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pyspark
import pytest
from affinity_pipeline.cluster import StandaloneCluster
from affinity_pipeline.streaming import (
    OUTPUT_SCHEMA,
    STATE_SCHEMA,
    ClickFiles,
    count_clicks,
    reference_clicks,
)
from spark_app import SparkApp
from test_kafka_query import produce
from test_kafka_source_groups import Stream, probe, reference
from test_kafka_source_groups import job_config as kafka_job_config
from test_stateful_streaming import TASKS, FileQuery, Sink, job_config, replace_executor

from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import stateful_foreach_batch
from coordinator.streaming.query import StatefulQuery
from locality.spark import status
from locality.spark.kafka import end_offsets
from locality.spark.kafka_source import (
    TASKS_OPTION,
    PartitionGroup,
    clear_placement,
    planned_locations,
)

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        int(pyspark.__version__.split(".")[0]) >= 4,
        reason="Spark 4: test_stateful_streaming.py covers it (make spark35 runs this on 3.5)",
    ),
]


@pytest.fixture
def handlers() -> Iterator[list[StatefulQuery]]:
    made: list[StatefulQuery] = []
    yield made
    for handler in made:
        handler.close()


def test_a_pinned_stateful_query_through_an_executor_kill(
    app: SparkApp,
    spark_cluster: StandaloneCluster,
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
    handlers: list[StatefulQuery],
) -> None:
    files = ClickFiles(tmp_path / "in")
    sink = Sink()
    handler = stateful_foreach_batch(
        count_clicks,
        key_columns=["user"],
        output_schema=OUTPUT_SCHEMA,
        state_schema=STATE_SCHEMA,
        sink=sink,
        config=job_config(zk_server, tmp_path, "clicks-smoke"),
    )
    handlers.append(handler)
    query = FileQuery(app, files, handler, tmp_path / "spark-checkpoint")
    query.start()
    steady = query.run(range(0, 2))
    replace_executor(app, spark_cluster, app.executors()[0].executor_id)
    after = query.run(range(2, 4))
    query.stop()

    assert sink.batches == reference_clicks(files, range(4))
    assert all(r.pinned_ok == r.pinned_total == TASKS for r in [*steady, *after]), after
    assert steady[1].warm == TASKS  # the second batch finds every task's state in place
    assert after[-1].warm == TASKS  # and so does the last, after the moved tasks restored


@pytest.mark.kafka
def test_the_pinned_kafka_source_runs_one_input_partition_per_affinity_task(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    """Two co-partitioned topics of 2 partitions, each split in 4 by ``minPartitions`` 16;
    factor 2: 4 affinity tasks (``Partition p-b-2``, key bucket b of partition p of both
    topics), so 4 input partitions, each read by its task on the executor its job model names,
    no shuffle, the state equal to a pandas reference batch by batch."""
    servers, partitions, factor = kafka_broker.bootstrap_servers, 2, 2
    topics = sorted([kafka_topic(partitions), kafka_topic(partitions)])
    produce(kafka_broker, topics[0], 0, 800)
    produce(kafka_broker, topics[1], 5000, 400)
    options = {TASKS_OPTION: str(factor), "minPartitions": "16"}
    groups = [PartitionGroup(p, b, factor) for p in range(partitions) for b in range(factor)]

    planned, ranges = probe(app, servers, topics, tmp_path, **{TASKS_OPTION: str(factor)})
    assert planned == groups  # one input partition per task, Kafka's splits grouped back
    ends = {p: (0, end) for t in topics for p, end in end_offsets(servers, [t]).items()}
    assert ranges == ends

    config = kafka_job_config(zk_server, tmp_path, topics, partitions, factor)
    stream = Stream(app, servers, topics, config)
    clear_placement(app.session)
    try:
        before = status.shuffle_bytes(app.sc)
        reports = stream.run(tmp_path / "checkpoint", **options)
        assert status.shuffle_bytes(app.sc) == before  # 0 bytes shuffled
        assert stream.committed_offsets() == stream.ends[reports[-1].batch]
    finally:
        stream.handler.close()
    tasks = len(groups)
    assert sum(r.rows_in for r in reports) == 1200 and len(reports) == 2  # 700 a batch at most
    assert all((r.tasks, r.pinned_ok, r.driver_rows) == (tasks, tasks, 0) for r in reports)
    assert reports[1].warm == tasks  # the second batch finds each task's state in place
    placed = {g: loc for g, loc in planned_locations(app.session).items() if g in groups}
    executors = {e.task_location for e in app.executors()}
    assert sorted(placed, key=groups.index) == groups and set(placed.values()) <= executors
    assert len(set(placed.values())) > 1  # the tasks spread over the executors
    assert stream.outputs == reference(servers, topics, stream.ends)  # state exact
