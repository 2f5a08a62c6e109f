"""docs/kafka.md's blocks run as written on the 3-worker cluster and the real broker: the jars
for ``spark.jars``, then a query over topic ``clicks`` with Spark's Kafka source and Spark's
operator ("before") and with the pinned source and ``stateful_foreach_batch`` ("after"): the
same output, batch by batch, the "after" batches with no shuffle and every task where placed."""

from __future__ import annotations

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
from locality.spark.kafka import write_records
from locality.spark.kafka_source import clear_placement

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

PAGE = "docs/kafka.md"
USERS = 9


def run(names: list[str], namespace: dict[str, Any]) -> dict[str, Any]:
    for name in names:
        exec(compile(snippet(PAGE, name), f"{PAGE}:{name}", "exec"), namespace)
    return namespace


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
