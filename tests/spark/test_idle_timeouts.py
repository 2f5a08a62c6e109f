"""Processing-time timeouts on an idle stream (docs/spark.md, "Timeouts on an idle stream").

Two queries run side by side on the 3-worker cluster, each given one click of user ``u1`` and
then nothing: the key's timeout (2 s) expires. With ``with_heartbeat`` Spark keeps running
batches and the function reports the key timed out; without it Spark runs no batch after the
first, so the key never times out. The function never sees a heartbeat row (it would fail the
batch)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle
from spark_app import SparkApp

from coordinator.config import load_config
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import stateful_foreach_batch
from coordinator.streaming.heartbeat import HEARTBEAT_COLUMN, drop_heartbeats, with_heartbeat
from coordinator.streaming.query import StatefulQuery

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMEOUT_MS = 2000


def idle_users(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """Reports a user when seen and when its timeout fires (then forgets it)."""
    import pandas as pd

    if state.hasTimedOut:
        state.remove()
        yield pd.DataFrame({"user": [key[0]], "event": ["timed out"]})
        return
    rows = 0
    for pdf in pdfs:
        if pdf["user"].isna().any():
            raise AssertionError("a heartbeat row reached the function")
        rows += len(pdf)
    state.update((rows,))
    state.setTimeoutDuration(TIMEOUT_MS)
    yield pd.DataFrame({"user": [key[0]], "event": ["seen"]})


class Events:
    def __init__(self) -> None:
        self.events: list[tuple[int, str, str]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        self.events += [(batch_id, r["user"], r["event"]) for r in df.collect()]

    def timed_out(self) -> bool:
        return any(event == "timed out" for _, _, event in self.events)


def start(
    app: SparkApp, zk: EmbeddedZooKeeper, tmp: Path, name: str, heartbeat: bool
) -> tuple[Any, StatefulQuery, Events]:
    assert app.session is not None
    config = load_config(
        data={
            "job": {"name": name},
            "zookeeper": {"connect": zk.hosts},
            "inputs": [{"system": "spark", "stream": "clicks", "partitions": 1}],
            "ssp_grouper": {"options": {"elasticity_factor": 2}},
            "coordinator": {"debounce_ms": 100, "debounce_max_ms": 1000},
            "state": {
                "checkpoint_dir": str(tmp / name / "durable"),
                "local_dir": str(tmp / name / "local"),
                "max_parallelism": 64,
            },
            "logging": {"level": "warning"},
        },
        environ={},
    )
    events = Events()
    handler = stateful_foreach_batch(
        idle_users,
        key_columns=["user"],
        output_schema="user string, event string",
        state_schema="rows long",
        sink=events,
        config=config,
        timeout="ProcessingTimeTimeout",
    )
    inbox = tmp / name / "in"
    inbox.mkdir(parents=True)
    (inbox / "click.json").write_text(json.dumps({"user": "u1"}) + "\n")
    stream = app.session.readStream.schema("user string").json(str(inbox))
    if heartbeat:
        stream = with_heartbeat(stream)
    query = (
        stream.writeStream.foreachBatch(handler)
        .trigger(processingTime="2 seconds")
        .option("checkpointLocation", str(tmp / name / "checkpoint"))
        .start()
    )
    return query, handler, events


def test_a_key_times_out_on_an_idle_stream_only_with_the_heartbeat(
    app: SparkApp, zk_private_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    runs = [
        start(app, zk_private_server, tmp_path, "beating", heartbeat=True),
        start(app, zk_private_server, tmp_path, "idle", heartbeat=False),
    ]
    (beating, beating_handler, beating_events), (idle, idle_handler, idle_events) = runs
    try:
        deadline = time.monotonic() + 240
        while not beating_events.timed_out() and time.monotonic() < deadline:
            assert beating.exception() is None and idle.exception() is None
            time.sleep(0.5)
        time.sleep(2 * TIMEOUT_MS / 1000)  # the idle query: two more triggers past the timeout
    finally:
        for query, handler, _ in runs:
            query.stop()
            handler.close()
    assert beating_events.timed_out(), beating_events.events
    assert {(u, e) for _, u, e in beating_events.events} == {("u1", "seen"), ("u1", "timed out")}
    assert len(beating_handler.reports) >= 2  # batches without input ran
    assert sum(r.rows_in for r in beating_handler.reports) == 1  # heartbeats are not input

    assert idle_events.events == [(0, "u1", "seen")]  # the key never timed out
    assert [r.batch for r in idle_handler.reports] == [0]  # no batch after the input's


def test_drop_heartbeats_leaves_the_streams_own_rows_and_columns(app: SparkApp) -> None:
    assert app.session is not None
    frame = app.session.createDataFrame(
        [("u1", 1, False), (None, None, True), ("u2", 2, False)],
        f"user string, n long, {HEARTBEAT_COLUMN} boolean",
    )
    kept = drop_heartbeats(frame)
    assert kept.columns == ["user", "n"]
    assert sorted(tuple(r) for r in kept.collect()) == [("u1", 1), ("u2", 2)]
    plain = frame.drop(HEARTBEAT_COLUMN)
    assert drop_heartbeats(plain) is plain
    with pytest.raises(ValueError, match="streaming DataFrame"):
        with_heartbeat(plain)
