"""A Kafka query without a broker or Spark: its tasks over partitions and key buckets (each task
its own key group, stable when partitions are added), the ranges each task reads, the errors
of a config or output it cannot use, and the cause a failed batch reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coordinator.config import load_config
from coordinator.streaming.kafka_layout import KafkaLayout, KafkaLayoutError, partitions_added
from coordinator.streaming.kafka_offsets import DEFAULT_MAX_RECORDS
from coordinator.streaming.kafka_query import stateful_kafka_query
from coordinator.streaming.runtime import StreamingUsageError, failure_cause
from groupers import get_ssp_grouper
from locality.spark.kafka import KafkaPartition, OffsetRange
from metadata.model import StreamInput


def layout(partitions: int, factor: int, topics: tuple[str, ...] = ("a", "b")) -> KafkaLayout:
    grouper = get_ssp_grouper("group-by-partition", elasticity_factor=factor)
    tasks = grouper.group([StreamInput("kafka", t, partitions) for t in topics])
    return KafkaLayout.of(tasks, topics, partitions, max_parallelism=64)


def test_each_task_owns_a_partition_of_every_topic_and_a_key_group_of_its_own() -> None:
    plain = layout(4, 1)
    assert plain.key_groups() == {f"Partition {p}": (p,) for p in range(4)}
    assert set(plain.buckets().values()) == {(0, 1)}
    virtual = layout(3, 4)
    groups = virtual.key_groups()
    assert len(groups) == 12 and sorted(g for (g,) in groups.values()) == list(range(12))
    assert virtual.buckets()["Partition 2-3-4"] == (3, 4) and groups["Partition 2-3-4"] == (11,)
    # a partition added keeps every existing task's key group
    grown = layout(5, 4).key_groups()
    assert all(grown[t] == g for t, g in groups.items())
    ranges = {KafkaPartition(t, p): OffsetRange(t, p, p, 10 + p) for t in "ab" for p in range(4)}
    assert plain.ranges(ranges)["Partition 2"] == (
        OffsetRange("a", 2, 2, 12),
        OffsetRange("b", 2, 2, 12),
    )


def test_tasks_that_do_not_own_partitions_are_refused() -> None:
    tasks = get_ssp_grouper("group-by-ssp").group([StreamInput("kafka", t, 2) for t in "ab"])
    with pytest.raises(KafkaLayoutError, match=r"owns one partition .* of every input topic"):
        KafkaLayout.of(tasks, ("a", "b"), 2, 64)
    with pytest.raises(KafkaLayoutError, match=r"max_parallelism 64 is below .* \(32 x 4\)"):
        grouper = get_ssp_grouper("group-by-partition", elasticity_factor=4)
        KafkaLayout.of(grouper.group([StreamInput("kafka", "a", 32)]), ("a",), 32, 64)


def _query(tmp_path: Path, **overrides: Any) -> Any:
    data = {
        "job": {"name": "k"},
        "inputs": [{"system": "kafka", "stream": "events", "partitions": 2}],
        "state": {"checkpoint_dir": str(tmp_path / "d")},
    }
    arguments: dict[str, Any] = {
        "spark": None,
        "kafka": "127.0.0.1:1",
        "output_schema": "user string, n long",
        "state_schema": "n long",
        "config": load_config(data=overrides.pop("data", data), environ={}),
        "output_topic": "out",
        "output_key_column": "user",
    }
    arguments.update(overrides)
    return stateful_kafka_query(lambda key, pdfs, state: iter(()), **arguments)


def test_bad_use_is_named_before_anything_runs(tmp_path: Path) -> None:
    assert _query(tmp_path).handler.kafka_layout.partitions == 2
    with pytest.raises(StreamingUsageError, match="output_key_column 'key' is not a column"):
        _query(tmp_path, output_key_column="key")
    with pytest.raises(StreamingUsageError, match="needs a place: sink=, output_topic= or both"):
        _query(tmp_path, output_topic=None)
    with pytest.raises(StreamingUsageError, match="max_records_per_batch must be at least 1"):
        _query(tmp_path, max_records_per_batch=0)
    with pytest.raises(StreamingUsageError, match=r"EventTimeTimeout' needs an event-time"):
        _query(tmp_path, timeout="EventTimeTimeout")
    with pytest.raises(StreamingUsageError, match=r"must all be Kafka topics .*'spark:clicks'"):
        _query(tmp_path, data=files_of(tmp_path, "spark"))
    two = {**files_of(tmp_path, "kafka"), "inputs": [
        {"system": "kafka", "stream": "a", "partitions": 2},
        {"system": "kafka", "stream": "b", "partitions": 3}]}  # fmt: skip
    with pytest.raises(StreamingUsageError, match=r"not co-partitioned \(partitions \{'a': 2"):
        _query(tmp_path, data=two)
    small = {**files_of(tmp_path, "kafka"), "ssp_grouper": {
        "name": "group-by-partition", "options": {"elasticity_factor": 4}},
        "state": {"checkpoint_dir": str(tmp_path / "d"), "max_parallelism": 2}}  # fmt: skip
    with pytest.raises(StreamingUsageError, match=r"own its partitions: .*max_parallelism"):
        _query(tmp_path, data=small)


def files_of(tmp_path: Path, system: str) -> dict[str, Any]:
    return {
        "job": {"name": "k"},
        "inputs": [{"system": system, "stream": "clicks", "partitions": 1}],
        "state": {"checkpoint_dir": str(tmp_path / "d")},
    }


def test_the_query_reads_spark_kafka_source_with_its_own_options(tmp_path: Path) -> None:
    """The Kafka query is Spark's Kafka source, pinned: its arguments become Spark's options,
    with one input partition per task, and any of Spark's options passes through."""
    from locality.spark.kafka import KafkaClientConfig

    secure = KafkaClientConfig("broker:9093", {"security.protocol": "SASL_SSL"})
    options = _query(tmp_path, kafka=secure, max_records_per_batch=700).options
    assert options == {
        "kafka.bootstrap.servers": "broker:9093",
        "kafka.security.protocol": "SASL_SSL",
        "subscribe": "events",
        "affinity.tasksPerPartition": "1",
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
        "kafka.isolation.level": "read_committed",
        "maxOffsetsPerTrigger": "700",
    }
    virtual = {**files_of(tmp_path, "kafka"), "ssp_grouper": {
        "name": "group-by-partition", "options": {"elasticity_factor": 4}}}  # fmt: skip
    built = _query(
        tmp_path, data=virtual, max_records_per_batch=None, starting_offsets="latest",
        fail_on_data_loss=False, source_options={"minOffsetsPerTrigger": 10},
        checkpoint_location=str(tmp_path / "cp"),
    )  # fmt: skip
    assert built.options["affinity.tasksPerPartition"] == "4"
    assert built.options["subscribe"] == "clicks" and "maxOffsetsPerTrigger" not in built.options
    assert (built.options["startingOffsets"], built.options["failOnDataLoss"]) == (
        "latest",
        "false",
    )
    assert built.options["minOffsetsPerTrigger"] == "10"
    assert built.checkpoint_location == str(tmp_path / "cp")
    assert _query(tmp_path).checkpoint_location == str(tmp_path / "d" / "spark-checkpoint")


