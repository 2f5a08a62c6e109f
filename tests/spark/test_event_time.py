"""Event time against Spark on the 3-worker cluster: an event-time session window, run by
Spark's own operators (``applyInPandasWithState`` with ``EventTimeTimeout``,
``transformWithStateInPandas`` in time mode ``EventTime``, both after ``withWatermark``) and by
affinity (``event_time=``) over the same files, one batch per file. Outputs (each row carries the
batch's watermark) and late rows dropped are compared batch by batch; affinity's run goes
through an executor kill, an application restart (the watermark comes back from the commit
record), a batch Spark runs again after the sink failed, and a committed batch Spark runs again
(its commit removed from Spark's checkpoint)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from affinity_pipeline.cluster import StandaloneCluster
from pyspark import cloudpickle
from pyspark.sql.streaming.state import GroupStateTimeout
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from spark_app import SparkApp

from coordinator.config import JobConfig, load_config
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import stateful_foreach_batch, stateful_processor_foreach_batch

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])

OUTPUT = "user string, kind string, start long, end long, n long, wm long"
STATE = "start long, end long, n long"
GAP_MS = 5000  # a session closes 5 s (event time) after its last event
DELAY = "10 seconds"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
# (user, event time in seconds after T0) per batch. Watermarks (s after T0): wm(1) = -6,
# wm(2) = 2, wm(3) = 4, wm(4) = 10, wm(5) = 20, wm(6) = 21, wm(7) = 30; a row of batch N is late
# at or before wm(N-1): u3@-7 in 2, u2@2 in 3 (at it), u1@10 in 5 (at it). u5@1 in 2 is behind
# wm(2) but not late; u5's timeout and timer land on wm(4) exactly (10), u2's on wm(7) (30).
BATCHES = [
    [("u1", 0), ("u1", 2), ("u2", 1), ("u3", 4)],
    [("u1", 6), ("u2", 3), ("u4", 12)],
    [("u3", -7), ("u5", 1), ("u4", 14)],
    [("u2", 2), ("u1", 9), ("u6", 20)],
    [("u7", 30), ("u5", 5)],
    [("u1", 10), ("u8", 31)],
    [("u6", 21), ("u9", 40)],
    [("u9", 41), ("u2", 25)],
]
LATE = {2: 1, 3: 1, 5: 1}


def row(key: Any, kind: str, session: tuple[int, int, int], wm: int) -> pd.DataFrame:
    start, end, n = session
    return pd.DataFrame(
        {"user": [key[0]], "kind": [kind], "start": [start], "end": [end], "n": [n], "wm": [wm]}
    )


def merged(old: Any, pdfs: Any) -> tuple[int, int, int]:
    start, end, n = old if old else (None, None, 0)
    for pdf in pdfs:
        lo, hi = int(pdf["t"].min()), int(pdf["t"].max())
        start = lo if start is None else min(start, lo)
        end = hi if end is None else max(end, hi)
        n += len(pdf)
    return int(start), int(end), n  # type: ignore[arg-type]


def sessions(key: Any, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    """An applyInPandasWithState session window: open sessions reported, closed by an
    event-time timeout GAP_MS after the last event (never behind the watermark)."""
    wm = state.getCurrentWatermarkMs()
    if state.hasTimedOut:
        session = state.get
        state.remove()
        yield row(key, "closed", session, wm)
        return
    session = merged(state.getOption, pdfs)
    state.update(session)
    state.setTimeoutTimestamp(max(session[1] + GAP_MS, wm))
    yield row(key, "open", session, wm)


class Sessions(StatefulProcessor):
    """The same window as a StatefulProcessor: a ValueState and an event-time timer."""

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.session = handle.getValueState("session", STATE)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
        old = self.session.get()
        session = merged(old, rows)
        if old:
            self.handle.deleteTimer(old[1] + GAP_MS)
        self.session.update(session)
        self.handle.registerTimer(session[1] + GAP_MS)
        yield row(key, "open", session, timerValues.getCurrentWatermarkInMs())

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        session = self.session.get()
        self.session.clear()
        yield row(key, "closed", session, timerValues.getCurrentWatermarkInMs())

    def close(self) -> None:
        pass


def write_batch(inbox: Path, b: int) -> None:
    inbox.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps({"user": u, "t": T0 + s * 1000}) + "\n" for u, s in BATCHES[b])
    path = inbox / f"{b:04d}.json"
    path.write_text(lines)
    stamp = time.time() - 100 + b
    os.utime(path, (stamp, stamp))


def stream(app: SparkApp, inbox: Path) -> Any:
    assert app.session is not None
    source = app.session.readStream.schema("user string, t long").option("maxFilesPerTrigger", 1)
    return source.json(str(inbox)).selectExpr("user", "t", "timestamp_millis(t) AS ts")


class Outputs:
    """Each call's rows by batch; ``calls`` keeps every call (a batch run again, again)."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.batches: dict[int, list[tuple[Any, ...]]] = {}
        self.calls: list[tuple[int, list[tuple[Any, ...]]]] = []
        self.fail_at = fail_at

    def __call__(self, df: Any, batch: int) -> None:
        rows = sorted(tuple(r) for r in df.collect())
        self.calls.append((int(batch), rows))
        if self.fail_at == batch:
            self.fail_at = None
            raise RuntimeError(f"the sink failed in batch {batch}")
        self.batches[int(batch)] = rows


