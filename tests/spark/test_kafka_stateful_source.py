"""``stateful_foreach_batch`` over the pinned Kafka source (``format("affinity-kafka")``) on the
real broker and the 3-worker cluster: when the job's tasks own the topic's partitions, each batch
runs with no shuffle (0 shuffle bytes in Spark's status store, where the same query over
``format("kafka")`` shuffles), every task on the executor its job model names, state warm after
the first batch and restored after an application restart, and every batch's output exactly the
single-process reference of the Kafka query's tests, also through an executor killed mid-batch;
a partition with no new records still runs its task. Spark's side of the query works as for any
source: its progress reports and a listener see each batch and its rows, ``startingOffsets`` per
partition and ``minOffsetsPerTrigger`` with ``maxTriggerDelay`` are honoured (one trigger per
produced batch)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka_streams import Stream, batch_ends, kafka_reader, shuffle_bytes, write_columns
from pyspark import cloudpickle
from spark_app import SparkApp
from stalls import kill_when_marked, stalls_once
from test_kafka_query import count, kafka_config, produce, reference
from test_pinned_kafka_source import _Progress

from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming.kafka_progress import consumer_group
from locality.spark.kafka import group_offsets
from locality.spark.kafka_source import KAFKA_FORMAT, clear_placement

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PARTITIONS = 4


def one_topic(
    app: SparkApp,
    servers: str,
    topic: str,
    zk: EmbeddedZooKeeper,
    tmp: Path,
    **options: Any,
) -> Stream:
    """The stream over ``topic``, the job of the Kafka query's tests."""
    return Stream(app, servers, [topic], kafka_config(zk, tmp, topic, PARTITIONS), **options)


