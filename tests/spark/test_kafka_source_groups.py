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

import random
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from docs_snippets import snippet
from kafka_streams import Stream, kafka_reader, shuffle_bytes
from pyspark import cloudpickle
from spark_app import SparkApp
from stalls import kill_when_marked, stalls_once
from test_kafka_query import count, produce

from coordinator.config import JobConfig, load_config
from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import BatchReport
from groupers.keys import key_bucket
from locality.spark.kafka import OffsetRange, end_offsets, read_range
from locality.spark.kafka_source import (
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


def grouped_stream(
    app: SparkApp, servers: str, topics: list[str], config: JobConfig, function: Any = count
) -> Stream:
    """The query over ``topics``, its commits shown under the job's consumer group, at most 900
    offsets a trigger."""
    return Stream(app, servers, topics, config, function, kafka=servers, cap=900)


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
    seen: list[Any] = []
    reader = kafka_reader(app, servers, topics, minPartitions=16, **options)
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
    stream = grouped_stream(app, servers, topics, config)
    clear_placement(app.session)
    options = {TASKS_OPTION: "1", "minPartitions": "16"}
    try:
        before = shuffle_bytes(app)
        first = stream.run(tmp_path / "checkpoint", **options)
        assert shuffle_bytes(app) == before  # no exchange in any batch
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
        assert shuffle_bytes(app) == before
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
    config = job_config(zk_server, tmp_path, [topic], PARTITIONS, 2)
    stream = grouped_stream(app, servers, [topic], config)
    clear_placement(app.session)
    try:
        produce(kafka_broker, topic, 0, 1500)
        with pytest.raises(Exception, match=rf'option\("{TASKS_OPTION}", 2\)'):
            stream.run(tmp_path / "refused")  # Kafka's partitions are not the virtual tasks
        before = shuffle_bytes(app)
        first = stream.run(tmp_path / "checkpoint", **{TASKS_OPTION: "2"})
        produce(kafka_broker, topic, 1500, 400)
        later = stream.run(tmp_path / "checkpoint", **{TASKS_OPTION: "2"})
        assert shuffle_bytes(app) == before
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


TASKS = 2 * PARTITIONS  # docs/kafka.md's reader: key buckets of factor 2


class DocsRun:
    """docs/kafka.md's reader run over the snippet's topics by ``stream``: each run's reports,
    all kept in order."""

    def __init__(self, app: SparkApp, broker: KafkaBroker, stream: Stream, checkpoint: Path):
        self.app, self.broker, self.stream, self.checkpoint = app, broker, stream, checkpoint
        self.reports: list[BatchReport] = []

    def run(self, orders: tuple[int, int], payments: tuple[int, int]) -> list[BatchReport]:
        """Records produced to each topic (its first number, how many), then one run of the
        reader; its reports."""
        produce(self.broker, self.stream.topics[0], *orders)
        produce(self.broker, self.stream.topics[1], *payments)
        reports = self.stream.run(self.checkpoint, docs_reader(self.app))
        self.reports += reports
        return reports


def first_batches(docs: DocsRun) -> None:
    """The first records: every task new in the first batch, warm after, on its executor."""
    first = docs.run((0, 900), (5000, 600))
    assert sum(r.rows_in for r in first) == 1500 and len(first) >= 2
    assert all((r.tasks, r.pinned_ok, r.driver_rows) == (TASKS, TASKS, 0) for r in first)
    assert first[0].new == TASKS and all(r.warm == TASKS for r in first[1:])


def an_executor_killed(docs: DocsRun, cluster: Any, armed: Path, marker: Path) -> int:
    """An executor killed while one of its tasks runs the batch: the tasks of the executors
    that lived warm, the others' retries warm or restored; how many tasks it had."""
    assert docs.app.session is not None
    planned = {
        g: loc
        for g, loc in planned_locations(docs.app.session).items()
        if isinstance(g, PartitionGroup)
    }
    assert len(planned) == TASKS and len(set(planned.values())) == 3
    armed.touch()
    killed: list[str] = []
    kill_when_marked(marker, cluster, docs.app.app_id, killed)
    hit = docs.run((900, 400), (5600, 400))
    armed.unlink()
    assert killed and sum(r.rows_in for r in hit) == 800
    lost = sum(loc.endswith(f"_{killed[0]}") for loc in planned.values())
    assert 0 < lost < TASKS
    # the tasks of the executors that lived kept their state (warm); the killed ones'
    # retries found their host's copy or restored theirs
    assert all(r.warm >= TASKS - lost and r.warm + r.restored == TASKS for r in hit)
    assert docs.stream.committed_offsets() == docs.stream.ends[hit[-1].batch]
    docs.app.ready(exclude=tuple(killed))
    return lost


def after_the_kill(docs: DocsRun, lost: int) -> None:
    """The next batch: every task on its executor, none new (``lost`` of them moved)."""
    after = docs.run((1300, 200), (6000, 200))
    assert sum(r.rows_in for r in after) == 400
    assert all((r.tasks, r.pinned_ok) == (TASKS, TASKS) for r in after)
    assert all(r.warm >= TASKS - lost and r.new == 0 for r in after)


def the_application_restarted(docs: DocsRun) -> None:
    """Spark's offset log carries on, each host's copy is warm, no shuffle; the commit record
    has every topic-partition's offset, each record counted once."""
    stream = docs.stream
    stream.handler.close()
    docs.app.restart()
    clear_placement(docs.app.session)
    stream.handler = stream.make()
    before = shuffle_bytes(docs.app)
    restarted = docs.run((1500, 300), (6200, 300))
    assert sum(r.rows_in for r in restarted) == 600
    assert all((r.tasks, r.pinned_ok, r.new) == (TASKS, TASKS, 0) for r in restarted)
    assert all(r.warm == TASKS and r.bytes_restored == 0 for r in restarted)
    assert shuffle_bytes(docs.app) == before
    offsets = stream.committed_offsets()
    assert offsets == stream.ends[restarted[-1].batch] and len(offsets) == 2 * PARTITIONS
    assert sum(offsets.values()) == 1500 + 800 + 400 + 600  # each record once


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
    armed, marker = tmp_path / "armed", tmp_path / "stalled"
    function = stalls_once(count, str(armed), str(marker))
    config = job_config(zk_server, tmp_path, topics, PARTITIONS, 2)
    stream = grouped_stream(app, servers, topics, config, function)
    docs = DocsRun(app, kafka_broker, stream, tmp_path / "checkpoint")
    clear_placement(app.session)
    try:
        before = shuffle_bytes(app)
        first_batches(docs)
        lost = an_executor_killed(docs, spark_cluster, armed, marker)
        after_the_kill(docs, lost)
        assert shuffle_bytes(app) == before  # no exchange, the retries too
        the_application_restarted(docs)
    finally:
        stream.handler.close()
    assert stream.outputs == reference(servers, topics, stream.ends)  # state exact, every batch
    assert sorted(stream.outputs) == sorted(stream.ends) == [r.batch for r in docs.reports]
    # Spark's progress counts the rows the handler saw (the grouped reader's, key bucket kept)
    assert stream.input_rows == {r.batch: r.rows_in for r in docs.reports}
