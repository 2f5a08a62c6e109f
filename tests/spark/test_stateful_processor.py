"""One Spark 4 ``StatefulProcessor``, unchanged, run both ways on the 3-worker cluster: by
pyspark's own ``transformWithStateInPandas`` and by ``stateful_processor_foreach_batch``, on the
same files, outputs compared batch by batch; affinity's run goes through an executor kill and
an application restart."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from affinity_pipeline.cluster import StandaloneCluster
from pyspark import cloudpickle
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from spark_app import SparkApp

from coordinator.config import JobConfig, load_config
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import StreamingUsageError, stateful_processor_foreach_batch

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])

OUTPUT = "user string, out string"
HOUR_MS = 3_600_000
BATCHES = 6


class Activity(StatefulProcessor):
    """Per user: counters per kind (MapState), a total (ValueState), the last three kinds
    (ListState), the kinds first seen within the TTL (a MapState with ttlDurationMs: a dedup),
    and one processing-time timer an hour ahead (listTimers)."""

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.counts = handle.getMapState("counts", "kind string", "n long")
        self.total = handle.getValueState("total", "n long")
        self.recent = handle.getListState("recent", "kind string")
        self.seen = handle.getMapState("seen", "kind string", "at long", ttlDurationMs=HOUR_MS)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
        total = (self.total.get() or (0,))[0]
        recent = [k for (k,) in self.recent.get()]
        new = []
        for pdf in rows:
            for kind in pdf["kind"]:
                n = (self.counts.getValue((kind,)) or (0,))[0] + 1
                self.counts.updateValue((kind,), (n,))
                total += 1
                recent = [*recent, kind][-3:]
                if not self.seen.containsKey((kind,)):
                    self.seen.updateValue((kind,), (total,))
                    new.append(kind)
        self.total.update((total,))
        self.recent.put([(k,) for k in recent])
        if not list(self.handle.listTimers()):
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + HOUR_MS)
        counts = ",".join(f"{k}={v}" for (k,), (v,) in sorted(self.counts.iterator()))
        timers = len(list(self.handle.listTimers()))
        out = f"{total}|{counts}|{','.join(recent)}|{','.join(sorted(new))}|{timers}"
        yield pd.DataFrame({"user": [key[0]], "out": [out]})

    def close(self) -> None:
        pass


def batch_rows(b: int) -> list[dict[str, str]]:
    return [{"user": f"u{(b * 5 + i) % 7}", "kind": f"k{(b + i * i) % 5}"} for i in range(12)]


def write_batches(inbox: Path, rows: Callable[[int], list[dict[str, str]]] = batch_rows) -> None:
    """One file per batch, oldest first (the file source takes them in modification order)."""
    inbox.mkdir(parents=True)
    now = time.time()
    for b in range(BATCHES):
        lines = "".join(json.dumps(r) + "\n" for r in rows(b))
        path = inbox / f"{b:04d}.json"
        path.write_text(lines)
        os.utime(path, (now - 100 + b, now - 100 + b))


class Outputs:
    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[str, str]]] = {}

    def __call__(self, df: Any, batch: int) -> None:
        self.batches[int(batch)] = sorted((str(u), str(o)) for u, o in df.collect())


def spark_reference(
    app: SparkApp, inbox: Path, checkpoint: Path, transform: Callable[[Any], Any] | None = None
) -> dict[int, Any]:
    """pyspark's own transformWithStateInPandas over the files, one batch per file
    (``transform``: the stream to the operator's output; default: :class:`Activity`'s)."""
    session = app.session
    assert session is not None
    conf = {
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    }
    for name, value in conf.items():
        session.conf.set(name, value)
    outputs = Outputs()
    try:
        stream = session.readStream.schema("user string, kind string")
        frame = stream.option("maxFilesPerTrigger", 1).json(str(inbox))
        result = (
            transform(frame)
            if transform is not None
            else frame.groupBy("user").transformWithStateInPandas(
                Activity(), OUTPUT, "Update", "ProcessingTime"
            )
        )
        query = (
            result.writeStream.foreachBatch(outputs)
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
        query.processAllAvailable()
        query.stop()
    finally:
        for name in conf:
            session.conf.unset(name)
    return outputs.batches


def config_of(zk: EmbeddedZooKeeper, tmp: Path, root: str = "/affinity-processor") -> JobConfig:
    return load_config(
        data={
            "job": {"name": "activity", "id": "1", "run_id": "r1"},
            "zookeeper": {"connect": zk.hosts, "root": root},
            "inputs": [{"system": "spark", "stream": "activity", "partitions": 3}],
            "grouper": {"name": "host-affinity"},
            "coordinator": {"debounce_ms": 100, "debounce_max_ms": 1000},
            "state": {
                "checkpoint_dir": str(tmp / "durable"),
                "local_dir": str(tmp / "local"),
                "max_parallelism": 48,
            },
        },
        environ={},
    )


#: Makes affinity's handler in a (new) application: (session, sink, config) -> handler.
MakeHandler = Callable[[Any, Outputs, JobConfig], Any]


def activity_handler(session: Any, outputs: Outputs, config: JobConfig) -> Any:
    return stateful_processor_foreach_batch(
        Activity(),
        key_columns=["user"],
        output_schema=OUTPUT,
        time_mode="ProcessingTime",
        sink=outputs,
        config=config,
    )


def run_affinity(
    app: SparkApp,
    inbox: Path,
    checkpoint: Path,
    config: JobConfig,
    upto: int,
    outputs: Outputs,
    make_handler: MakeHandler = activity_handler,
) -> None:
    """Affinity's query over the files until batch ``upto`` is done (then stopped)."""
    session = app.session
    assert session is not None
    handler = make_handler(session, outputs, config)
    stream = session.readStream.schema("user string, kind string")
    frame = stream.option("maxFilesPerTrigger", 1).json(str(inbox))
    query = (
        frame.writeStream.foreachBatch(handler)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        while max(outputs.batches, default=-1) < upto:
            query.processAllAvailable()
            assert query.exception() is None
    finally:
        query.stop()
        handler.close()


def test_a_processor_runs_as_spark_runs_it(
    app: SparkApp, spark_cluster: StandaloneCluster, zk_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    expected = spark_reference(app, _inbox(tmp_path, "spark"), tmp_path / "spark-checkpoint")
    assert sorted(expected) == list(range(BATCHES))

    config = config_of(zk_server, tmp_path)
    outputs = through_failures(app, spark_cluster, tmp_path, _inbox(tmp_path, "spark"), config)
    for b in range(BATCHES):
        assert outputs.batches[b] == expected[b], f"batch {b}"


def through_failures(
    app: SparkApp,
    spark_cluster: StandaloneCluster,
    tmp: Path,
    source: Path,
    config: JobConfig,
    make_handler: MakeHandler = activity_handler,
) -> Outputs:
    """Affinity's query over ``source``'s files, one batch each, an executor killed before
    batch 2 and the application restarted before batch 4."""
    outputs = Outputs()
    inbox = tmp / "affinity-in"
    inbox.mkdir()
    checkpoint = tmp / "affinity-checkpoint"
    for b in range(BATCHES):
        (inbox / f"{b:04d}.json").write_text((source / f"{b:04d}.json").read_text())
        if b == 2:  # an executor dies between batches
            victim = app.executors()[0].executor_id
            spark_cluster.kill_executor(app.app_id, victim)
        if b == 4:  # the application restarts
            app.restart()
            app.ready()
        run_affinity(app, inbox, checkpoint, config, b, outputs, make_handler)
    return outputs


def test_what_affinity_does_not_run_is_refused_before_the_query_starts(
    zk_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    config = config_of(zk_server, tmp_path)
    common: dict[str, Any] = {"key_columns": ["user"], "output_schema": OUTPUT, "config": config}
    with pytest.raises(StreamingUsageError, match="EventTime' needs an event-time watermark"):
        stateful_processor_foreach_batch(Activity(), time_mode="EventTime", sink=print, **common)
    with pytest.raises(StreamingUsageError, match="a TTL needs timeMode 'ProcessingTime'"):
        stateful_processor_foreach_batch(Activity(), sink=print, **common)
    with pytest.raises(StreamingUsageError, match="initial_state must be a grouped DataFrame"):
        stateful_processor_foreach_batch(
            Activity(), time_mode="ProcessingTime", sink=print, initial_state=object(), **common
        )


def _inbox(tmp: Path, name: str) -> Path:
    inbox = tmp / f"{name}-in"
    if not inbox.exists():
        write_batches(inbox)
    return inbox
