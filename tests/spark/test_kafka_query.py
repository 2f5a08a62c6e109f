"""A Kafka query whose tasks own their partitions (coordinator.streaming.kafka_query: Spark's Kafka
source pinned, one call) on the 3-worker cluster and a real broker: each task reads its partition
on its executor, and through an executor killed mid-batch, a broker restart, an application
restart, a partition added (a new task) and a backlog read under a per-batch cap, every batch's
output equals a single-process reference over the topic's records and every record is counted
once; virtual tasks split a partition by key bucket; the output can go to a topic."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark import cloudpickle
from spark_app import SparkApp
from stalls import kill_when_marked, stalls_once

from coordinator.config import JobConfig, load_config
from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming.kafka_query import KafkaQuery, stateful_kafka_query
from locality.spark.kafka import (
    OffsetRange,
    end_offsets,
    group_offsets,
    read_range,
    write_records,
)
from locality.spark.state import latest_commit

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])

OUTPUT = "key string, partition int, n long, total long"
KEYS = 60


def count(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """Records and value total per key (its partition too: a key is counted where it is)."""
    import pandas as pd

    n, total = state.get if state.exists else (0, 0)
    partition = -1
    for pdf in pdfs:
        n += len(pdf)
        total += int(pdf["value"].astype("int64").sum())
        partition = int(pdf["partition"].iloc[0])
    state.update((n, total))
    yield pd.DataFrame({"key": [key[0]], "partition": [partition], "n": [n], "total": [total]})


def produce(broker: KafkaBroker, topic: str, start: int, count: int) -> None:
    """``count`` records ``k<i mod KEYS>`` -> ``i``, keyed (Kafka puts a key in one partition)."""
    frame = pd.DataFrame(
        {
            "key": [f"k{i % KEYS:03d}" for i in range(start, start + count)],
            "value": [str(i) for i in range(start, start + count)],
        }
    )
    write_records(broker.bootstrap_servers, topic, frame)


def kafka_config(
    zk: EmbeddedZooKeeper, tmp: Path, topic: str, partitions: int, factor: int = 1
) -> JobConfig:
    return load_config(
        data={
            "job": {"name": f"kq-{topic[-6:]}", "id": "1", "run_id": "r1"},
            "zookeeper": {"connect": zk.hosts, "root": "/affinity-kafka"},
            "inputs": [{"system": "kafka", "stream": topic, "partitions": partitions}],
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


class Run:
    """A query, its sink, and each batch's offsets (to rebuild the reference)."""

    def __init__(self, make: Callable[[Callable[[Any, int], None]], KafkaQuery]) -> None:
        self.outputs: dict[int, list[tuple[Any, ...]]] = {}
        self.ends: dict[int, dict[str, int]] = {}
        self.make = make
        self.query = make(self.sink)
        self.fail_once = False

    def sink(self, df: Any, batch: int) -> None:
        if self.fail_once:
            self.fail_once = False
            raise RuntimeError(f"the sink failed once in batch {batch}")
        self.outputs[batch] = sorted(tuple(r) for r in df.collect())

    def batch(self) -> Any:
        report = self.query.run_batch()
        assert report is not None, "no batch ran"
        commit = latest_commit(self.query.handler.storage)
        assert commit is not None and commit.batch == report.batch
        self.ends[report.batch] = dict(commit.offsets)
        return report

    def restart(self) -> None:
        self.query.close()
        self.query = self.make(self.sink)


def reference(broker: KafkaBroker, topic: str, ends: dict[int, dict[str, int]]) -> dict[int, Any]:
    """Each batch's output computed in one process from the topic's records and the batches'
    offsets: per (key, partition), the count and total of its records up to the batch's end."""
    last = {str(p): e for p, e in end_offsets(broker.bootstrap_servers, [topic]).items()}
    records = []
    for name, end in last.items():
        partition = int(name.rsplit("-", 1)[1])
        table = read_range(broker.bootstrap_servers, OffsetRange(topic, partition, 0, end))
        records += [
            (partition, r["offset"], r["key"].decode(), int(r["value"])) for r in table.to_pylist()
        ]
    expected: dict[int, Any] = {}
    seen: dict[str, int] = {}
    state: dict[tuple[str, int], tuple[int, int]] = {}
    for batch in sorted(ends):
        touched = set()
        for partition, offset, key, value in sorted(records):
            name = f"{topic}-{partition}"
            if seen.get(name, 0) <= offset < ends[batch].get(name, 0):
                n, total = state.get((key, partition), (0, 0))
                state[key, partition] = (n + 1, total + value)
                touched.add((key, partition))
        seen = dict(ends[batch])
        expected[batch] = sorted((k, p, *state[k, p]) for k, p in touched)
    return expected