def test_batches_run_where_their_partitions_are_read_with_no_shuffle(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(PARTITIONS)
    stream = one_topic(app, servers, topic, zk_server, tmp_path)
    clear_placement(app.session)
    try:
        produce(kafka_broker, topic, 0, 1000)
        before = shuffle_bytes(app)
        first = stream.run(tmp_path / "checkpoint")
        assert shuffle_bytes(app) == before  # no exchange in any batch
        # maxOffsetsPerTrigger honoured (Spark's proration rounds down per partition)
        assert sum(r.rows_in for r in first) == 1000 and len(first) >= 2
        assert all(r.rows_in <= 700 for r in first)
        for report in first:  # every task ran on the executor its job model names
            assert (report.tasks, report.pinned_ok, report.driver_rows) == (4, 4, 0)
        assert first[0].new == 4 and all(r.warm == 4 for r in first[1:])

        # records in one partition only: the other three tasks run on empty partitions
        numbers = range(1000, 1050)
        keys, values = [f"k{i % 7:03d}" for i in numbers], list(map(str, numbers))
        write_columns(servers, topic, key=keys, value=values, partition=2)
        (single,) = stream.run(tmp_path / "checkpoint")
        assert (single.rows_in, single.tasks, single.pinned_ok, single.warm) == (50, 4, 4, 4)

        # the application restarted: Spark's offset log carries on, the state is restored
        stream.handler.close()
        app.restart()
        clear_placement(app.session)
        stream.handler = stream.make()
        produce(kafka_broker, topic, 1050, 300)
        before = shuffle_bytes(app)
        (restarted,) = stream.run(tmp_path / "checkpoint")
        assert shuffle_bytes(app) == before
        assert (restarted.rows_in, restarted.pinned_ok, restarted.new) == (300, 4, 0)
        assert restarted.warm == 4  # each host's local copy (a new executor, the same host)
        assert restarted.bytes_restored == 0  # nothing read back from the durable checkpoints
        assert stream.outputs == reference(kafka_broker, topic, stream.ends)  # state exact
        assert sorted(stream.outputs) == sorted(stream.ends) == list(range(len(first) + 2))
    finally:
        stream.handler.close()


def test_the_commit_keeps_spark_offsets_and_a_partition_added_is_a_task(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    """Over the pinned source the commit record keeps the offsets Spark planned for the batch,
    shown to Kafka's tools under the job's consumer group (``kafka=``), and a partition added to
    the topic while the query runs is a new task, placed and run with no shuffle (as the Kafka
    query does), its records counted once."""
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(PARTITIONS)
    stream = one_topic(app, servers, topic, zk_server, tmp_path, kafka=servers)
    clear_placement(app.session)
    checkpoint = tmp_path / "checkpoint"
    try:
        produce(kafka_broker, topic, 0, 1000)
        first = stream.run(checkpoint)
        last = first[-1].batch
        assert stream.committed_offsets() == stream.ends[last]
        assert sum(stream.ends[last].values()) == 1000
        shown = group_offsets(servers, consumer_group(stream.config))
        assert {str(p): o for p, o in shown.items()} == stream.ends[last]
        latest = stream.handler._commit_log().latest()
        assert latest is not None and set(stream.handler.source_lag(latest).values()) == {0}

        # two partitions added: Spark's source reads them from the earliest offset, each is a
        # new task of the job (the embedded coordinator places it), still no shuffle
        kafka_broker.add_partitions(topic, PARTITIONS + 2)
        produce(kafka_broker, topic, 1000, 600)
        before = shuffle_bytes(app)
        grown = stream.run(checkpoint)
        assert shuffle_bytes(app) == before
        assert sum(r.rows_in for r in grown) == 600
        assert (grown[-1].tasks, grown[-1].pinned_ok) == (PARTITIONS + 2, PARTITIONS + 2)
        assert stream.handler.config.stream_inputs()[0].partitions == PARTITIONS + 2
        offsets = stream.committed_offsets()
        assert offsets == stream.ends[grown[-1].batch] and len(offsets) == PARTITIONS + 2
        assert all(offsets[f"{topic}-{p}"] > 0 for p in (PARTITIONS, PARTITIONS + 1))
    finally:
        stream.handler.close()
    assert stream.outputs == reference(kafka_broker, topic, stream.ends)  # each record once


def test_the_same_query_over_spark_kafka_source_shuffles(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    """The control: ``format("kafka")`` gives the handler no partitions it can run as they are
    read, so the batch goes through the pinned shuffle (shuffle bytes counted), same output."""
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(PARTITIONS)
    stream = one_topic(app, servers, topic, zk_server, tmp_path)
    try:
        produce(kafka_broker, topic, 0, 600)
        before = shuffle_bytes(app)
        (report,) = stream.run(tmp_path / "checkpoint", source="kafka")
        assert shuffle_bytes(app) > before
        assert (report.rows_in, report.pinned_ok) == (600, 4)
    finally:
        stream.handler.close()


def test_an_executor_killed_mid_batch_leaves_the_state_exact(
    app: SparkApp,
    spark_cluster: Any,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    """An executor killed while its task runs a batch: Spark runs the task again (its partition
    read again, elsewhere), the state restored from the last commit; every batch's output is
    still the reference's, and the next batch is back on the placed executors, no shuffle."""
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(PARTITIONS)
    armed, marker = tmp_path / "armed", tmp_path / "stalled"
    function = stalls_once(count, str(armed), str(marker))
    stream = one_topic(app, servers, topic, zk_server, tmp_path, function=function)
    clear_placement(app.session)
    try:
        produce(kafka_broker, topic, 0, 600)
        assert sum(r.rows_in for r in stream.run(tmp_path / "cp")) == 600

        produce(kafka_broker, topic, 600, 400)
        armed.touch()
        killed: list[str] = []
        kill_when_marked(marker, spark_cluster, app.app_id, killed)
        hit = stream.run(tmp_path / "cp")
        armed.unlink()
        assert killed and sum(r.rows_in for r in hit) == 400
        # the three tasks whose executor lived kept their state local (warm: no bytes read
        # back); the killed one's retry found its host's copy or restored its state
        assert all(r.warm >= 3 and r.warm + r.restored == 4 for r in hit)
        app.ready(exclude=tuple(killed))

        produce(kafka_broker, topic, 1000, 200)
        before = shuffle_bytes(app)
        after = stream.run(tmp_path / "cp")
        assert shuffle_bytes(app) == before
        assert sum(r.rows_in for r in after) == 200
        assert all((r.tasks, r.pinned_ok) == (4, 4) for r in after)
        assert all(r.warm >= 3 and r.new == 0 for r in after)
        assert stream.outputs == reference(kafka_broker, topic, stream.ends)  # state exact
    finally:
        stream.handler.close()


def test_kafka_to_kafka_with_no_shuffle_publishes_each_output_once(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    """The no-shuffle path with ``output_topic=``: each batch's output published once after its
    commit, read committed, equal to the reference; still no exchange."""
    from collections import Counter

    from locality.spark.kafka import OffsetRange, end_offsets, read_range

    servers, topic, out = kafka_broker.bootstrap_servers, kafka_topic(PARTITIONS), kafka_topic(2)
    stream = one_topic(app, servers, topic, zk_server, tmp_path, kafka=servers, output_topic=out)
    clear_placement(app.session)
    try:
        produce(kafka_broker, topic, 0, 1000)
        before = shuffle_bytes(app)
        reports = stream.run(tmp_path / "checkpoint")
        produce(kafka_broker, topic, 1000, 300)
        reports += stream.run(tmp_path / "checkpoint")
        assert shuffle_bytes(app) == before
        assert all(r.pinned_ok == 4 for r in reports) and len(reports) >= 3
    finally:
        stream.handler.close()
    expected = reference(kafka_broker, topic, stream.ends)
    seen: Counter[tuple[Any, ...]] = Counter()
    for p, end in end_offsets(servers, [out]).items():
        for record in read_range(servers, OffsetRange(out, p.partition, 0, end)).to_pylist():
            row = json.loads(record["value"])
            seen[row["key"], row["partition"], row["n"], row["total"]] += 1
    assert seen == Counter(row for rows in expected.values() for row in rows)


TRIGGERS = [(0, 300), (1, 300), (2, 100)]  # (batch, rows) of the running query's triggers


def skip_earlier_records(servers: str, topic: str) -> dict[int, int]:
    """80 records written before the query starts; each partition's end offset after them (the
    query's ``startingOffsets``)."""
    from locality.spark.kafka import end_offsets

    write_columns(servers, topic, key=[f"old{i}" for i in range(80)], value=["1"] * 80)
    starts = {p.partition: end for p, end in end_offsets(servers, [topic]).items()}
    assert sum(starts.values()) == 80
    return starts


def wait_for_batches(query: Any, stream: Stream, n: int, timeout_s: float = 120) -> None:
    """Until the running query's handler has run ``n`` batches; no more than ``n``."""
    deadline = time.monotonic() + timeout_s
    while len(stream.handler.reports) < n and time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        time.sleep(0.2)
    assert len(stream.handler.reports) == n, stream.handler.reports


def trigger_each_batch(
    query: Any, stream: Stream, broker: KafkaBroker, topic: str, listener: _Progress
) -> tuple[list[Any], Any]:
    """The running query's three batches (300 records produced before its start, 300, then 100
    that wait for ``maxTriggerDelay``); Spark's progress of the batches with rows, once reported,
    and its ``lastProgress``."""
    wait_for_batches(query, stream, 1)
    produce(broker, topic, 300, 300)
    wait_for_batches(query, stream, 2)
    produce(broker, topic, 600, 100)  # below minOffsetsPerTrigger: waits
    time.sleep(4)
    assert len(stream.handler.reports) == 2
    wait_for_batches(query, stream, 3)  # maxTriggerDelay passed: the 100 run
    deadline = time.monotonic() + 30  # progress is reported after the batch's commit
    while time.monotonic() < deadline:
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        if len(progress) == 3 and len(listener.batches) >= 3:
            break
        time.sleep(0.2)
    return progress, query.lastProgress


def test_spark_progress_listeners_and_trigger_options_see_each_stateful_batch(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    """A running (processing-time) query: ``startingOffsets`` per partition skips what was
    there before; ``minOffsetsPerTrigger`` gives one trigger per produced batch of that size
    (fewer records wait) until ``maxTriggerDelay`` runs the rest; ``recentProgress``,
    ``lastProgress`` and a listener report each batch with the handler's rows; the state is
    exact and no batch shuffles."""
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(PARTITIONS)
    stream = one_topic(app, servers, topic, zk_server, tmp_path)
    starts = skip_earlier_records(servers, topic)
    listener = _Progress()
    assert app.session is not None
    app.session.streams.addListener(listener)
    clear_placement(app.session)
    produce(kafka_broker, topic, 0, 300)  # before the start: batch 0 has records (see below)
    before = shuffle_bytes(app)
    starting = json.dumps({topic: {str(p): o for p, o in starts.items()}})
    options = {"minOffsetsPerTrigger": 300, "maxTriggerDelay": "20s"}
    reader = kafka_reader(app, servers, topic, starting=starting, **options)
    query = stream.start(reader, tmp_path / "checkpoint", processingTime="1 second")
    try:
        progress, last = trigger_each_batch(query, stream, kafka_broker, topic, listener)
    finally:
        query.stop()
        app.session.streams.removeListener(listener)
        stream.handler.close()
    assert query.awaitTermination(60)
    reports = stream.handler.reports
    assert [(r.batch, r.rows_in) for r in reports] == TRIGGERS
    assert [(p["batchId"], p["numInputRows"]) for p in progress] == TRIGGERS
    assert last is not None and last["sources"][0]["description"].startswith(KAFKA_FORMAT)
    assert [b for b in listener.batches if b[1] > 0] == TRIGGERS
    assert all((r.tasks, r.pinned_ok) == (4, 4) for r in reports)
    assert shuffle_bytes(app) == before
    # each batch's end offsets, and the start: the records skipped
    ends = {p["batchId"]: batch_ends(p["sources"][0]["endOffset"]) for p in progress}
    skipped = {f"{topic}-{k}": v for k, v in starts.items()}
    expected = reference(kafka_broker, topic, {-1: skipped, **ends})
    assert expected.pop(-1)  # the skipped records' keys (old*): in no batch's state
    assert stream.outputs == expected


@pytest.mark.parametrize("source", [KAFKA_FORMAT, "kafka"])
def test_a_query_started_before_its_first_records_runs_them(
    source: str,
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    """A query started on an empty topic (``startingOffsets`` latest: a job's usual start) runs
    the records that come after, over the pinned source and over Spark's own (whose first,
    empty batch must not fix the state's layout as the pinned source's)."""
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(PARTITIONS)
    stream = one_topic(app, servers, topic, zk_server, tmp_path)
    clear_placement(app.session)
    reader = kafka_reader(app, servers, topic, source, starting="latest")
    query = stream.start(reader, tmp_path / "checkpoint", processingTime="1 second")
    try:
        deadline = time.monotonic() + 120
        while not query.recentProgress and time.monotonic() < deadline:
            time.sleep(0.2)
        assert query.recentProgress[0]["numInputRows"] == 0  # batch 0: nothing new
        produce(kafka_broker, topic, 0, 200)
        while time.monotonic() < deadline and query.exception() is None:
            if sum(r.rows_in for r in stream.handler.reports) == 200:
                break
            time.sleep(0.2)
        assert query.exception() is None, query.exception()
        assert sum(r.rows_in for r in stream.handler.reports) == 200
        assert all(r.pinned_ok == 4 for r in stream.handler.reports)
        counts = {row[0]: row[2] for b in sorted(stream.outputs) for row in stream.outputs[b]}
        assert sum(counts.values()) == 200  # each key's count after its last batch: all once
    finally:
        query.stop()
        stream.handler.close()