def test_a_decode_gives_its_columns_from_an_empty_table() -> None:
    """decode's output schema is learnt from an empty table of Kafka's columns; a decode that
    fails there is named."""
    import pyarrow as pa
    from pyspark.sql import types as T

    from coordinator.streaming.kafka_query import decoded_schema

    kafka = T.StructType(
        [
            T.StructField(name, kind)
            for name, kind in (
                ("key", T.BinaryType()), ("value", T.BinaryType()), ("topic", T.StringType()),
                ("partition", T.IntegerType()), ("offset", T.LongType()),
                ("timestamp", T.TimestampType()), ("timestampType", T.IntegerType()),
            )
        ]
    )  # fmt: skip
    records = type("Records", (), {"schema": kafka})()

    def users(table: pa.Table) -> pa.Table:
        return pa.table({"user": table.column("key").cast(pa.string()), "n": pa.array(
            [1] * table.num_rows, pa.int64())})  # fmt: skip

    assert decoded_schema(records, users).simpleString() == "struct<user:string,n:bigint>"
    with pytest.raises(StreamingUsageError, match=r"decode must map an Arrow table.*KeyError"):
        decoded_schema(records, lambda table: table.column("nope"))


def test_a_query_built_without_a_cap_reads_at_most_5_million_records_a_batch(
    tmp_path: Path,
) -> None:
    assert DEFAULT_MAX_RECORDS == 5_000_000
    assert _query(tmp_path).max_records == 5_000_000
    assert _query(tmp_path, max_records_per_batch=700).max_records == 700
    assert _query(tmp_path, max_records_per_batch=None).max_records is None  # no cap
    with pytest.raises(StreamingUsageError, match="a number of records, got 'all'"):
        _query(tmp_path, max_records_per_batch="all")


