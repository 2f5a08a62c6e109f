"""A ``StatefulProcessor`` with an initial state (``handleInitialState``), run both ways on the
3-worker cluster: pyspark's ``transformWithStateInPandas(..., initialState=df.groupBy(...))``
and ``stateful_processor_foreach_batch(..., initial_state=...)``, outputs compared batch by
batch. affinity's run goes through an executor kill and an application restart: the initial
state is applied once (a key seeded by it first seen after the restart carries it once)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from affinity_pipeline.cluster import StandaloneCluster
from pyspark import cloudpickle
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from spark_app import SparkApp
from test_stateful_processor import (
    BATCHES,
    OUTPUT,
    Outputs,
    config_of,
    run_affinity,
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

#: Per key: its seed and kind; u1 has two rows, u8 never has input.
INITIAL = [
    ("u1", 10, "a"),
    ("u1", 5, "b"),
    ("u2", 100, "c"),
    ("u3", 7, "d"),
    ("u6", 1000, "e"),
    ("u8", 3, "f"),
]
INITIAL_SCHEMA = "user string, seed long, kind string"

#: The users with input per batch: u0 never seeded; u1 and u2 seeded with input in batch 0;
#: u3 seeded, first input in batch 1; u6 seeded, first input after the restart (batch 4).
USERS = [["u0", "u1", "u1", "u2"], ["u0", "u3"], ["u1", "u4"], ["u2", "u5"], ["u6"], ["u1", "u6"]]


class Seeded(StatefulProcessor):
    """A total and the kinds seen per user, seeded by the initial state (with a count of
    handleInitialState calls and a timer registered there)."""

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.total = handle.getValueState("total", "n long")
        self.kinds = handle.getListState("kinds", "kind string")
        self.seeds = handle.getValueState("seeds", "n long")

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        total = (self.total.get() or (0,))[0] + int(initialState["seed"].sum())
        self.total.update((total,))
        self.kinds.appendList([(str(k),) for k in initialState["kind"]])
        self.seeds.update(((self.seeds.get() or (0,))[0] + 1,))
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + HOUR_MS)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
        total = (self.total.get() or (0,))[0]
        for pdf in rows:
            for kind in pdf["kind"]:
                total += 1
                self.kinds.appendValue((str(kind),))
        self.total.update((total,))
        kinds = ",".join(sorted(k for (k,) in self.kinds.get()))
        seeds = (self.seeds.get() or (0,))[0]
        timers = len(list(self.handle.listTimers()))
        yield pd.DataFrame({"user": [key[0]], "out": [f"{total}|{kinds}|{seeds}|{timers}"]})

    def close(self) -> None:
        pass


def rows_of(b: int) -> list[dict[str, str]]:
    return [{"user": u, "kind": f"k{b}{i}"} for i, u in enumerate(USERS[b])]


def initial_state(session: Any) -> Any:
    return session.createDataFrame(INITIAL, INITIAL_SCHEMA).groupBy("user")


def seeded_handler(
    session: Any,
    outputs: Outputs,
    config: JobConfig,
    processor: type[StatefulProcessor] | None = None,
    api: str = "transformWithStateInPandas",
    initial: Callable[[Any], Any] | None = None,
) -> Any:
    """affinity's handler of a new ``processor`` (default :class:`Seeded`) over ``api``; the
    initial state (``initial``, default :func:`initial_state`) made in the (possibly restarted)
    application."""
    return stateful_processor_foreach_batch(
        (processor or Seeded)(),
        key_columns=["user"],
        output_schema=OUTPUT,
        time_mode="ProcessingTime",
        sink=outputs,
        config=config,
        initial_state=(initial or initial_state)(session),
        api=api,
    )


def test_an_initial_state_is_applied_once_as_spark_applies_it(
    app: SparkApp, spark_cluster: StandaloneCluster, zk_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    source = tmp_path / "spark-in"
    write_batches(source, rows_of)

    def spark_operator(frame: Any) -> Any:
        return frame.groupBy("user").transformWithStateInPandas(
            Seeded(), OUTPUT, "Update", "ProcessingTime", initialState=initial_state(app.session)
        )

    expected = spark_reference(app, source, tmp_path / "spark-checkpoint", spark_operator)
    assert sorted(expected) == list(range(BATCHES))
    assert expected[0] == [("u0", "1|k00|0|0"), ("u1", "17|a,b,k01,k02|1|1"),
                           ("u2", "101|c,k03|1|1")]  # fmt: skip
    assert expected[4] == [("u6", "1001|e,k40|1|1")]

    config = config_of(zk_server, tmp_path, root="/affinity-initial-state")
    outputs = through_failures(app, spark_cluster, tmp_path, source, config, seeded_handler)
    for b in range(BATCHES):
        assert outputs.batches[b] == expected[b], f"batch {b}"


#: Spark's output for batches 0 and 1 (the test above compares all of them with Spark's run).
FIRST = [("u0", "1|k00|0|0"), ("u1", "17|a,b,k01,k02|1|1"), ("u2", "101|c,k03|1|1")]
SECOND = [("u0", "2|k00,k10|0|0"), ("u3", "8|d,k11|1|1")]


def test_a_committed_first_batch_run_again_holds_the_initial_state_once(
    app: SparkApp, zk_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    write_batches(source, rows_of)
    inbox, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    inbox.mkdir()
    config = config_of(zk_server, tmp_path, root="/affinity-initial-state-again")
    outputs = Outputs()
    (inbox / "0000.json").write_text((source / "0000.json").read_text())
    run_affinity(app, inbox, checkpoint, config, 0, outputs, seeded_handler)
    assert outputs.batches[0] == FIRST
    for name in ("0", ".0.crc"):  # Spark's commit of batch 0: Spark runs it again
        (checkpoint / "commits" / name).unlink(missing_ok=name.startswith("."))
    del outputs.batches[0]
    run_affinity(app, inbox, checkpoint, config, 0, outputs, seeded_handler)
    assert outputs.batches[0] == FIRST  # not seeded twice, nor left unseeded
    (inbox / "0001.json").write_text((source / "0001.json").read_text())
    run_affinity(app, inbox, checkpoint, config, 1, outputs, seeded_handler)
    assert outputs.batches[1] == SECOND


def test_an_initial_state_affinity_cannot_serve_is_refused_when_the_handler_is_made(
    app: SparkApp, zk_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    session = app.session
    assert session is not None
    config = config_of(zk_server, tmp_path, root="/affinity-initial-state-refused")
    common: dict[str, Any] = {
        "key_columns": ["user"],
        "output_schema": OUTPUT,
        "config": config,
        "sink": print,
    }
    frame = session.createDataFrame(INITIAL, INITIAL_SCHEMA)
    refused = {
        "initial_state must be a grouped DataFrame": frame,
        r"grouped by \['user', 'seed'\] but the query's key is \['user'\]": frame.groupBy(
            "user", "seed"
        ),
        "must be grouped by plain columns": frame.groupBy((frame.seed + 1).alias("x")),
        "must be a batch DataFrame": session.readStream.format("rate").load().groupBy("value"),
    }
    for message, initial in refused.items():
        with pytest.raises(StreamingUsageError, match=message):
            stateful_processor_foreach_batch(Seeded(), initial_state=initial, **common)
    with pytest.raises(
        StreamingUsageError, match='initial_state= needs data_path="pinned-shuffle"'
    ):
        stateful_processor_foreach_batch(
            Seeded(), initial_state=frame.groupBy("user"), data_path="driver", **common
        )
