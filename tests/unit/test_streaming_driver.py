"""The driver side of stateful_foreach_batch without Spark: keys route to the task of their
SEP-32 key bucket (the virtual tasks' buckets) and to a key group inside it; bad use is named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coordinator.config import JobConfig, load_config
from coordinator.streaming import stateful_foreach_batch
from coordinator.streaming.query import StreamingUsageError, check_event_time_column, key_text
from groupers.keys import key_bucket, stable_hash
from locality.spark.state import SchemaError


def config(tmp_path: Path, **sections: Any) -> JobConfig:
    data: dict[str, Any] = {
        "job": {"name": "clicks"},
        "inputs": [{"system": "spark", "stream": "clicks", "partitions": 1}],
        "ssp_grouper": {"name": "group-by-partition", "options": {"elasticity_factor": 8}},
        "state": {"checkpoint_dir": str(tmp_path / "durable"), "local_dir": str(tmp_path / "l")},
    }
    data.update(sections)
    return load_config(data=data, environ={})


def handler(cfg: JobConfig, **overrides: Any) -> Any:
    arguments: dict[str, Any] = {
        "key_columns": ["user"],
        "output_schema": "user string, clicks long",
        "state_schema": "clicks long",
        "sink": lambda df, b: None,
        "config": cfg,
    }
    arguments.update(overrides)
    return stateful_foreach_batch(lambda key, pdfs, state: iter(()), **arguments)


def test_keys_route_to_their_virtual_task_and_a_key_group_inside_it(tmp_path: Path) -> None:
    query = handler(config(tmp_path))
    space = query.keyspace
    groups = space.key_groups()
    assert sorted(groups) == [f"Partition 0-{b}-8" for b in range(8)]
    assert sorted(g for gs in groups.values() for g in gs) == list(range(1024))
    for user in (f"u{i:05d}" for i in range(300)):
        text = key_text([user])
        task, group = space.route(stable_hash(text))
        assert task == f"Partition 0-{key_bucket(text, 8)}-8"
        assert group in groups[task]


def test_partitions_and_buckets_together(tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        inputs=[{"system": "spark", "stream": "clicks", "partitions": 3}],
        ssp_grouper={"name": "group-by-partition", "options": {"elasticity_factor": 2}},
        state={"checkpoint_dir": str(tmp_path), "max_parallelism": 96},
    )
    space = handler(cfg).keyspace
    groups = space.key_groups()
    assert len(groups) == 6 and all(len(g) == 16 for g in groups.values())
    with pytest.raises(StreamingUsageError, match="must be a multiple of partitions x"):
        handler(
            config(
                tmp_path,
                inputs=cfg.model_dump()["inputs"],
                ssp_grouper=cfg.model_dump()["ssp_grouper"],
            )
        )


def test_bad_use_is_named(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    with pytest.raises(SchemaError, match="field 'at' has type 'timestamp'"):
        handler(cfg, state_schema="at timestamp")
    with pytest.raises(StreamingUsageError, match="timeout must be one of"):
        handler(cfg, timeout="WallClockTimeout")
    with pytest.raises(StreamingUsageError, match="EventTimeTimeout' needs an event-time"):
        handler(cfg, timeout="EventTimeTimeout")
    with pytest.raises(StreamingUsageError, match="unknown unit 'fortnights'"):
        handler(cfg, timeout="EventTimeTimeout", event_time=("ts", "2 fortnights"))
    with pytest.raises(StreamingUsageError, match="pinned-shuffle data path only"):
        handler(cfg, event_time=("ts", "10 seconds"), data_path="driver")
    with pytest.raises(StreamingUsageError, match="key_columns must name columns"):
        handler(cfg, key_columns=[])
    with pytest.raises(StreamingUsageError, match=r"state\.checkpoint_dir is not set"):
        handler(config(tmp_path, state={}))
    two = [
        {"system": "s", "stream": "a", "partitions": 1},
        {"system": "s", "stream": "b", "partitions": 1},
    ]
    with pytest.raises(StreamingUsageError, match="exactly one input"):
        handler(config(tmp_path, inputs=two))


def test_a_timestamp_ntz_event_time_is_refused_by_name_as_spark_refuses_it() -> None:
    """Spark 4's withWatermark refuses a timestamp_ntz column (EVENT_TIME_IS_NOT_ON_TIMESTAMP_TYPE):
    so does event_time=, naming the type and the cast that fixes it."""
    from pyspark.sql.types import LongType, StructField, StructType, TimestampNTZType, TimestampType

    schema = StructType(
        [
            StructField("at", TimestampType()),
            StructField("local", TimestampNTZType()),
            StructField("t", LongType()),
        ]
    )
    assert check_event_time_column(schema, "at") is None
    problem = check_event_time_column(schema, "local")
    assert problem is not None
    assert "'local' is a timestamp_ntz" in problem and "CAST(local AS TIMESTAMP)" in problem
    assert "must be a timestamp, found bigint" in str(check_event_time_column(schema, "t"))
    assert "not a column of the stream" in str(check_event_time_column(schema, "nope"))


def test_tasks_that_own_kafka_partitions_need_no_key_space_over_the_pinned_source(
    tmp_path: Path,
) -> None:
    """12 partitions under the default max_parallelism (1,024, not a multiple of 12): the pinned
    Kafka source keeps key group p for partition p, so the query is built; only a batch routed
    by key hash (another source) needs the key space, and is refused saying why."""
    kafka = [{"system": "kafka", "stream": "clicks", "partitions": 12}]
    grouper = {"name": "group-by-partition", "options": {"elasticity_factor": 1}}
    query = handler(config(tmp_path, inputs=kafka, ssp_grouper=grouper))
    assert query.kafka_layout is not None and query.kafka_layout.partitions == 12
    assert query.kafka_layout.key_groups()["Partition 11"] == (11,)
    with pytest.raises(StreamingUsageError, match=r"multiple of partitions x elasticity factor"):
        query.keyspace  # noqa: B018 (the property raises)
    files = [{"system": "spark", "stream": "clicks", "partitions": 12}]
    with pytest.raises(StreamingUsageError, match=r"multiple of partitions x elasticity factor"):
        handler(config(tmp_path, inputs=files, ssp_grouper=grouper))  # no Kafka: refused at once


def test_a_misspelt_option_is_named_as_python_names_an_unknown_argument(tmp_path: Path) -> None:
    """Both queries take their shared options through one ``TypedDict``
    (coordinator.streaming.options), which Python does not check when called."""
    with pytest.raises(
        TypeError, match="StatefulQuery\\(\\) got an unexpected keyword argument 'delivry'"
    ):
        handler(config(tmp_path), delivry="at-least-once")
    with pytest.raises(TypeError, match="unexpected keyword argument 'locality'"):
        handler(config(tmp_path), locality="30s")
    query = handler(config(tmp_path), locality_wait="5s", in_force_timeout_s=9.0)
    assert (query.locality_wait, query.in_force_timeout_s, query.coordinator) == (
        "5s",
        9.0,
        "embedded",
    )
