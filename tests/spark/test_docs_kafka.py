"""docs/kafka.md's blocks run as written on the 3-worker cluster and the real broker: the
launchers (ZooKeeper and a broker), the jars for ``spark.jars``, then a query over topic
``clicks`` with Spark's Kafka source and Spark's operator ("before") and with the pinned source
and ``stateful_foreach_batch`` ("after"): the same output, batch by batch, the "after" batches
with no shuffle and every task where placed; then docs/spark.md's ``stateful_kafka_query`` block
over the same topic and config: the same final counts, its output topic keyed by user, each
batch's rows once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from docs_snippets import snippet
from spark_app import SparkApp
from test_kafka_stateful_source import shuffle_bytes

from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from locality.spark.jvm import spark_jar
from locality.spark.kafka import OffsetRange, end_offsets, read_range, write_records
from locality.spark.kafka_source import clear_placement

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

PAGE = "docs/kafka.md"
USERS = 9


def run(names: list[str], namespace: dict[str, Any], page: str = PAGE) -> dict[str, Any]:
    for name in names:
        exec(compile(snippet(page, name), f"{page}:{name}", "exec"), namespace)
    return namespace


def final(outputs: dict[int, list[tuple[Any, ...]]]) -> dict[str, tuple[Any, ...]]:
    """Each user's last output row (its count and total after the last batch)."""
    return {row[0]: row[1:] for batch in sorted(outputs) for row in outputs[batch]}


def test_the_launchers_snippet_runs_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(["launchers"], {"workdir": str(tmp_path)})
    zk_hosts, servers = capsys.readouterr().out.split()
    assert zk_hosts.startswith("127.0.0.1:") and servers.startswith("127.0.0.1:")
    assert (tmp_path / "zookeeper").is_dir() and (tmp_path / "kafka" / "data").is_dir()


def test_the_jars_snippet_names_both_jars() -> None:
    jars = run(["kafka-jars"], {})["jars"].split(",")
    assert jars[0] == str(spark_jar()) and all(Path(j).is_file() for j in jars)
    assert any("spark-sql-kafka-0-10" in Path(j).name for j in jars[1:])


def test_before_and_after_over_kafka_run_as_written_and_agree(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    zk_private_server: EmbeddedZooKeeper,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    servers = kafka_broker.bootstrap_servers
    kafka_broker.create_topic("clicks", 4)
    numbers = range(1000)
    clicks = {"key": [f"u{i % USERS}" for i in numbers], "value": [str(i % 5) for i in numbers]}
    write_records(servers, "clicks", pd.DataFrame(clicks))
    (tmp_path / "kafka-clicks.yaml").write_text(snippet(PAGE, "kafka-clicks.yaml"))
    monkeypatch.chdir(tmp_path)  # load_config("kafka-clicks.yaml")
    monkeypatch.setenv("AFFINITY_ZK_CONNECT", zk_private_server.hosts)
    monkeypatch.setenv("AFFINITY_STATE__CHECKPOINT_DIR", str(tmp_path / "durable"))
    monkeypatch.setenv("AFFINITY_STATE__LOCAL_DIR", str(tmp_path / "local"))
    monkeypatch.setenv("AFFINITY_LOG_LEVEL", "warning")
    clear_placement(app.session)
    outputs, shuffled = {}, {}
    for way in ("kafka-before", "kafka-after"):
        namespace: dict[str, Any] = {
            "__name__": f"docs_kafka_{way}",  # not importable: functions travel by value
            "spark": app.session,
            "servers": servers,
            "cp": str(tmp_path / f"checkpoint-{way}"),
        }
        before = shuffle_bytes(app)
        try:
            run(["kafka-setup", way], namespace)
        finally:
            if "handler" in namespace:
                namespace["handler"].close()
        shuffled[way] = shuffle_bytes(app) - before
        outputs[way] = namespace["outputs"]
    assert outputs["kafka-after"] == outputs["kafka-before"]
    assert len(outputs["kafka-after"]) >= 3  # 1,000 records, at most 400 a trigger
    users = {row[0]: row[1:] for batch in outputs["kafka-after"].values() for row in batch}
    assert sum(n for n, _ in users.values()) == 1000
    assert shuffled["kafka-before"] > 0 and shuffled["kafka-after"] == 0
    reports = namespace["handler"].reports
    assert all((r.tasks, r.pinned_ok) == (4, 4) for r in reports)

    # docs/spark.md: the alternative that reads the broker itself, same topic and config
    monkeypatch.setenv("AFFINITY_STATE__CHECKPOINT_DIR", str(tmp_path / "durable-query"))
    monkeypatch.setenv("AFFINITY_STATE__LOCAL_DIR", str(tmp_path / "local-query"))
    monkeypatch.setenv("AFFINITY_RUN_ID", "r2")  # a state of its own (ZooKeeper's pointer too)
    kafka_broker.create_topic("clicks-out", 2)
    namespace = {"__name__": "docs_spark_kafka_query", "spark": app.session, "servers": servers}
    run(["kafka-setup"], namespace)
    run(["kafka-query"], namespace, page="docs/spark.md")
    reports = namespace["reports"]
    assert sum(r.rows_in for r in reports) == 1000 and len(reports) >= 3
    assert all(r.rows_in <= 400 for r in reports)  # max_records_per_batch
    assert final(namespace["outputs"]) == final(outputs["kafka-after"])
    published = [
        (record["key"].decode(), json.loads(record["value"]))
        for p, end in end_offsets(servers, ["clicks-out"]).items()
        for record in read_range(
            servers, OffsetRange("clicks-out", p.partition, 0, end)
        ).to_pylist()
    ]
    assert all(key == row["user"] for key, row in published)  # keyed by output_key_column
    rows = sorted((row["user"], row["clicks"], row["total"]) for _, row in published)
    assert rows == sorted(row for batch in namespace["outputs"].values() for row in batch)
