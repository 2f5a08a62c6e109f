"""Kafka to Kafka: what exactly-once output costs against at-least-once, and Spark's own query.

One Spark application on the 3-worker standalone cluster, a Kafka broker (KRaft) and a private
ZooKeeper. Three queries count per key over 10,000 keys (12 partitions, 12 tasks) and write
their output to a topic:

- ``stateful_kafka_query`` with ``delivery="exactly-once"`` (kept with the checkpoint, published
  after the commit with a publish mark);
- ``stateful_kafka_query`` with ``delivery="at-least-once"`` (written by the tasks while they
  run);
- Spark's own query: Spark's Kafka source, ``groupBy("key").applyInPandasWithState`` (RocksDB
  state store, 12 state partitions) and Spark's Kafka sink, which is at least once. It runs
  all along with the default trigger; a batch is timed from the last record produced to
  ``processAllAvailable`` returning (Spark may start on the records while they are produced,
  which only helps its figures).

Per batch size: one fill batch (every key once), then ``--batches`` measured batches per way,
alternating; per batch the seconds of the batch and the end-to-end latency, from the first
record produced to the batch's last output record visible to a read_committed reader. Medians;
the ratios are over affinity's at-least-once and over Spark's own query.

Usage: ``python benchmarks/kafka_delivery.py [--sizes 100000 1000000] [--batches 3] [--doc PATH]
[--no-write]`` (not part of ``make test``).
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

import argparse  # noqa: E402
import logging  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from typing import Any  # noqa: E402

import pandas as pd  # noqa: E402
import structlog  # noqa: E402

from benchmarks._report import DOC, machine, table, write_section  # noqa: E402
from coordinator.config import JobConfig, load_config  # noqa: E402
from coordinator.demo.race_ways import HOSTS, spark_state_conf  # noqa: E402
from coordinator.launchers.cluster import StandaloneCluster, spark_session  # noqa: E402
from coordinator.launchers.kafka import KafkaBroker  # noqa: E402
from coordinator.launchers.zookeeper import EmbeddedZooKeeper  # noqa: E402
from coordinator.streaming.kafka_query import KafkaQuery, stateful_kafka_query  # noqa: E402
from locality.spark.jvm import JAR_CONF_KEY, spark_jar  # noqa: E402
from locality.spark.kafka import end_offsets, write_records  # noqa: E402

PARTITIONS = 12
KEYS = 10_000
WAYS = ("exactly-once", "at-least-once", "spark")


def count(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    n = (state.get[0] if state.exists else 0) + sum(len(pdf) for pdf in pdfs)
    state.update((n,))
    yield pd.DataFrame({"key": [key[0]], "n": [n]})


def produce(broker: KafkaBroker, topic: str, start: int, rows: int) -> None:
    """``rows`` records keyed ``u<i mod KEYS>``, in chunks of 200,000."""
    for at in range(start, start + rows, 200_000):
        chunk = range(at, min(at + 200_000, start + rows))
        keys = [f"u{i % KEYS:05d}" for i in chunk]
        write_records(broker.bootstrap_servers, topic, pd.DataFrame({"key": keys, "value": "1"}))


def config_of(zk: EmbeddedZooKeeper, work: Path, name: str, topic: str) -> JobConfig:
    return load_config(
        data={
            "job": {"name": name, "id": "1", "run_id": "r1"},
            "zookeeper": {"connect": zk.hosts, "root": "/affinity-delivery"},
            "inputs": [{"system": "kafka", "stream": topic, "partitions": PARTITIONS}],
            "grouper": {"name": "host-affinity"},
            "state": {
                "checkpoint_dir": str(work / name / "durable"),
                "local_dir": str(work / name / "local"),
                "max_parallelism": 768,
            },
        },
        environ={},
    )


class Way:
    """One query, its input and output topics, and what it has produced."""

    def __init__(self, delivery: str, spark: Any, broker: KafkaBroker, config: JobConfig) -> None:
        self.delivery, self.broker = delivery, broker
        self.topic, self.out = f"in-{delivery}", f"out-{delivery}"
        broker.create_topic(self.topic, PARTITIONS)
        broker.create_topic(self.out, PARTITIONS)
        self.produced = 0
        self.query: KafkaQuery = stateful_kafka_query(
            count, spark=spark, kafka=broker.bootstrap_servers, config=config,
            output_schema="key string, n long", state_schema="n long", output_topic=self.out,
            delivery=delivery, max_records_per_batch=None,
        )  # fmt: skip

    def close(self) -> None:
        self.query.close()

    def batch(self, rows: int) -> tuple[float, float]:
        """(run_batch seconds, seconds from the first record produced to the batch's output
        visible: when ``run_batch`` returns, both modes have committed the output's
        transactions)."""
        before = sum(end_offsets(self.broker.bootstrap_servers, [self.out]).values())
        began = time.perf_counter()
        produce(self.broker, self.topic, self.produced, rows)
        self.produced += rows
        ran = time.perf_counter()
        report = self.query.run_batch()
        done = time.perf_counter()
        assert report is not None and report.rows_in == rows, (report, rows)
        after = sum(end_offsets(self.broker.bootstrap_servers, [self.out]).values())
        assert after - before >= report.rows_out, (after - before, report.rows_out)
        return done - ran, done - began


class SparkOwnWay:
    """Spark's own query over the same kind of topic: its Kafka source, ``applyInPandasWithState``
    with the same ``count``, and its Kafka sink (at least once)."""

    delivery = "spark"

    def __init__(self, spark: Any, broker: KafkaBroker, checkpoint: Path) -> None:
        self.broker = broker
        self.topic, self.out = "in-spark", "out-spark"
        broker.create_topic(self.topic, PARTITIONS)
        broker.create_topic(self.out, PARTITIONS)
        self.produced = 0
        for key, value in spark_state_conf(PARTITIONS).items():
            spark.conf.set(key, value)
        servers = broker.bootstrap_servers
        self.query = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", self.topic)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("CAST(key AS STRING) AS key")
            .groupBy("key")
            .applyInPandasWithState(count, "key string, n long", "n long", "update", "NoTimeout")
            .selectExpr("key", "to_json(struct(key, n)) AS value")
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", servers)
            .option("topic", self.out)
            .option("checkpointLocation", str(checkpoint))
            .outputMode("update")
            .start()
        )

    def batch(self, rows: int) -> tuple[float, float]:
        """(seconds from the last record produced to the records' output in the topic, seconds
        from the first record produced to it)."""
        before = sum(end_offsets(self.broker.bootstrap_servers, [self.out]).values())
        began = time.perf_counter()
        produce(self.broker, self.topic, self.produced, rows)
        self.produced += rows
        ran = time.perf_counter()
        self.query.processAllAvailable()
        done = time.perf_counter()
        after = sum(end_offsets(self.broker.bootstrap_servers, [self.out]).values())
        assert after - before >= min(rows, KEYS), (after - before, rows)
        return done - ran, done - began

    def close(self) -> None:
        self.query.stop()


def run(sizes: list[int], batches: int, work: Path) -> list[dict[str, Any]]:
    zk = EmbeddedZooKeeper(work / "zookeeper").start()
    broker = KafkaBroker(work / "kafka").start()
    cluster = StandaloneCluster(work / "spark", HOSTS, worker_memory="1500m").start()
    from locality.spark.maven import spark_jars_conf

    spark = spark_session(
        cluster.master_url, app_name="affinity-kafka-delivery",
        log4j_config=cluster.quiet_log4j_config,
        conf={JAR_CONF_KEY: f"{spark_jar()},{spark_jars_conf()}"},
    )  # fmt: skip
    ways: dict[str, Way | SparkOwnWay] = {
        d: Way(d, spark, broker, config_of(zk, work, f"d-{d}", f"in-{d}")) for d in WAYS[:2]
    }
    ways["spark"] = SparkOwnWay(spark, broker, work / "spark-checkpoint")
    results = []
    try:
        for way in ways.values():
            way.batch(KEYS)  # the fill: every key once
        for rows in sizes:
            figures: dict[str, list[tuple[float, float]]] = {d: [] for d in WAYS}
            for _ in range(batches):
                for delivery, way in ways.items():
                    figures[delivery].append(way.batch(rows))
            results.append({"rows": rows, "figures": figures})
            print(rows, {d: [f"{s:.2f}/{e:.2f}" for s, e in f] for d, f in figures.items()})
    finally:
        for way in ways.values():
            way.close()
        spark.stop()
        cluster.stop()
        broker.stop()
        zk.stop()
    return results


def report(results: list[dict[str, Any]], batches: int) -> str:
    rows = []
    for result in results:
        medians = {
            d: (
                statistics.median(s for s, _ in result["figures"][d]),
                statistics.median(e for _, e in result["figures"][d]),
            )
            for d in WAYS
        }
        for delivery in WAYS:
            seconds, latency = medians[delivery]
            rows.append(
                [
                    f"{result['rows']:,}",
                    delivery,
                    f"{seconds:.2f} s",
                    f"{result['rows'] / seconds:,.0f}",
                    f"{latency:.2f} s",
                    f"{seconds / medians['at-least-once'][0]:.2f}x",
                    f"{seconds / medians['spark'][0]:.2f}x",
                ]
            )
    body = table(
        ["records/batch", "delivery", "batch (median)", "records/s", "produce to visible",
         "time vs at-least-once", "time vs Spark's own"],
        rows,
    )  # fmt: skip
    return "\n".join(
        [
            "## Kafka to Kafka: exactly-once vs at-least-once vs Spark's own query "
            "(`benchmarks/kafka_delivery.py`)",
            "",
            f"{machine()}; 3 executors, {PARTITIONS} partitions and tasks, {KEYS:,} keys, "
            f"medians of {batches} batches per size and way after a fill batch; produce to "
            "visible: from the first record produced to the batch's output committed in the "
            "output topic. Exactly once keeps each task's output with its checkpoint and "
            "publishes it after the commit in one transaction with its publish mark; at least "
            "once writes it from the tasks. Spark's own: its Kafka source, "
            "`applyInPandasWithState` (RocksDB, 12 state partitions) and its Kafka sink (at "
            "least once), timed from the last record produced to `processAllAvailable` "
            "returning.",
            "",
            body,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="affinity-kafka-delivery-") as tmp:
        results = run(args.sizes, args.batches, Path(tmp))
    markdown = report(results, args.batches)
    print(markdown)
    if not args.no_write:
        write_section("kafka-delivery", markdown, args.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
