"""The smoke test of an older supported Spark: one pinned stateful query through an executor
kill. ``make test`` runs it, with the README's quick start, in ``.venv-spark35`` (pyspark 3.5,
the oldest ``pyproject.toml`` allows: ``make spark35``); on Spark 4 the main suite's
``test_stateful_streaming.py`` runs the same query through more (a rolling restart, an
application restart, a crash mid-batch), so it is skipped there.

The query's output equals the single-process reference, batch by batch; every task runs on the
executor its job model names (the pinned shuffle: affinity's jar compiled against this pyspark's
Scala), before and after the kill; the tasks the kill did not touch stay warm.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from affinity_pipeline.cluster import StandaloneCluster
from affinity_pipeline.streaming import (
    OUTPUT_SCHEMA,
    STATE_SCHEMA,
    ClickFiles,
    count_clicks,
    reference_clicks,
)
from spark_app import SparkApp
from test_stateful_streaming import TASKS, FileQuery, Sink, job_config, replace_executor

from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import stateful_foreach_batch
from coordinator.streaming.query import StatefulQuery

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        int(pyspark.__version__.split(".")[0]) >= 4,
        reason="Spark 4: test_stateful_streaming.py covers it (make spark35 runs this on 3.5)",
    ),
]


@pytest.fixture
def handlers() -> Iterator[list[StatefulQuery]]:
    made: list[StatefulQuery] = []
    yield made
    for handler in made:
        handler.close()


def test_a_pinned_stateful_query_through_an_executor_kill(
    app: SparkApp,
    spark_cluster: StandaloneCluster,
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
    handlers: list[StatefulQuery],
) -> None:
    files = ClickFiles(tmp_path / "in")
    sink = Sink()
    handler = stateful_foreach_batch(
        count_clicks,
        key_columns=["user"],
        output_schema=OUTPUT_SCHEMA,
        state_schema=STATE_SCHEMA,
        sink=sink,
        config=job_config(zk_server, tmp_path, "clicks-smoke"),
    )
    handlers.append(handler)
    query = FileQuery(app, files, handler, tmp_path / "spark-checkpoint")
    query.start()
    steady = query.run(range(0, 2))
    replace_executor(app, spark_cluster, app.executors()[0].executor_id)
    after = query.run(range(2, 4))
    query.stop()

    assert sink.batches == reference_clicks(files, range(4))
    assert all(r.pinned_ok == r.pinned_total == TASKS for r in [*steady, *after]), after
    assert steady[1].warm == TASKS  # the second batch finds every task's state in place
    assert after[-1].warm == TASKS  # and so does the last, after the moved tasks restored