def test_tasks_own_their_partitions_through_failures(
    app: SparkApp,
    spark_cluster: Any,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    topic = kafka_topic(4)
    config = kafka_config(zk_server, tmp_path, topic, 4)
    armed, marker = tmp_path / "armed", tmp_path / "stalled"

    def make(sink: Callable[[Any, int], None]) -> KafkaQuery:
        assert app.session is not None
        return stateful_kafka_query(
            stalls_once(count, str(armed), str(marker)),
            spark=app.session, kafka=kafka_broker.bootstrap_servers, output_schema=OUTPUT,
            state_schema="n long, total long", config=config, sink=sink,
            max_records_per_batch=700,
        )  # fmt: skip

    run = Run(make)
    try:
        produce(kafka_broker, topic, 0, 1000)
        first = run.batch()  # the cap: 700 of the 1,000 records (Spark rounds per partition)
        assert 696 <= first.rows_in <= 700
        assert (first.tasks, first.pinned_ok, first.driver_rows) == (4, 4, 0)
        assert run.batch().rows_in == 1000 - first.rows_in  # the backlog, read under the cap
        assert run.query.run_batch() is None  # nothing new: no batch, as in Spark
        # the committed offsets are visible to Kafka's tools, under the job's consumer group
        shown = group_offsets(kafka_broker.bootstrap_servers, run.query.group)
        assert {str(p): o for p, o in shown.items()} == run.ends[1]
        assert sum(run.ends[1].values()) == 1000

        # an executor killed while its task runs the batch
        produce(kafka_broker, topic, 1000, 400)
        armed.touch()
        killed: list[str] = []
        kill_when_marked(marker, spark_cluster, app.app_id, killed)
        assert run.batch().rows_in == 400
        armed.unlink()
        assert killed
        app.ready(exclude=tuple(killed))

        # the broker killed and restarted, with records written before
        produce(kafka_broker, topic, 1400, 300)
        kafka_broker.restart()
        assert run.batch().rows_in == 300

        # the application restarted: a new query carries on from the commit, warm
        run.query.close()
        app.restart()
        run.query = make(run.sink)
        produce(kafka_broker, topic, 1700, 300)
        after_restart = run.batch()
        assert after_restart.rows_in == 300 and after_restart.bytes_restored == 0

        # a partition added: a new task, a rebalance; keys now spread over six partitions
        kafka_broker.add_partitions(topic, 6)
        produce(kafka_broker, topic, 2000, 600)
        grown = run.batch()
        assert grown.tasks == 6 and grown.rows_in == 600 and grown.pinned_ok == 6

        # a partition added between two attempts of a batch: the retry reads the ranges in
        # Spark's offset log (nothing of the new partitions), the next batch starts reading them
        run.fail_once = True
        produce(kafka_broker, topic, 2600, 300)
        with pytest.raises(Exception, match="the sink failed once"):
            run.batch()
        kafka_broker.add_partitions(topic, 8)
        produce(kafka_broker, topic, 2900, 400)
        retried = run.batch()
        assert (retried.batch, retried.tasks, retried.rows_in) == (grown.batch + 1, 6, 300)
        last = run.batch()
        assert (last.tasks, last.rows_in, last.pinned_ok) == (8, 400, 8)
    finally:
        run.query.close()
    assert run.outputs == reference(kafka_broker, topic, run.ends)
    assert sum(len(rows) for rows in run.outputs.values()) > 0


def test_virtual_tasks_read_their_bucket_and_the_output_goes_to_a_topic(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    """Elasticity factor 2: two tasks per partition, each keeps its keys' bucket (every record
    counted once); the output written to a topic in one transaction per task and batch."""
    assert app.session is not None
    topic, out = kafka_topic(2), kafka_topic(3)
    query = stateful_kafka_query(
        count, spark=app.session, kafka=kafka_broker.bootstrap_servers,
        output_schema=OUTPUT, state_schema="n long, total long",
        config=kafka_config(zk_server, tmp_path, topic, 2, factor=2), output_topic=out,
    )  # fmt: skip
    try:
        produce(kafka_broker, topic, 0, 900)
        report = query.run_batch()
        produce(kafka_broker, topic, 900, 300)
        second = query.run_batch()
    finally:
        query.close()
    assert report is not None and second is not None
    assert report.tasks == 4 and report.rows_in == 900 and second.rows_in == 300
    written = []
    for p, end in end_offsets(kafka_broker.bootstrap_servers, [out]).items():
        table = read_range(kafka_broker.bootstrap_servers, OffsetRange(out, p.partition, 0, end))
        rows = [json.loads(r["value"]) for r in table.to_pylist()]
        written += [(row["key"], row["n"]) for row in rows]
    counts = Counter(f"k{i % KEYS:03d}" for i in range(1200))
    final: dict[str, int] = {}
    for key, n in written:
        final[key] = max(final.get(key, 0), n)
    assert final == dict(counts)  # each key's last count: every record counted once
    assert len(written) == KEYS + len({f"k{i % KEYS:03d}" for i in range(900, 1200)})


def sums(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """Records and value total per key (any column: not the Kafka key)."""
    import pandas as pd

    n, total = state.get if state.exists else (0, 0)
    for pdf in pdfs:
        n += len(pdf)
        total += int(pdf["v"].sum())
    state.update((n, total))
    yield pd.DataFrame({"bucket": [key[0]], "n": [n], "total": [total]})


def test_a_query_through_sparks_connector_takes_the_shuffle_path(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    """``readStream.format("kafka")`` keyed by something else than the Kafka key (not
    co-partitioned): stateful_foreach_batch routes it in one pinned shuffle; every batch's
    output equals the reference."""
    from test_stateful_streaming import job_config

    from coordinator.streaming import stateful_foreach_batch

    assert app.session is not None
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(3)
    produce(kafka_broker, topic, 0, 900)
    outputs: dict[int, list[tuple[Any, ...]]] = {}
    handler = stateful_foreach_batch(
        sums, key_columns=["bucket"], output_schema="bucket long, n long, total long",
        state_schema="n long, total long",
        sink=lambda df, b: outputs.__setitem__(b, sorted(tuple(r) for r in df.collect())),
        config=job_config(zk_server, tmp_path, "kafka-connector"),
    )  # fmt: skip
    stream = (
        app.session.readStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 400)
        .load()
        .selectExpr("CAST(CAST(value AS STRING) AS LONG) AS v")
        .selectExpr("v % 7 AS bucket", "v")
    )
    seen: dict[int, list[int]] = {}
    query = (
        stream.writeStream.foreachBatch(
            lambda df, b: (seen.__setitem__(b, [r.v for r in df.collect()]), handler(df, b))
        )
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(300) and query.exception() is None
    finally:
        handler.close()
    assert sorted(v for values in seen.values() for v in values) == list(range(900))
    state: dict[int, tuple[int, int]] = {}
    expected = {}
    for batch in sorted(seen):
        for v in seen[batch]:
            n, total = state.get(v % 7, (0, 0))
            state[v % 7] = (n + 1, total + v)
        expected[batch] = sorted((b, *state[b]) for b in {v % 7 for v in seen[batch]})
    assert {b: rows for b, rows in outputs.items() if rows} == {
        b: rows for b, rows in expected.items() if rows
    }
    assert all(r.driver_rows == 0 for r in handler.reports)


def test_records_deleted_before_they_were_read_fail_or_are_skipped(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    """Retention deleted records the query had not read: the run fails with Spark's source's
    data-loss error (``fail_on_data_loss``, the default: Spark's ``failOnDataLoss``); with it
    off, the gap is skipped; a partition starts where ``starting_offsets`` says."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from coordinator.streaming.runtime import StreamingBatchError

    assert app.session is not None
    topic = kafka_topic(1)
    config = kafka_config(zk_server, tmp_path, topic, 1)

    def make(**options: Any) -> KafkaQuery:
        return stateful_kafka_query(
            count, spark=app.session, kafka=kafka_broker.bootstrap_servers, output_schema=OUTPUT,
            state_schema="n long, total long", config=config, sink=lambda df, b: None,
            **options,
        )  # fmt: skip

    produce(kafka_broker, topic, 0, 100)
    query = make(starting_offsets={topic: {"0": 40}})
    try:
        first = query.run_batch()
        assert first is not None and first.rows_in == 60  # from offset 40
        produce(kafka_broker, topic, 100, 100)
        admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
        for future in admin.delete_records([TopicPartition(topic, 0, 150)]).values():
            future.result(timeout=30)
        with pytest.raises(StreamingBatchError, match=r"(?i)data.*(lost|missed)"):
            query.run_batch()
    finally:
        query.close()
    skipping = make(fail_on_data_loss=False)  # the same checkpoint: Spark carries on at 100
    try:
        gap = skipping.run_batch()
        assert gap is not None and gap.rows_in == 50  # the gap skipped: offsets 150-199
        commit = latest_commit(skipping.handler.storage)
        assert commit is not None and dict(commit.offsets) == {f"{topic}-0": 200}
    finally:
        skipping.close()
