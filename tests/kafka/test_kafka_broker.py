"""The Kafka launcher and its jars: a real KRaft broker from Maven Central's jars, stopped and
started again on its data, and the errors when it cannot run."""

from __future__ import annotations

import base64
import socket
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from coordinator.launchers.kafka import (
    KafkaBroker,
    KafkaUnavailable,
    live_brokers,
    random_cluster_id,
)
from locality.spark.kafka import OffsetRange, end_offsets, read_range, write_records
from locality.spark.maven import (
    KAFKA_BROKER,
    KAFKA_VERSION,
    SPARK35_SQL_KAFKA,
    SPARK_SQL_KAFKA,
    MavenFetchFailed,
    connector_for,
    fetch,
    jars,
    main,
)

pytestmark = pytest.mark.kafka


def _cluster_id(broker: KafkaBroker) -> str:
    lines = (broker.data_dir / "meta.properties").read_text().splitlines()
    return next(line.split("=", 1)[1] for line in lines if line.startswith("cluster.id="))


def test_jar_sets_are_cached_by_version_and_pom() -> None:
    broker_jars = jars(KAFKA_BROKER)
    names = {p.name for p in broker_jars.glob("*.jar")}
    assert f"kafka_2.13-{KAFKA_VERSION}.jar" in names
    assert f"kafka-clients-{KAFKA_VERSION}.jar" in names
    assert any(n.startswith("log4j-slf4j-impl-") for n in names)  # the broker's log binding
    assert broker_jars.name.startswith(f"kafka-broker-{KAFKA_VERSION}-")
    assert jars(KAFKA_BROKER) == broker_jars  # a second call finds the cache
    connector = {p.name for p in jars(SPARK_SQL_KAFKA).glob("*.jar")}
    assert any(n.startswith("spark-sql-kafka-0-10_2.13-") for n in connector)
    assert not any(n.startswith(("spark-core", "scala-library", "hadoop-")) for n in connector)


def test_each_spark_gets_the_connector_of_its_scala() -> None:
    assert connector_for("4.3.0") is connector_for("4.0.1") is SPARK_SQL_KAFKA  # Scala 2.13
    assert connector_for("3.5.9") is SPARK35_SQL_KAFKA  # Scala 2.12 (make spark35 fetches it)
    assert SPARK35_SQL_KAFKA.pom.name == "spark35-sql-kafka.xml"
    assert "spark-sql-kafka-0-10_2.12" in SPARK35_SQL_KAFKA.pom.read_text()
    assert SPARK35_SQL_KAFKA.directory() != SPARK_SQL_KAFKA.directory()
    with pytest.raises(ValueError, match=r"Spark 3\.4\.1 "):
        connector_for("3.4.1")


def test_fetch_without_maven_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AFFINITY_JAR_DIR", str(tmp_path / "jars"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn on it
    with pytest.raises(MavenFetchFailed, match="mvn not found"):
        fetch(KAFKA_BROKER)
    assert main(["kafka-broker"]) == 1
    assert main(["no-such-set"]) == 2
    assert not (tmp_path / "jars").exists() or not any((tmp_path / "jars").iterdir())


def test_random_cluster_ids_are_kraft_ids() -> None:
    ids = {random_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for text in ids:
        assert len(text) == 22 and not text.startswith("-")
        assert len(base64.urlsafe_b64decode(text + "==")) == 16


def test_broker_stops_and_starts_again_on_its_data(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    assert live_brokers(kafka_broker.port) == [1]
    topic = kafka_topic(2)
    rows = pd.DataFrame({"key": [f"k{i}" for i in range(500)], "value": list(map(str, range(500)))})
    write_records(kafka_broker.bootstrap_servers, topic, rows)
    before = end_offsets(kafka_broker.bootstrap_servers, [topic])
    cluster_id, port = _cluster_id(kafka_broker), kafka_broker.port

    kafka_broker.stop()
    assert not kafka_broker.running
    with pytest.raises(OSError):
        live_brokers(port)
    kafka_broker.start()

    assert (kafka_broker.port, _cluster_id(kafka_broker)) == (port, cluster_id)  # not reformatted
    assert end_offsets(kafka_broker.bootstrap_servers, [topic]) == before
    values = []
    for partition, end in before.items():
        table = read_range(kafka_broker.bootstrap_servers, OffsetRange(topic, partition[1], 0, end))
        values += [v.decode() for v in table.column("value").to_pylist()]
    assert sorted(values, key=int) == [str(i) for i in range(500)]


def test_a_broker_that_cannot_start_is_reported(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = KafkaBroker(tmp_path / "kafka", port=taken.getsockname()[1])
        with pytest.raises(KafkaUnavailable, match=r"exited|did not serve"):
            broker.start()
    assert not broker.running
    assert (tmp_path / "kafka" / "data" / "meta.properties").exists()  # it had been formatted
