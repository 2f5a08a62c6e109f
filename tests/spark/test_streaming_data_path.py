"""The data path of stateful_foreach_batch on the 3-worker cluster: a batch's rows never reach
the driver (a spy on the DataFrame API counts every row the driver's Python receives while the
handler runs, the sink aside: one result row per task; the former driver path receives every
row, so the spy can tell), and an executor killed in the middle of a batch changes neither the
output nor the state."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from affinity_pipeline.cluster import StandaloneCluster
from affinity_pipeline.streaming import (
    OUTPUT_SCHEMA,
    STATE_SCHEMA,
    ClickFiles,
    count_clicks,
    reference_clicks,
)
from pyspark import cloudpickle
from spark_app import SparkApp
from stalls import kill_when_marked, stalls_once
from test_stateful_streaming import FileQuery, Sink, job_config

from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import StatefulQuery, stateful_foreach_batch

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TASKS = 8


class DriverRowSpy:
    """Counts the rows the driver's Python receives from Spark (``collect``, ``toPandas``,
    ``toLocalIterator``, ``take``) and the rows it sends (``createDataFrame``) while ``armed``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from pyspark.sql.classic.dataframe import DataFrame
        from pyspark.sql.session import SparkSession

        self.armed = False
        self.received: list[int] = []
        self.sent: list[int] = []
        for name in ("collect", "toPandas", "take", "tail"):
            monkeypatch.setattr(DataFrame, name, self._counting(getattr(DataFrame, name)))
        iterate = DataFrame.toLocalIterator
        monkeypatch.setattr(DataFrame, "toLocalIterator", self._counting_iterator(iterate))
        create = SparkSession.createDataFrame
        monkeypatch.setattr(SparkSession, "createDataFrame", self._counting_create(create))

    def _counting(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(frame: Any, *args: Any, **kwargs: Any) -> Any:
            result = method(frame, *args, **kwargs)
            if self.armed:
                self.received.append(len(result))
            return result

        return counted

    def _counting_iterator(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(frame: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            for row in method(frame, *args, **kwargs):
                if self.armed:
                    self.received.append(1)
                yield row

        return counted

    def _counting_create(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(session: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
            if self.armed:
                self.sent.append(len(data) if hasattr(data, "__len__") else -1)
            return method(session, data, *args, **kwargs)

        return counted

    def handler(self, handler: StatefulQuery) -> StatefulQuery:
        """``handler``, armed while Spark calls it."""
        spy = self

        class Armed(StatefulQuery):
            def __init__(self) -> None:
                self.__dict__ = handler.__dict__

            def __call__(self, df: Any, batch_id: int) -> None:
                spy.armed = True
                try:
                    handler(df, batch_id)
                finally:
                    spy.armed = False

        return Armed()

    def sink(self, sink: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
        def unarmed(df: Any, batch_id: int) -> None:
            was, self.armed = self.armed, False
            try:
                sink(df, batch_id)
            finally:
                self.armed = was

        return unarmed


@pytest.fixture
def handlers() -> Iterator[list[StatefulQuery]]:
    made: list[StatefulQuery] = []
    yield made
    for handler in made:
        handler.close()


@pytest.mark.parametrize("data_path", ["pinned-shuffle", "driver"])
def test_a_batch_never_reaches_the_driver(
    app: SparkApp,
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
    handlers: list[StatefulQuery],
    monkeypatch: pytest.MonkeyPatch,
    data_path: str,
) -> None:
    spy = DriverRowSpy(monkeypatch)
    config = job_config(zk_server, tmp_path, f"clicks-spy-{data_path}")
    files = ClickFiles(tmp_path / "in", users=300, rows=3000)
    sink = Sink()
    handler = stateful_foreach_batch(
        count_clicks,
        key_columns=["user"],
        output_schema=OUTPUT_SCHEMA,
        state_schema=STATE_SCHEMA,
        sink=spy.sink(sink),
        config=config,
        data_path=data_path,
    )
    handlers.append(handler)
    query = FileQuery(app, files, spy.handler(handler), tmp_path / "checkpoint")
    query.start()
    try:
        reports = query.run(range(3))
    finally:
        query.stop()
    assert sink.batches == reference_clicks(files, range(3))
    assert [r.rows_in for r in reports] == [3000, 3000, 3000]
    if data_path == "driver":  # the spy sees the former path's rows: it can tell
        assert sum(spy.received) >= 3 * 3000 and spy.sent
        return
    assert spy.sent == []  # the output never came from the driver
    assert len(spy.received) == 3 and all(n == TASKS for n in spy.received), spy.received


def test_an_executor_killed_during_a_batch(
    app: SparkApp,
    spark_cluster: StandaloneCluster,
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
    handlers: list[StatefulQuery],
) -> None:
    config = job_config(zk_server, tmp_path, "clicks-midbatch")
    files = ClickFiles(tmp_path / "in", users=120, rows=600)
    armed, marker = tmp_path / "armed", tmp_path / "stalled-executor"
    sink = Sink()
    handler = stateful_foreach_batch(
        stalls_once(count_clicks, str(armed), str(marker)),
        key_columns=["user"],
        output_schema=OUTPUT_SCHEMA,
        state_schema=STATE_SCHEMA,
        sink=sink,
        config=config,
    )
    handlers.append(handler)
    query = FileQuery(app, files, handler, tmp_path / "checkpoint")
    query.start()
    try:
        query.run(range(2))
        armed.touch()
        killed: list[str] = []
        watcher = kill_when_marked(marker, spark_cluster, app.app_id, killed)
        during = query.run(range(2, 3))
        watcher.join(5)
        armed.unlink()
        assert killed, "no task stalled in batch 2"
        assert killed[0] not in {e.executor_id for e in app.executors()}
        app.ready(exclude=tuple(killed))
        after = query.run(range(3, 5))
    finally:
        query.stop()
    assert [r.batch for r in [*during, *after]] == [2, 3, 4]
    # the output of the batch the kill interrupted, and of the batches after it (the state
    # they start from), equal the single-process reference
    assert sink.batches == reference_clicks(files, range(5))


def expires(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """Counts rows per key; a key idle for 500 ms times out and is reported with -1."""
    import pandas as pd

    if state.hasTimedOut:
        state.remove()
        yield pd.DataFrame({"k": [key[0]], "n": [-1]})
        return
    n = (state.get[0] if state.exists else 0) + sum(len(pdf) for pdf in pdfs)
    state.update((n,))
    state.setTimeoutDuration(500)
    yield pd.DataFrame({"k": [key[0]], "n": [n]})


def test_keys_time_out_in_tasks_without_rows(
    app: SparkApp, zk_server: EmbeddedZooKeeper, tmp_path: Path, handlers: list[StatefulQuery]
) -> None:
    """Processing-time timeouts through the pinned stage: a key idle past its timeout is called
    with ``hasTimedOut`` in the next batch, also when its task got no rows at all."""
    assert app.session is not None
    outputs: dict[int, list[tuple[Any, ...]]] = {}
    handler = stateful_foreach_batch(
        expires,
        key_columns=["k"],
        output_schema="k string, n long",
        state_schema="n long",
        sink=lambda df, b: outputs.__setitem__(b, sorted(tuple(r) for r in df.collect())),
        config=job_config(zk_server, tmp_path, "timeouts"),
        timeout="ProcessingTimeTimeout",
    )
    handlers.append(handler)
    rows = [("a",), ("b",), ("a",)]
    handler(app.session.createDataFrame(rows, "k string"), 0)
    time.sleep(1.0)
    handler(app.session.createDataFrame([("b",)], "k string"), 1)
    time.sleep(1.0)
    handler(app.session.createDataFrame([], "k string"), 2)
    assert outputs == {0: [("a", 2), ("b", 1)], 1: [("a", -1), ("b", 2)], 2: [("b", -1)]}
    assert [r.timed_out for r in handler.reports] == [0, 1, 1]
    assert handler.reports[2].rows_in == 0 and handler.reports[2].tasks == TASKS
