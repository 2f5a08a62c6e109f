"""``stateful_foreach_batch`` over the pinned Kafka source with one input partition per affinity
task (the source's option ``affinity.tasksPerPartition``) on the real broker and the 3-worker
cluster: two co-partitioned topics read under ``minPartitions`` (Kafka splits each partition,
the source groups partition p of both topics and every split back into task ``Partition p``),
and SEP-32 virtual tasks (factor 2: ``Partition p-b-2`` keeps key bucket b of partition p, the
bucket Python's ``stable_hash`` gives), each task on the executor its job model names, no
shuffle, every batch's state equal to a pandas reference, each topic-partition's offsets in the
commit record, a partition added a new task; without the option such a batch is refused naming
it."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from docs_snippets import snippet
from pyspark import cloudpickle
from spark_app import SparkApp
from stalls import kill_when_marked, stalls_once
from test_kafka_query import OUTPUT, count, produce

from coordinator.config import JobConfig, load_config
from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import BatchReport, StatefulQuery, stateful_foreach_batch
from groupers.keys import key_bucket
from locality.spark import status
from locality.spark.kafka import OffsetRange, end_offsets, read_range
from locality.spark.kafka_source import (
    KAFKA_FORMAT,
    TASKS_OPTION,
    PartitionGroup,
    clear_placement,
    planned_locations,
    source_partitions,
    source_ranges,
)

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PARTITIONS = 4


def job_config(
    zk: EmbeddedZooKeeper, tmp: Path, topics: list[str], partitions: int, factor: int
) -> JobConfig:
    """A ``group-by-partition`` job over ``topics`` (co-partitioned) with elasticity ``factor``."""
    return load_config(
        data={
            "job": {"name": f"kg-{topics[0][-6:]}", "id": "1", "run_id": "r1"},
            "zookeeper": {"connect": zk.hosts, "root": "/affinity-kafka-groups"},
            "inputs": [{"system": "kafka", "stream": t, "partitions": partitions} for t in topics],
            "ssp_grouper": {"name": "group-by-partition", "options": {"elasticity_factor": factor}},
            "coordinator": {"debounce_ms": 100, "debounce_max_ms": 1000},
            "state": {
                "checkpoint_dir": str(tmp / "durable"),
                "local_dir": str(tmp / "local"),
                "max_parallelism": 64,
            },
        },
        environ={},
    )


class Stream:
    """The handler as a query's ``foreachBatch`` over ``topics``: each batch's output and end
    offsets (``topic-p`` -> offset, from Spark's progress reports)."""

    def __init__(
        self,
        app: SparkApp,
        servers: str,
        topics: list[str],
        config: JobConfig,
        function: Any = count,
    ) -> None:
        self.app, self.servers, self.topics = app, servers, topics
        self.config, self.function = config, function
        self.outputs: dict[int, list[tuple[Any, ...]]] = {}
        self.ends: dict[int, dict[str, int]] = {}
        self.input_rows: dict[int, int] = {}  # Spark's numInputRows per batch
        self.handler = self.make()

    def make(self) -> StatefulQuery:
        return stateful_foreach_batch(
            self.function, key_columns=["key"], output_schema=OUTPUT,
            state_schema="n long, total long", sink=self.sink, config=self.config,
            kafka=self.servers,
        )  # fmt: skip

    def sink(self, df: Any, batch: int) -> None:
        self.outputs[batch] = sorted(tuple(r) for r in df.collect())

    def run(self, checkpoint: Path, reader: Any = None, **options: str) -> list[BatchReport]:
        """One availableNow run of the query with the source's ``options`` (over ``reader``, a
        ``readStream`` of the source naming its topics, when given); its reports."""
        assert self.app.session is not None
        before = len(self.handler.reports)
        if reader is None:
            reader = self.app.session.readStream.format(KAFKA_FORMAT).option(
                "subscribe", ",".join(self.topics)
            )
        reader = (
            reader.option("kafka.bootstrap.servers", self.servers)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 900)
        )
        for name, value in options.items():
            reader = reader.option(name, value)
        query = (
            reader.load()
            .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition")
            .writeStream.foreachBatch(self.handler)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(300), "the query did not finish"
        for progress in query.recentProgress:
            (source,) = progress["sources"]
            self.ends[progress["batchId"]] = batch_ends(source["endOffset"])
            self.input_rows[progress["batchId"]] = progress["numInputRows"]
        return self.handler.reports[before:]

    def committed_offsets(self) -> dict[str, int]:
        latest = self.handler._commit_log().latest()
        assert latest is not None
        return dict(latest.offsets)


def batch_ends(document: Any) -> dict[str, int]:
    """``topic-p`` -> offset of a progress report's ``endOffset`` (every topic)."""
    parsed = json.loads(document) if isinstance(document, str) else document
    return {f"{t}-{p}": int(o) for t, parts in parsed.items() for p, o in parts.items()}


def reference(servers: str, topics: list[str], ends: dict[int, dict[str, int]]) -> dict[int, Any]:
    """Each batch's output from the topics' records in pandas: per (key, partition) touched in
    the batch, the count and total of its records (every topic) up to the batch's end."""
    rows = []
    for topic in topics:
        for part, end in end_offsets(servers, [topic]).items():
            table = read_range(servers, OffsetRange(topic, part.partition, 0, end))
            rows += [
                (f"{topic}-{part.partition}", part.partition, r["offset"], r["key"].decode(),
                 int(r["value"]))
                for r in table.to_pylist()
            ]  # fmt: skip
    records = pd.DataFrame(rows, columns=["tp", "partition", "offset", "key", "value"])
    expected: dict[int, Any] = {}
    seen: dict[str, int] = {}
    for batch in sorted(ends):
        start = records["tp"].map(lambda tp, done=seen: done.get(tp, 0))
        end = records["tp"].map(lambda tp, b=batch: ends[b].get(tp, 0))
        upto = records[records["offset"] < end]
        touched = set(map(tuple, records[(records["offset"] >= start) & (records["offset"] < end)][
            ["key", "partition"]].itertuples(index=False)))  # fmt: skip
        totals = upto.groupby(["key", "partition"])["value"].agg(["count", "sum"])
        expected[batch] = sorted(
            (k, int(p), int(n), int(t))
            for (k, p), n, t in zip(totals.index, totals["count"], totals["sum"], strict=True)
            if (k, p) in touched
        )
        seen = dict(ends[batch])
    return expected


def probe(app: SparkApp, servers: str, topics: list[str], tmp: Path, **options: str) -> Any:
    """What each Spark partition of the source's first batch reads with ``minPartitions`` 16
    and ``options``, and each topic-partition's range (a plain ``foreachBatch``)."""
    assert app.session is not None
    seen: list[Any] = []
    reader = (
        app.session.readStream.format(KAFKA_FORMAT)
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
        .option("minPartitions", 16)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(
            lambda df, _: seen.append((source_partitions(df), source_ranges(df)))
        )
        .option("checkpointLocation", str(tmp / f"probe-{len(options)}"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300)
    return seen[0]


def test_co_partitioned_topics_under_min_partitions_run_one_task_per_partition(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Any,
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    servers = kafka_broker.bootstrap_servers
    topics = sorted([kafka_topic(PARTITIONS), kafka_topic(PARTITIONS)])
    produce(kafka_broker, topics[0], 0, 1200)
    produce(kafka_broker, topics[1], 5000, 600)
    split, _ = probe(app, servers, topics, tmp_path)
    assert len(split) >= 16 and len(set(split)) == 2 * PARTITIONS  # Kafka split each partition
    grouped, ranges = probe(app, servers, topics, tmp_path, **{TASKS_OPTION: "1"})
    assert grouped == [PartitionGroup(p, 0, 1) for p in range(PARTITIONS)]  # one per task
    ends = {p: (0, end) for t in topics for p, end in end_offsets(servers, [t]).items()}
    assert ranges == ends  # each topic-partition's splits merged

    config = job_config(zk_server, tmp_path, topics, PARTITIONS, 1)
    stream = Stream(app, servers, topics, config)
    clear_placement(app.session)
    options = {TASKS_OPTION: "1", "minPartitions": "16"}
    try:
        before = status.shuffle_bytes(app.sc)
        first = stream.run(tmp_path / "checkpoint", **options)
        assert status.shuffle_bytes(app.sc) == before  # no exchange in any batch
        assert sum(r.rows_in for r in first) == 1800 and len(first) >= 2
        assert all((r.tasks, r.pinned_ok, r.driver_rows) == (4, 4, 0) for r in first)
        assert stream.committed_offsets() == stream.ends[first[-1].batch]
        assert len(stream.committed_offsets()) == 2 * PARTITIONS  # every topic-partition

        # a partition added to both topics: a new task reading partition 4 of each
        for topic in topics:
            kafka_broker.add_partitions(topic, PARTITIONS + 1)
        produce(kafka_broker, topics[0], 1200, 500)
        produce(kafka_broker, topics[1], 5600, 500)
        grown = stream.run(tmp_path / "checkpoint", **options)
        assert status.shuffle_bytes(app.sc) == before
        assert sum(r.rows_in for r in grown) == 1000
        assert (grown[-1].tasks, grown[-1].pinned_ok) == (PARTITIONS + 1, PARTITIONS + 1)
        offsets = stream.committed_offsets()
        assert offsets == stream.ends[grown[-1].batch] and len(offsets) == 2 * (PARTITIONS + 1)
        assert all(offsets[f"{t}-{PARTITIONS}"] > 0 for t in topics)
    finally:
        stream.handler.close()
    assert stream.outputs == reference(servers, topics, stream.ends)  # state exact


def test_virtual_tasks_read_their_key_bucket_on_executors_of_their_own(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Any,
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    assert app.session is not None
    jvm = app.session.sparkContext._jvm
    rng = random.Random(7)
    keys = [rng.randbytes(rng.randrange(0, 40)) for _ in range(500)] + [b"k001", b""]
    for factor in (2, 4):  # the Java filter's bucket is Python's stable_hash bucket
        for key in keys:
            assert jvm.affinity.spark.GroupedReader.bucket(key, 0, factor) == key_bucket(
                key, factor
            )
        for offset in (0, 7, 123456789012):  # a record without a key: its offset's
            assert jvm.affinity.spark.GroupedReader.bucket(None, offset, factor) == key_bucket(
                None, factor, offset=offset
            )

    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(PARTITIONS)
    stream = Stream(app, servers, [topic], job_config(zk_server, tmp_path, [topic], PARTITIONS, 2))
    clear_placement(app.session)
    try:
        produce(kafka_broker, topic, 0, 1500)
        with pytest.raises(Exception, match=rf'option\("{TASKS_OPTION}", 2\)'):
            stream.run(tmp_path / "refused")  # Kafka's partitions are not the virtual tasks
        before = status.shuffle_bytes(app.sc)
        first = stream.run(tmp_path / "checkpoint", **{TASKS_OPTION: "2"})
        produce(kafka_broker, topic, 1500, 400)
        later = stream.run(tmp_path / "checkpoint", **{TASKS_OPTION: "2"})
        assert status.shuffle_bytes(app.sc) == before
        reports = first + later
        assert sum(r.rows_in for r in reports) == 1900 and len(reports) >= 3
        assert all((r.tasks, r.pinned_ok) == (8, 8) for r in reports)
        assert all(r.warm == 8 for r in reports[1:])
        planned = planned_locations(app.session)
        groups = {g: loc for g, loc in planned.items() if isinstance(g, PartitionGroup)}
        assert {(g.partition, g.bucket) for g in groups} == {
            (p, b) for p in range(4) for b in (0, 1)
        }
        assert len(set(groups.values())) == 3  # on every executor
        split = [
            p
            for p in range(4)
            if groups[PartitionGroup(p, 0, 2)] != groups[PartitionGroup(p, 1, 2)]
        ]
        assert split  # a partition's two buckets on two executors
        assert stream.committed_offsets() == stream.ends[reports[-1].batch]
    finally:
        stream.handler.close()
    assert stream.outputs == reference(servers, [topic], stream.ends)  # state exact


def docs_reader(app: SparkApp) -> Any:
    """docs/kafka.md's ``kafka-groups`` block as written (its ``reader``), on ``app``'s session."""
    namespace: dict[str, Any] = {"spark": app.session}
    exec(compile(snippet("docs/kafka.md", "kafka-groups"), "kafka-groups", "exec"), namespace)
    return namespace["reader"]


def test_grouped_tasks_through_an_executor_kill_and_an_application_restart(
    app: SparkApp,
    spark_cluster: Any,
    kafka_broker: KafkaBroker,
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    """docs/kafka.md's reader (two co-partitioned topics, key buckets of factor 2, 32
    ``minPartitions`` splits: 8 tasks on the 3 executors) through an executor killed while its
    task runs a batch, then an application restart from the same checkpointLocation: every
    batch's state equal to the pandas reference, each record once (the commit record's offsets
    are Spark's, every topic-partition), the tasks of the executors that lived warm through the
    kill, nothing read back from the durable checkpoints after the restart, and Spark's
    ``numInputRows`` the rows the handler saw, batch by batch."""
    servers, topics = kafka_broker.bootstrap_servers, ["orders", "payments"]  # the snippet's
    for topic in topics:
        kafka_broker.create_topic(topic, PARTITIONS)
    tasks = 2 * PARTITIONS
    armed, marker = tmp_path / "armed", tmp_path / "stalled"
    function = stalls_once(count, str(armed), str(marker))
    config = job_config(zk_server, tmp_path, topics, PARTITIONS, 2)
    stream = Stream(app, servers, topics, config, function)
    checkpoint = tmp_path / "checkpoint"
    reports: list[BatchReport] = []
    clear_placement(app.session)
    try:
        produce(kafka_broker, topics[0], 0, 900)
        produce(kafka_broker, topics[1], 5000, 600)
        before = status.shuffle_bytes(app.sc)
        first = stream.run(checkpoint, docs_reader(app))
        reports += first
        assert sum(r.rows_in for r in first) == 1500 and len(first) >= 2
        assert all((r.tasks, r.pinned_ok, r.driver_rows) == (tasks, tasks, 0) for r in first)
        assert first[0].new == tasks and all(r.warm == tasks for r in first[1:])

        # an executor killed while one of its tasks runs the batch
        planned = {
            g: loc
            for g, loc in planned_locations(app.session).items()
            if isinstance(g, PartitionGroup)
        }
        assert len(planned) == tasks and len(set(planned.values())) == 3
        produce(kafka_broker, topics[0], 900, 400)
        produce(kafka_broker, topics[1], 5600, 400)
        armed.touch()
        killed: list[str] = []
        kill_when_marked(marker, spark_cluster, app.app_id, killed)
        hit = stream.run(checkpoint, docs_reader(app))
        armed.unlink()
        reports += hit
        assert killed and sum(r.rows_in for r in hit) == 800
        lost = sum(loc.endswith(f"_{killed[0]}") for loc in planned.values())
        assert 0 < lost < tasks
        # the tasks of the executors that lived kept their state (warm); the killed ones'
        # retries found their host's copy or restored theirs
        assert all(r.warm >= tasks - lost and r.warm + r.restored == tasks for r in hit)
        assert stream.committed_offsets() == stream.ends[hit[-1].batch]
        app.ready(exclude=tuple(killed))

        produce(kafka_broker, topics[0], 1300, 200)
        produce(kafka_broker, topics[1], 6000, 200)
        after = stream.run(checkpoint, docs_reader(app))
        reports += after
        assert sum(r.rows_in for r in after) == 400
        assert all((r.tasks, r.pinned_ok) == (tasks, tasks) for r in after)
        assert all(r.warm >= tasks - lost and r.new == 0 for r in after)
        assert status.shuffle_bytes(app.sc) == before  # no exchange, the retries too

        # the application restarted: Spark's offset log carries on, each host's copy is warm
        stream.handler.close()
        app.restart()
        clear_placement(app.session)
        stream.handler = stream.make()
        before = status.shuffle_bytes(app.sc)
        produce(kafka_broker, topics[0], 1500, 300)
        produce(kafka_broker, topics[1], 6200, 300)
        restarted = stream.run(checkpoint, docs_reader(app))
        reports += restarted
        assert sum(r.rows_in for r in restarted) == 600
        assert all((r.tasks, r.pinned_ok, r.new) == (tasks, tasks, 0) for r in restarted)
        assert all(r.warm == tasks and r.bytes_restored == 0 for r in restarted)
        assert status.shuffle_bytes(app.sc) == before
        offsets = stream.committed_offsets()
        assert offsets == stream.ends[restarted[-1].batch] and len(offsets) == 2 * PARTITIONS
        assert sum(offsets.values()) == 1500 + 800 + 400 + 600  # each record once
    finally:
        stream.handler.close()
    assert stream.outputs == reference(servers, topics, stream.ends)  # state exact, every batch
    assert sorted(stream.outputs) == sorted(stream.ends) == [r.batch for r in reports]
    # Spark's progress counts the rows the handler saw (the grouped reader's, key bucket kept)
    assert stream.input_rows == {r.batch: r.rows_in for r in reports}
