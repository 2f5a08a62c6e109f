"""stateful_foreach_batch on the 3-worker cluster: a Structured Streaming query (file source and
rate source) whose applyInPandasWithState function keeps its state on the executors its job
model names. Output equals a single-process reference through an executor loss, a rolling
restart of the executors and an application restart; task runs stay warm; a batch re-run after
a crash in its middle gives the same output and state; bad use fails clearly."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from affinity_pipeline.cluster import StandaloneCluster
from affinity_pipeline.streaming import (
    INPUT_SCHEMA,
    OUTPUT_SCHEMA,
    STATE_SCHEMA,
    ClickFiles,
    count_clicks,
    reference_clicks,
)
from pyspark import cloudpickle
from spark_app import SparkApp

from coordinator.config import JobConfig, load_config
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import stateful_foreach_batch
from coordinator.streaming.query import BatchReport, StatefulQuery, StreamingBatchError
from locality.spark.state import latest_commit

pytestmark = pytest.mark.spark

# the functions defined here travel to the executors by value (the module is not on their path)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

TASKS = 8  # elasticity factor 8 over one input partition: "Partition 0-<b>-8"


class Sink:
    """Collects each batch's output rows; ``fail_at``: raise once at that batch (a crash after
    the tasks checkpointed, before the commit)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[Any, ...]]] = {}
        self.fail_at: int | None = None
        self.failed: list[tuple[Any, ...]] | None = None

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = sorted(tuple(r) for r in df.collect())
        if self.fail_at == batch_id:
            self.fail_at, self.failed = None, rows
            raise RuntimeError(f"the sink crashed in batch {batch_id}")
        self.batches[batch_id] = rows


def job_config(
    zk: EmbeddedZooKeeper,
    tmp: Path,
    name: str,
    grouper_options: dict[str, Any] | None = None,
    partitions: int = 1,
    elasticity: int = TASKS,
) -> JobConfig:
    return load_config(
        data={
            "job": {"name": name, "id": "1", "run_id": "r1"},
            "zookeeper": {"connect": zk.hosts, "root": "/affinity-streaming"},
            "inputs": [{"system": "spark", "stream": "clicks", "partitions": partitions}],
            "ssp_grouper": {
                "name": "group-by-partition",
                "options": {"elasticity_factor": elasticity},
            },
            "grouper": {"name": "host-affinity", "options": grouper_options or {}},
            "coordinator": {
                "debounce_ms": 100,
                "debounce_max_ms": 1000,
                "barrier_timeout_ms": 20000,
            },
            "state": {
                "checkpoint_dir": str(tmp / "durable"),
                "local_dir": str(tmp / "local"),
                "max_parallelism": 768,  # a multiple of every task count used here (8, 6)
            },
        },
        environ={},
    )