def test_a_failed_batch_names_the_error_a_python_worker_raised() -> None:
    text = (
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
        '  File "sink.py", line 65, in _column\n'
        "locality.spark.kafka.sink.KafkaWriteError: topic out: not authorized\n"
        "pyspark.errors.exceptions.captured.PythonException: <exception str() failed>"
    )
    assert failure_cause(RuntimeError(text)) == "KafkaWriteError: topic out: not authorized"
    assert failure_cause(RuntimeError("x\nStatefulFunctionError: batch 3, key ('a',): boom")) == (
        "batch 3, key ('a',): boom"
    )
    assert failure_cause(RuntimeError("just this")) == "just this"
    spark_source = (  # a JVM error with no Python one: Spark's Kafka source losing data
        "An error occurred while calling o373.collectToPython.\n"
        ": org.apache.spark.sql.kafka010.KafkaIllegalStateException: Some data may have been "
        "lost because they are not available in Kafka any more;\n"
        "\tat org.apache.spark.sql.kafka010.KafkaDataConsumer.reportDataLoss(x.scala:1)"
    )
    assert failure_cause(RuntimeError(spark_source)) == (
        "KafkaIllegalStateException: Some data may have been lost because they are not "
        "available in Kafka any more;"
    )


def test_a_pinned_source_batch_maps_each_spark_partition_to_its_task() -> None:
    """partition_tasks: the task of each Spark partition of a pinned Kafka source's batch (those
    with records only; the others run on empty partitions), or why the batch cannot run as it
    is read."""
    from coordinator.streaming.kafka_stage import partition_tasks

    plain = layout(4, 1, topics=("a",))
    read = [KafkaPartition("a", 3), KafkaPartition("a", 0)]
    assert partition_tasks(plain, read) == ("Partition 3", "Partition 0")
    assert partition_tasks(plain, []) == ()
    for batch, why in (
        ([KafkaPartition("a", 1), KafkaPartition("a", 1)], "repeat a Kafka partition"),
        ([KafkaPartition("a", 1), None], "None"),  # minPartitions split one
        ([KafkaPartition("other", 0)], "other-0"),
        ([KafkaPartition("a", 4)], "a-4"),  # more partitions than the job config says
    ):
        with pytest.raises(KafkaLayoutError, match=why):
            partition_tasks(plain, batch)
    for other in (layout(4, 2, topics=("a",)), layout(4, 1)):  # key buckets; two topics
        with pytest.raises(KafkaLayoutError, match=r"affinity\.tasksPerPartition"):
            partition_tasks(other, read)


def test_stateful_foreach_batch_runs_without_a_shuffle_only_over_a_kafka_layout(
    tmp_path: Path,
) -> None:
    from coordinator.streaming import stateful_foreach_batch

    def handler(system: str, grouper: str, factor: int = 1) -> Any:
        config = load_config(
            data={
                "job": {"name": "clicks"},
                "inputs": [{"system": system, "stream": "clicks", "partitions": 4}],
                "ssp_grouper": {"name": grouper, "options": {"elasticity_factor": factor}},
                "state": {"checkpoint_dir": str(tmp_path / "d"), "max_parallelism": 64},
            },
            environ={},
        )
        return stateful_foreach_batch(
            lambda key, pdfs, state: iter(()), key_columns=["user"], output_schema="user string",
            state_schema="n long", sink=lambda df, b: None, config=config,
        )  # fmt: skip

    kafka = handler("kafka", "group-by-partition").kafka_layout
    assert kafka is not None and kafka.key_groups() == {f"Partition {p}": (p,) for p in range(4)}
    assert handler("spark", "group-by-partition").kafka_layout is None
    buckets = handler("kafka", "group-by-partition", factor=2).kafka_layout  # virtual tasks
    assert buckets is not None and buckets.factor == 2 and len(buckets.tasks) == 8


def test_partitions_can_be_added_under_an_embedded_coordinator_never_removed() -> None:
    assert partitions_added(4, 4, embedded=True) is False
    assert partitions_added(4, 6, embedded=True) is True
    with pytest.raises(KafkaLayoutError, match="have 3 partitions, the job config says 4"):
        partitions_added(4, 3, embedded=True)
    with pytest.raises(KafkaLayoutError, match=r"set inputs\[\]\.partitions to 6 and restart"):
        partitions_added(4, 6, embedded=False)  # an external coordinator reads the job config
    assert partitions_added(4, 4, embedded=False) is False
