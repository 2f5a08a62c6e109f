"""Standby replicas in stateful_foreach_batch on the 3-worker cluster: with ``standby_replicas:
1`` every task's state also sits on a second host, brought to each commit by the standby stage;
when a worker host is lost, its tasks fail over to the hosts of their copies and open their
state there (warm, nothing restored); output equals the single-process reference."""

from __future__ import annotations

import sys
import time
from pathlib import Path

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
from test_stateful_streaming import FileQuery, Sink, job_config

from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import stateful_foreach_batch
from coordinator.streaming.query import StatefulQuery

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])

LOST = "127.0.0.4"
#: Two tasks per executor: the grouper splits each executor's standby copies evenly over the
#: others, so the lost executor's tasks fit at their copies within balance (with 8 tasks on 3
#: executors, a survivor could hold one task more than its share and leave one lost task cold).
TASKS = 6  # 3 input partitions x elasticity factor 2


def wait_gone(app: SparkApp, host: str) -> None:
    """Until Spark no longer lists an executor on ``host``."""
    deadline = time.monotonic() + 120
    while any(e.host == host for e in app.executors()):
        assert time.monotonic() < deadline, f"an executor on {host} is still listed"
        time.sleep(0.2)


@pytest.mark.parametrize("standby_replicas", [1, 0])
def test_a_lost_host_s_tasks_resume_warm_at_their_standby_copies(
    app: SparkApp,
    spark_cluster: StandaloneCluster,
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
    standby_replicas: int,
) -> None:
    name = f"clicks-standby-{standby_replicas}"
    options = {"standby_replicas": standby_replicas}
    config = job_config(zk_server, tmp_path, name, options, partitions=3, elasticity=2)
    files = ClickFiles(tmp_path / "in")
    sink = Sink()
    handler: StatefulQuery = stateful_foreach_batch(
        count_clicks,
        key_columns=["user"],
        output_schema=OUTPUT_SCHEMA,
        state_schema=STATE_SCHEMA,
        sink=sink,
        config=config,
    )
    query = FileQuery(app, files, handler, tmp_path / "spark-checkpoint")
    try:
        query.start()
        steady = query.run(range(0, 3))
        copies = [r.standby.copies for r in steady]
        assert copies == [TASKS * standby_replicas] * 3
        assert all(r.standby.refreshed == r.standby.copies for r in steady)
        if standby_replicas:
            # After the first copy, each refresh applies only the batch's checkpoint files.
            assert steady[0].standby.full == TASKS and steady[-1].standby.full == 0
            assert 0 < steady[-1].standby.bytes_applied < steady[0].standby.bytes_applied

        spark_cluster.kill_worker(LOST)
        wait_gone(app, LOST)
        lost = query.run(range(3, 5))
        assert all(r.pinned_ok == r.pinned_total == TASKS for r in lost)
        if standby_replicas:
            assert [r.warm for r in lost] == [TASKS, TASKS]  # the lost host's tasks too
            assert sum(r.bytes_restored for r in lost) == 0
        else:
            assert lost[0].restored > 0  # the lost host's tasks restore from the checkpoint
        query.stop()
        assert sink.batches == reference_clicks(files, range(5))
    finally:
        query.stop()
        handler.close()
        spark_cluster.start_worker(LOST)
        app.ready()
