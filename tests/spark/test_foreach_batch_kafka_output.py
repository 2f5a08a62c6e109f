"""``stateful_foreach_batch`` with ``output_topic=``: a real Structured Streaming query (file
source, ``foreachBatch``) on the 3-worker cluster writes its output to a topic of the real
broker. Through a sink crash before the commit and the driver dying between the commit and the
publish (Spark runs the batch id again after the restart), a read_committed reader of the topic
sees each batch's output exactly once; the same run with ``delivery="at-least-once"`` shows the
duplicates exactly once removes."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from docs_snippets import snippet
from pyspark import cloudpickle
from spark_app import SparkApp
from streaming_soak import InjectedCrash, crash_after_commit
from test_streaming_failure_modes import batch_words, config_of, count, reference

from coordinator.config import JobConfig
from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import StreamingUsageError, stateful_foreach_batch
from coordinator.streaming.query import StatefulQuery
from locality.spark.kafka import OffsetRange, end_offsets, read_range
from locality.spark.state import latest_commit

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class CrashOnce:
    """A sink (beside the topic) that crashes the driver once, before the commit."""

    def __init__(self) -> None:
        self.crash = False

    def __call__(self, df: Any, batch: int) -> None:
        if self.crash:
            self.crash = False
            raise InjectedCrash(f"the driver died in batch {batch}, before the commit")


class TopicQuery:
    """A file query of words whose output goes to ``out`` (one file a batch)."""

    def __init__(
        self, app: SparkApp, tmp: Path, config: JobConfig, broker: KafkaBroker, out: str,
        delivery: str,
    ) -> None:  # fmt: skip
        self.inbox = tmp / "inbox"
        self.inbox.mkdir(exist_ok=True)
        self.sink = CrashOnce()
        self.handler: StatefulQuery = stateful_foreach_batch(
            count, key_columns=["word"], output_schema="word string, n long",
            state_schema="n long", config=config, sink=self.sink, output_topic=out,
            kafka=broker.bootstrap_servers, output_key_column="word", delivery=delivery,
        )  # fmt: skip
        assert app.session is not None
        stream = app.session.readStream.schema("word string").option("maxFilesPerTrigger", 1)
        self.query = (
            stream.json(str(self.inbox))
            .writeStream.foreachBatch(self.handler)
            .option("checkpointLocation", str(tmp / "spark-checkpoint"))
            .start()
        )

    def feed(self, index: int, words: list[str]) -> None:
        (self.inbox / f"{index:04d}.json").write_text(
            "".join(json.dumps({"word": w}) + "\n" for w in words)
        )
        self.query.processAllAvailable()

    def stop(self) -> None:
        self.query.stop()
        self.handler.close()


def topic_records(broker: KafkaBroker, topic: str) -> Counter[tuple[str, int]]:
    """(word, n) of every record a read_committed reader sees in ``topic``, keyed by the word."""
    seen: Counter[tuple[str, int]] = Counter()
    for p, end in end_offsets(broker.bootstrap_servers, [topic]).items():
        table = read_range(broker.bootstrap_servers, OffsetRange(topic, p.partition, 0, end))
        for record in table.to_pylist():
            row = json.loads(record["value"])
            assert bytes(record["key"]).decode() == row["word"]
            seen[row["word"], int(row["n"])] += 1
    return seen


def run_through_crashes(
    make: Callable[[], TopicQuery], fed: list[list[str]], tmp: Path, config: JobConfig
) -> None:
    """Batch 0 plain; batch 1's sink crashes before the commit; batch 2's driver dies after
    the commit (before Spark's): each time the query is started again, on the same checkpoint
    location, by a new driver; then batch 3 plain."""
    query = make()
    try:
        query.feed(0, fed[0])
        query.sink.crash = True
        with pytest.raises(Exception, match="before the commit"):
            query.feed(1, fed[1])
    finally:
        query.stop()
    query = make()  # Spark runs batch 1 again
    try:
        query.query.processAllAvailable()
        crash_after_commit(query.handler)
        with pytest.raises(Exception, match="after affinity's commit"):
            query.feed(2, fed[2])
        commit = latest_commit(query.handler.storage)
        assert commit is not None and commit.batch == 2  # committed, Spark's commit missing
    finally:
        query.stop()
    query = make()  # Spark runs batch 2 again: it is published once, then replayed
    try:
        query.query.processAllAvailable()
        query.feed(3, fed[3])
        assert [r.batch for r in query.handler.reports] == [2, 3]
    finally:
        query.stop()


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_a_foreach_batch_query_writes_each_batch_to_the_topic_once(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
    delivery: str,
) -> None:
    out = kafka_topic(3)
    config = config_of(zk_server, tmp_path, f"words-topic-{delivery}")
    fed = [batch_words(b) for b in range(4)]

    def make() -> TopicQuery:
        return TopicQuery(app, tmp_path, config, kafka_broker, out, delivery)

    run_through_crashes(make, fed, tmp_path, config)
    outputs, _ = reference(fed)
    expected = Counter(row for rows in outputs.values() for row in rows)
    seen = topic_records(kafka_broker, out)
    if delivery == "exactly-once":
        assert seen == expected  # every record once: 0 duplicates, 0 missing
        assert list((tmp_path / "durable" / "outputs").glob("output-*")) == []  # all published
    else:
        assert set(seen) == set(expected) and seen != expected  # at least once: duplicates
        assert sum(seen.values()) > sum(expected.values())


def test_an_output_topic_with_a_wrong_option_is_refused_before_anything_runs(
    zk_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    config = config_of(zk_server, tmp_path, "words-topic-refused")

    def make(**options: Any) -> StatefulQuery:
        return stateful_foreach_batch(
            count, key_columns=["word"], output_schema="word string, n long",
            state_schema="n long", config=config, **options,
        )  # fmt: skip

    with pytest.raises(StreamingUsageError, match="the output needs a place"):
        make()
    with pytest.raises(StreamingUsageError, match="needs kafka="):
        make(output_topic="out")
    with pytest.raises(StreamingUsageError, match="output_key_column 'key' is not a column"):
        make(output_topic="out", kafka="localhost:9092")
    with pytest.raises(StreamingUsageError, match="delivery must be one of"):
        make(output_topic="out", kafka="localhost:9092", output_key_column=None, delivery="once")
    assert not (tmp_path / "durable").exists()  # nothing was written


def test_the_docs_snippet_runs_as_written(
    app: SparkApp,
    kafka_broker: KafkaBroker,
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    kafka_broker.create_topic("word-counts", 3)
    config = config_of(zk_server, tmp_path, "words-topic-snippet")
    fed = [batch_words(b) for b in range(2)]
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    assert app.session is not None
    namespace: dict[str, Any] = {
        "count": count,
        "config": config,
        "bootstrap_servers": kafka_broker.bootstrap_servers,
        "checkpoint": str(tmp_path / "spark-checkpoint"),
        "words": app.session.readStream.schema("word string")
        .option("maxFilesPerTrigger", 1)
        .json(str(inbox)),
    }
    exec(compile(snippet("docs/kafka.md", "foreach-batch-to-topic"), "kafka.md", "exec"), namespace)
    query, handler = namespace["query"], namespace["handler"]
    try:
        for b, words in enumerate(fed):
            (inbox / f"{b:04d}.json").write_text(
                "".join(json.dumps({"word": w}) + "\n" for w in words)
            )
            query.processAllAvailable()
    finally:
        query.stop()
        handler.close()
    outputs, _ = reference(fed)
    expected = Counter(row for rows in outputs.values() for row in rows)
    assert topic_records(kafka_broker, "word-counts") == expected
