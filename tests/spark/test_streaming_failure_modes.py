"""stateful_foreach_batch under Spark's real failure modes, on the 3-worker cluster: two attempts
of one task at once (Spark's speculation with a slow attempt), a restart with a fresh Spark
checkpoint location, an error after the commit, a ZooKeeper server frozen right after the
commit. After every run the durable state is read back as a restore would load it (along the
commit's chain heads) and compared with a pandas reference, so a hole hidden by the local
copies still shows."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from affinity_pipeline.cluster import StandaloneCluster
from prometheus_client import REGISTRY
from pyspark import cloudpickle
from spark_app import WORKER_HOSTS, SparkApp, stop_active_session
from streaming_soak import durable_counts

from coordinator.config import JobConfig, load_config
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import stateful_foreach_batch
from coordinator.streaming.query import StatefulQuery
from coordinator.streaming.runtime import AFTER_COMMIT_ZK_BUDGET_S
from metadata.zk.errors import StoreUnavailable

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TASKS = 4
MAXP = 64
SLOW_WORD = "slow"  # its task's first attempt stalls (speculation launches a copy)
MARKERS: list[str] = []  # a folder where attempts after the first leave a file (set by a test)


def count(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    from pyspark import TaskContext

    rows = sum(len(pdf) for pdf in pdfs)
    context = TaskContext.get()
    if key[0] == SLOW_WORD and context is not None and context.attemptNumber() == 0:
        time.sleep(12)  # the first attempt is slow: a speculative copy runs beside it
    elif key[0] == SLOW_WORD and context is not None and MARKERS:
        Path(MARKERS[0], f"attempt-{context.attemptNumber()}-{context.partitionId()}").touch()
    n = (state.get[0] if state.exists else 0) + rows
    state.update((n,))
    yield pd.DataFrame({"word": [key[0]], "n": [n]})


def config_of(zk: EmbeddedZooKeeper, tmp: Path, name: str) -> JobConfig:
    return load_config(
        data={
            "job": {"name": name, "id": "1", "run_id": "r1"},
            "zookeeper": {"connect": zk.hosts, "root": "/affinity-failures"},
            "inputs": [{"system": "spark", "stream": "words", "partitions": TASKS}],
            "grouper": {"name": "host-affinity"},
            "coordinator": {"debounce_ms": 100, "debounce_max_ms": 1000},
            "state": {
                "checkpoint_dir": str(tmp / "durable"),
                "local_dir": str(tmp / "local"),
                "max_parallelism": MAXP,
            },
        },
        environ={},
    )


class WordQuery:
    """A file-source query of words: one file per batch, outputs kept per batch."""

    def __init__(self, app: SparkApp, tmp: Path, config: JobConfig, checkpoint: str) -> None:
        self.app, self.inbox, self.config = app, tmp / "inbox", config
        self.inbox.mkdir(exist_ok=True)
        self.outputs: dict[int, list[tuple[str, int]]] = {}
        self.delivered: list[int] = []  # each batch id the sink got, in order
        self.handler: StatefulQuery = stateful_foreach_batch(
            count,
            key_columns=["word"],
            output_schema="word string, n long",
            state_schema="n long",
            sink=self.sink,
            config=config,
        )
        assert app.session is not None
        stream = app.session.readStream.schema("word string").option("maxFilesPerTrigger", 1)
        self.query = (
            stream.json(str(self.inbox))
            .writeStream.foreachBatch(self.handler)
            .option("checkpointLocation", str(tmp / checkpoint))
            .start()
        )

    def sink(self, df: Any, batch: int) -> None:
        self.outputs[batch] = sorted((str(w), int(n)) for w, n in df.collect())
        self.delivered.append(batch)

    def feed(self, index: int, words: list[str]) -> None:
        (self.inbox / f"{index:04d}.json").write_text(
            "".join(json.dumps({"word": w}) + "\n" for w in words)
        )
        self.query.processAllAvailable()

    def stop(self) -> None:
        self.query.stop()
        self.handler.close()


def batch_words(index: int) -> list[str]:
    return [f"w{(index * 7 + i) % 23}" for i in range(40)] + [SLOW_WORD] * (index % 3 + 1)


def reference(batches: list[list[str]]) -> tuple[dict[int, list[tuple[str, int]]], dict[str, int]]:
    totals: dict[str, int] = {}
    outputs = {}
    for b, words in enumerate(batches):
        counts = pd.Series(words).value_counts()
        for word, n in counts.items():
            totals[str(word)] = totals.get(str(word), 0) + int(n)
        outputs[b] = sorted((str(w), totals[str(w)]) for w in counts.index)
    return outputs, totals


def durable_state(config: JobConfig) -> dict[str, int]:
    """The state a restore would load, read from durable storage alone."""
    committed, counts = durable_counts(config)
    assert committed >= 0
    return counts


@pytest.fixture
def speculating_app(spark_cluster: StandaloneCluster) -> Iterator[SparkApp]:
    """An application of its own with speculation on: a task that runs 1.1x the median of its
    stage's finished tasks gets a copy on another host."""
    stop_active_session()
    conf = {
        "spark.speculation": "true",
        "spark.speculation.interval": "200ms",
        "spark.speculation.multiplier": "1.1",
        "spark.speculation.quantile": "0.5",
        "spark.speculation.minTaskRuntime": "1s",
    }
    app = SparkApp(spark_cluster, WORKER_HOSTS, conf=conf)
    app.start()
    try:
        yield app
    finally:
        app.stop()