SPARK_CONF = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    # affinity runs no batch without data (docs/spark.md): Spark's are turned off to compare
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
}


def spark_reference(app: SparkApp, tmp: Path, way: str) -> tuple[dict[int, Any], dict[int, int]]:
    """Spark's own operator over all the files: outputs and rows dropped by the watermark."""
    session = app.session
    assert session is not None
    inbox = tmp / f"spark-{way}-in"
    for b in range(len(BATCHES)):
        write_batch(inbox, b)
    frame = stream(app, inbox).withWatermark("ts", DELAY).groupBy("user")
    if way == "function":
        out = frame.applyInPandasWithState(
            sessions, OUTPUT, STATE, "update", GroupStateTimeout.EventTimeTimeout
        )
    else:
        out = frame.transformWithStateInPandas(Sessions(), OUTPUT, "Update", "EventTime")
    outputs = Outputs()
    for name, value in SPARK_CONF.items():
        session.conf.set(name, value)
    try:
        writer = out.writeStream.outputMode("update").foreachBatch(outputs)
        query = writer.option("checkpointLocation", str(tmp / f"spark-{way}-cp")).start()
        query.processAllAvailable()
        progress = [json.loads(p.json) for p in query.recentProgress]
        query.stop()
    finally:
        for name in SPARK_CONF:
            session.conf.unset(name)
    dropped = {
        int(p["batchId"]): sum(op["numRowsDroppedByWatermark"] for op in p["stateOperators"])
        for p in progress
    }
    return outputs.batches, dropped


def config_of(zk: EmbeddedZooKeeper, tmp: Path, name: str) -> JobConfig:
    return load_config(
        data={
            "job": {"name": name, "id": "1", "run_id": "r1"},
            "zookeeper": {"connect": zk.hosts, "root": "/affinity-event-time"},
            "inputs": [{"system": "spark", "stream": "sessions", "partitions": 3}],
            "grouper": {"name": "host-affinity"},
            "coordinator": {"debounce_ms": 100, "debounce_max_ms": 1000},
            "state": {
                "checkpoint_dir": str(tmp / f"{name}-durable"),
                "local_dir": str(tmp / f"{name}-local"),
                "max_parallelism": 48,
            },
        },
        environ={},
    )


