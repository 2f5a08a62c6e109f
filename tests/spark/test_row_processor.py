"""pyspark's Row-based ``transformWithState`` (a ``StatefulProcessor`` over ``Row`` objects)
run both ways on the 3-worker cluster: by Spark, and by ``stateful_processor_foreach_batch(...,
api="transformWithState")``, outputs compared batch by batch, with an initial state (one
``handleInitialState`` call per Row) and affinity's run through an executor kill and an
application restart."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from affinity_pipeline.cluster import StandaloneCluster
from pyspark import cloudpickle
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from spark_app import SparkApp
from test_processor_initial_state import INITIAL, INITIAL_SCHEMA, rows_of, seeded_handler
from test_stateful_processor import (
    BATCHES,
    OUTPUT,
    Outputs,
    config_of,
    spark_reference,
    through_failures,
    write_batches,
)

from coordinator.config import JobConfig
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import StreamingUsageError, stateful_processor_foreach_batch

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])

HOUR_MS = 3_600_000


class RowSeeded(StatefulProcessor):
    """Per user: a total and the kinds seen (the initial state's one Row at a time, with a
    count of handleInitialState calls), one processing-time timer registered with the input."""

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.total = handle.getValueState("total", "n long")
        self.kinds = handle.getListState("kinds", "kind string")
        self.seeds = handle.getValueState("seeds", "n long")

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        seed = initialState.seed  # None where the initial state has a null (an int, else)
        if seed is not None and not isinstance(seed, int):
            raise TypeError(f"seed {seed!r} is a {type(seed).__name__}, not an int or None")
        self.total.update(((self.total.get() or (0,))[0] + (seed or 0),))
        self.kinds.appendValue((str(initialState.kind) + ("?" if seed is None else ""),))
        self.seeds.update(((self.seeds.get() or (0,))[0] + 1,))

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Row]:
        total = (self.total.get() or (0,))[0]
        for row in rows:
            total += 1
            self.kinds.appendValue((str(row.kind),))
        self.total.update((total,))
        if not list(self.handle.listTimers()):
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + HOUR_MS)
        kinds = ",".join(sorted(k for (k,) in self.kinds.get()))
        seeds = (self.seeds.get() or (0,))[0]
        timers = len(list(self.handle.listTimers()))
        yield Row(user=key[0], out=f"{total}|{kinds}|{seeds}|{timers}")

    def close(self) -> None:
        pass


#: The initial state, and a null seed for u4 (first input in batch 2): Spark's Rows give None for
#: a null integer, as affinity's must (not pandas' NaN).
ROW_INITIAL = [*INITIAL, ("u4", None, "n")]


def row_initial_state(session: Any) -> Any:
    return session.createDataFrame(ROW_INITIAL, INITIAL_SCHEMA).groupBy("user")


def row_handler(session: Any, outputs: Outputs, config: JobConfig) -> Any:
    return seeded_handler(
        session, outputs, config, RowSeeded, api="transformWithState", initial=row_initial_state
    )


def test_a_row_processor_runs_as_spark_runs_it(
    app: SparkApp, spark_cluster: StandaloneCluster, zk_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    source = tmp_path / "spark-in"
    write_batches(source, rows_of)

    def spark_operator(frame: Any) -> Any:
        return frame.groupBy("user").transformWithState(
            RowSeeded(),
            OUTPUT,
            "Update",
            "ProcessingTime",
            initialState=row_initial_state(app.session),
        )

    expected = spark_reference(app, source, tmp_path / "spark-checkpoint", spark_operator)
    assert sorted(expected) == list(range(BATCHES))
    assert expected[0] == [("u0", "1|k00|0|1"), ("u1", "17|a,b,k01,k02|2|1"),
                           ("u2", "101|c,k03|1|1")]  # fmt: skip
    assert dict(expected[2])["u4"] == "1|k21,n?|1|1"  # its null seed came as None

    config = config_of(zk_server, tmp_path, root="/affinity-row-processor")
    outputs = through_failures(app, spark_cluster, tmp_path, source, config, row_handler)
    for b in range(BATCHES):
        assert outputs.batches[b] == expected[b], f"batch {b}"


def test_an_unknown_api_is_refused(zk_server: EmbeddedZooKeeper, tmp_path: Path) -> None:
    config = config_of(zk_server, tmp_path, root="/affinity-row-processor-refused")
    with pytest.raises(StreamingUsageError, match="api must be one of"):
        stateful_processor_foreach_batch(
            RowSeeded(),
            key_columns=["user"],
            output_schema=OUTPUT,
            sink=print,
            config=config,
            api="mapGroupsWithState",
        )