class FileQuery:
    """The file-source query: start, feed one file per batch, stop."""

    def __init__(self, app: SparkApp, files: ClickFiles, handler: StatefulQuery, checkpoint: Path):
        self.app, self.files, self.handler, self.checkpoint = app, files, handler, checkpoint
        self.query: Any = None

    def start(self) -> None:
        assert self.app.session is not None
        self.files.directory.mkdir(parents=True, exist_ok=True)
        stream = (
            self.app.session.readStream.schema(INPUT_SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .json(str(self.files.directory))
        )
        self.query = (
            stream.writeStream.foreachBatch(self.handler)
            .option("checkpointLocation", str(self.checkpoint))
            .start()
        )

    def run(self, batches: range) -> list[BatchReport]:
        before = len(self.handler.reports)
        for b in batches:
            self.files.drop(b)
            self.query.processAllAvailable()
        return self.handler.reports[before:]

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None


def replace_executor(app: SparkApp, cluster: StandaloneCluster, executor_id: str) -> None:
    """Kill an executor JVM; wait until Spark dropped it and its worker started a new one."""
    cluster.kill_executor(app.app_id, executor_id)
    deadline = time.monotonic() + 120
    while executor_id in {e.executor_id for e in app.executors()}:
        assert time.monotonic() < deadline, f"executor {executor_id} still listed"
        time.sleep(0.2)
    app.ready(exclude=(executor_id,))


def warm_ratio(reports: list[BatchReport]) -> float:
    runs = sum(r.tasks for r in reports)
    return sum(r.warm for r in reports) / runs if runs else 1.0


@pytest.fixture
def handlers() -> Iterator[list[StatefulQuery]]:
    made: list[StatefulQuery] = []
    yield made
    for handler in made:
        handler.close()


def test_file_source_query_through_failures(
    app: SparkApp,
    spark_cluster: StandaloneCluster,
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
    handlers: list[StatefulQuery],
) -> None:
    config = job_config(zk_server, tmp_path, "clicks-files")
    files = ClickFiles(tmp_path / "in")
    sink = Sink()

    def new_query() -> FileQuery:
        handler = stateful_foreach_batch(
            count_clicks,
            key_columns=["user"],
            output_schema=OUTPUT_SCHEMA,
            state_schema=STATE_SCHEMA,
            sink=sink,
            config=config,
        )
        handlers.append(handler)
        query = FileQuery(app, files, handler, tmp_path / "spark-checkpoint")
        query.start()
        return query

    query = new_query()
    steady = query.run(range(0, 3))
    assert [r.new for r in steady[:1]] == [TASKS] and warm_ratio(steady[1:]) == 1.0
    assert all(r.pinned_ok == r.pinned_total == TASKS for r in steady)

    # an executor lost: its replacement is a new processor at the same host
    replace_executor(app, spark_cluster, app.executors()[0].executor_id)
    lost = query.run(range(3, 5))

    # a rolling restart of the executors, one batch after each
    rolling: list[BatchReport] = []
    for executor in app.executors():
        replace_executor(app, spark_cluster, executor.executor_id)
        rolling += query.run(range(5 + len(rolling), 6 + len(rolling)))
    assert warm_ratio(rolling) >= 0.99, rolling

    # an application restart: new application id, new executors, new driver member
    query.stop()
    handlers[-1].close()
    app.restart()
    query = new_query()
    restarted = query.run(range(8, 10))
    assert warm_ratio(restarted) >= 0.99, restarted
    assert sum(r.bytes_restored for r in [*rolling, *restarted]) == 0

    # a crash in the middle of batch 10 (tasks checkpointed, sink fails, nothing committed)
    sink.fail_at = 10
    with pytest.raises(Exception, match="the sink crashed in batch 10"):
        query.run(range(10, 11))
    query.stop()
    assert latest_commit(handlers[-1].storage).batch == 9  # type: ignore[union-attr]
    query.start()  # Spark re-runs batch 10 from its checkpoint
    query.query.processAllAvailable()
    rerun = handlers[-1].reports[-1]
    assert rerun.batch == 10 and rerun.warm == TASKS  # the local copies still hold batch 9
    assert sink.batches[10] == sink.failed
    query.run(range(11, 12))
    query.stop()

    reference = reference_clicks(files, range(12))
    assert sink.batches == reference
    assert lost and all(r.pinned_ok == r.pinned_total for r in [*lost, *rolling, *restarted])


def test_rate_source_and_bad_use(
    app: SparkApp, zk_server: EmbeddedZooKeeper, tmp_path: Path, handlers: list[StatefulQuery]
) -> None:
    """The rate source with a key of two columns; an unknown key column and a function that
    raises fail the batch clearly and commit nothing."""
    assert app.session is not None
    config = job_config(zk_server, tmp_path, "clicks-rate")
    seen: dict[int, list[tuple[Any, ...]]] = {}

    def modulo(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        count = state.get[0] if state.exists else 0
        for pdf in pdfs:
            count += len(pdf)
        state.update((count,))
        yield pd.DataFrame({"m": [key[0]], "parity": [key[1]], "n": [count]})

    handler = stateful_foreach_batch(
        modulo,
        key_columns=["m", "parity"],
        output_schema="m long, parity long, n long",
        state_schema="n long",
        sink=lambda df, b: seen.__setitem__(b, sorted(tuple(r) for r in df.collect())),
        config=config,
    )
    handlers.append(handler)
    stream = (
        app.session.readStream.format("rate")
        .option("rowsPerSecond", 50)
        .load()
        .selectExpr("value % 10 AS m", "value % 2 AS parity", "value")
    )
    query = (
        stream.writeStream.foreachBatch(handler)
        .option("checkpointLocation", str(tmp_path / "rate-checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        query.stop()
    assert len(seen) >= 3
    last = seen[max(seen)]
    assert {(m, p) for m, p, _ in last} <= {(m, m % 2) for m in range(10)}
    totals = {(m, p): n for rows in seen.values() for m, p, n in rows}
    assert sum(totals.values()) == sum(r.rows_in for r in handler.reports)

    bad = stateful_foreach_batch(
        count_clicks,
        key_columns=["usr"],
        output_schema=OUTPUT_SCHEMA,
        state_schema=STATE_SCHEMA,
        sink=lambda df, b: None,
        config=config,
    )
    handlers.append(bad)
    frame = app.session.createDataFrame([("u1", 1, 0)], INPUT_SCHEMA)
    with pytest.raises(ValueError, match=r"key_columns \['usr'\] are not columns of the stream"):
        bad(frame, 0)

    def raises(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        raise ZeroDivisionError("no clicks for " + key[0])

    failing = stateful_foreach_batch(
        raises,
        key_columns=["user"],
        output_schema=OUTPUT_SCHEMA,
        state_schema=STATE_SCHEMA,
        sink=lambda df, b: None,
        config=job_config(zk_server, tmp_path / "f", "clicks-fail"),
    )
    handlers.append(failing)
    with pytest.raises(
        StreamingBatchError,
        match=r"batch 0 failed and nothing was committed: .*ZeroDivisionError: no clicks for u1",
    ):
        failing(frame, 0)
    assert latest_commit(failing.storage) is None