class AffinityRun:
    """affinity's query over the files, started anew for each batch (as a job restarted by its
    scheduler would be), through the failures the module docstring names."""

    def __init__(self, app: SparkApp, tmp: Path, config: JobConfig, way: str) -> None:
        self.app, self.config, self.way = app, config, way
        self.inbox = tmp / f"affinity-{way}-in"
        self.checkpoint = tmp / f"affinity-{way}-cp"
        self.outputs = Outputs()
        self.late: dict[int, int] = {}
        self.watermarks: dict[int, int] = {}

    def handler(self) -> Any:
        common: dict[str, Any] = {
            "key_columns": ["user"],
            "output_schema": OUTPUT,
            "sink": self.outputs,
            "config": self.config,
            "event_time": ("ts", DELAY),
        }
        if self.way == "function":
            return stateful_foreach_batch(
                sessions, state_schema=STATE, timeout="EventTimeTimeout", **common
            )
        return stateful_processor_foreach_batch(Sessions(), time_mode="EventTime", **common)

    def run(self, upto: int) -> None:
        """Run until batch ``upto`` is in the outputs (a failure is raised)."""
        handler = self.handler()
        writer = stream(self.app, self.inbox).writeStream.foreachBatch(handler)
        query = writer.option("checkpointLocation", str(self.checkpoint)).start()
        try:
            while max(self.outputs.batches, default=-1) < upto:
                query.processAllAvailable()
        finally:
            query.stop()
            handler.close()
            for report in handler.reports:
                self.late[report.batch] = report.late_rows
                self.watermarks[report.batch] = report.watermark_ms


def run_affinity(
    app: SparkApp, cluster: StandaloneCluster, run: AffinityRun
) -> list[tuple[int, list[tuple[Any, ...]]]]:
    """Every batch, with an executor killed before batch 2, the application restarted before
    batch 4, the sink failing once in batch 5 (Spark runs it again) and, after the last batch,
    that batch's Spark commit removed (Spark runs the committed batch again); the calls of the
    batches run twice."""
    last = len(BATCHES) - 1
    for b in range(len(BATCHES)):
        write_batch(run.inbox, b)
        if b == 2:
            cluster.kill_executor(app.app_id, app.executors()[0].executor_id)
        if b == 4:
            app.restart()
            app.ready()
        if b == 5:
            run.outputs.fail_at = 5
            with pytest.raises(Exception, match="the sink failed in batch 5"):
                run.run(b)
        run.run(b)
    for name in (str(last), f".{last}.crc"):  # the commit and its checksum
        (run.checkpoint / "commits" / name).unlink(missing_ok=name.startswith("."))
    del run.outputs.batches[last]
    run.run(last)
    return [call for call in run.outputs.calls if call[0] in (5, last)]


@pytest.mark.parametrize("way", ["function", "processor"])
def test_an_event_time_session_window_runs_as_spark_runs_it(
    way: str,
    app: SparkApp,
    spark_cluster: StandaloneCluster,
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    expected, dropped = spark_reference(app, tmp_path, way)
    assert sorted(expected) == list(range(len(BATCHES)))
    assert {b: n for b, n in dropped.items() if n} == LATE  # the data has the late rows it says

    run = AffinityRun(app, tmp_path, config_of(zk_server, tmp_path, f"sessions-{way}"), way)
    again = run_affinity(app, spark_cluster, run)
    for b in range(len(BATCHES)):
        assert run.outputs.batches[b] == expected[b], f"batch {b}"
    assert {b: n for b, n in run.late.items() if n} == LATE
    wm = [T0 + s * 1000 for s in (-6, 2, 4, 10, 20, 21, 30)]
    assert [run.watermarks[b] for b in range(len(BATCHES))] == [0, *wm]
    assert [b for b, _ in again] == [5, 5, 7, 7]  # each run twice, the same rows each time
    assert again[0][1] == again[1][1] == expected[5] and again[2][1] == again[3][1] == expected[7]
    closed = sum(1 for rows in expected.values() for r in rows if r[1] == "closed")
    assert closed >= 6, closed  # sessions closed by timeouts / timers, compared above