def test_speculative_copies_of_a_task_keep_the_state_exact(
    speculating_app: SparkApp, zk_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    config = config_of(zk_server, tmp_path, "words-speculation")
    MARKERS[:] = [str(tmp_path)]
    query = WordQuery(speculating_app, tmp_path, config, "spark-checkpoint")
    fed = [batch_words(b) for b in range(4)]
    try:
        for b, words in enumerate(fed):
            query.feed(b, words)
        attempts = [r for r in query.handler.reports]
    finally:
        query.stop()
        MARKERS.clear()
    assert list(tmp_path.glob("attempt-*")), "no speculative attempt ran"
    expected, totals = reference(fed)
    assert query.outputs == expected
    assert durable_state(config) == totals  # no committed file missing, no attempt mixed in
    assert len(attempts) == 4


def test_a_fresh_spark_checkpoint_is_refused_and_the_state_kept(
    app: SparkApp, zk_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    config = config_of(zk_server, tmp_path, "words-fresh-checkpoint")
    fed = [batch_words(b) for b in range(5)]
    query = WordQuery(app, tmp_path, config, "checkpoint-a")
    try:
        for b in range(3):
            query.feed(b, fed[b])
    finally:
        query.stop()

    # a changed query restarted with a new checkpointLocation: Spark calls batch 0 again
    fresh = WordQuery(app, tmp_path, config, "checkpoint-b")
    with pytest.raises(Exception, match=r"batch 0 is below batch 2.*checkpointLocation"):
        fresh.query.processAllAvailable()
    fresh.stop()
    assert durable_state(config) == reference(fed[:3])[1]  # nothing was wiped

    again = WordQuery(app, tmp_path, config, "checkpoint-a")  # the way out: the old checkpoint
    try:
        for b in range(3, 5):
            again.feed(b, fed[b])
    finally:
        again.stop()
    expected, totals = reference(fed)
    assert {b: again.outputs[b] for b in (3, 4)} == {b: expected[b] for b in (3, 4)}
    assert durable_state(config) == totals


def test_an_error_after_the_commit_does_not_fail_the_batch(
    app: SparkApp, zk_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    config = config_of(zk_server, tmp_path, "words-after-commit")
    fed = [batch_words(b) for b in range(3)]
    query = WordQuery(app, tmp_path, config, "spark-checkpoint")
    try:
        query.feed(0, fed[0])
        store = query.handler._store
        assert store is not None
        real_write = store.locality.write
        writes: list[dict[str, str]] = []

        def lost(where: dict[str, str]) -> int:  # the connection lost right after the commit
            store.locality.write = recording  # type: ignore[method-assign]
            raise StoreUnavailable(store.layout.locality, "connection lost")

        def recording(where: dict[str, str]) -> int:
            writes.append(dict(where))
            return real_write(where)

        store.locality.write = lost  # type: ignore[method-assign]
        query.feed(1, fed[1])  # its locality write fails: logged, counted, the batch stands
        query.feed(2, fed[2])  # and the next batch writes what was owed
        reports = query.handler.reports
    finally:
        query.stop()
    assert [r.after_commit_failures for r in reports] == [0, 1, 0]
    assert len(writes) == 1 and len(writes[0]) == TASKS
    expected, totals = reference(fed)
    assert query.outputs == expected  # each batch reached the sink once
    assert durable_state(config) == totals


def test_zookeeper_frozen_right_after_the_commit(
    app: SparkApp, zk_private_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    """A real ZooKeeper server (this test's own) frozen with SIGSTOP right after affinity's
    commit of batch 1: the steps after it (locality, history) hit a server that neither answers
    nor closes its sockets. The batch stands within the after-commit budget, each batch reaches
    the sink once, and after SIGCONT batch 2 writes the locality owed."""
    config = config_of(zk_private_server, tmp_path, "words-frozen")
    fed = [batch_words(b) for b in range(3)]
    query = WordQuery(app, tmp_path, config, "spark-checkpoint")
    frozen: list[float] = []
    writes: list[tuple[int, str]] = []  # (tasks owed, outcome) of the locality step
    failed = {step: _after_commit_failures(step) for step in ("locality", "history")}
    try:
        query.feed(0, fed[0])
        handler = query.handler
        commits, store = handler.commits, handler._store
        assert commits is not None and store is not None and zk_private_server.pid is not None
        real_commit, real_step = commits.commit, handler._write_locality

        def commit_then_freeze(record: Any) -> Any:
            done = real_commit(record)  # the record and ZooKeeper's pointer: committed
            if done.batch == 1:
                os.kill(zk_private_server.pid, signal.SIGSTOP)
                frozen.append(time.monotonic())
            return done

        def recording(driver: Any) -> None:  # the runtime's locality step after a commit
            owed = len(handler._owed_locality)
            try:
                real_step(driver)
            except Exception as exc:
                writes.append((owed, type(exc).__name__))
                raise
            writes.append((owed, "ok"))

        commits.commit = commit_then_freeze  # type: ignore[method-assign]
        handler._write_locality = recording  # type: ignore[method-assign]
        query.feed(1, fed[1])  # its steps after the commit hit the frozen server
        stood = time.monotonic()
        os.kill(zk_private_server.pid, signal.SIGCONT)
        query.feed(2, fed[2])  # and the next batch writes what was owed
        reports = handler.reports
        locality = store.locality.read()
    finally:
        if zk_private_server.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(zk_private_server.pid, signal.SIGCONT)
        query.stop()
    assert len(frozen) == 1
    held = stood - frozen[0]  # how long the committed batch waited on the frozen server
    assert held < AFTER_COMMIT_ZK_BUDGET_S + 8, f"batch 1 waited {held:.1f}s after its commit"
    assert [r.after_commit_failures for r in reports] == [0, 2, 0]
    assert {s: _after_commit_failures(s) - n for s, n in failed.items()} == {
        "locality": 1,
        "history": 1,
    }
    assert writes == [(TASKS, "StoreUnavailable"), (TASKS, "ok")]
    assert len(locality) == TASKS
    expected, totals = reference(fed)
    assert query.delivered == [0, 1, 2] and query.outputs == expected  # each batch once
    assert durable_state(config) == totals


def _after_commit_failures(step: str) -> float:
    return (
        REGISTRY.get_sample_value("affinity_streaming_after_commit_failures_total", {"step": step})
        or 0.0
    )
