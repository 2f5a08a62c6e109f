"""Two drivers of one stateful query as two real Spark applications on the 3-worker cluster.

The test process is the first driver (an application with 2 executors); while it is in the
middle of batch 2 (its sink holds the batch), a second driver starts in a process of its own
(``second_driver.py``: an application with the third executor) on the same job, run id,
``state.checkpoint_dir``, ZooKeeper and Spark ``checkpointLocation``, as a second copy of the
job or a driver pod that came back would. The newer driver takes the next driver epoch; the
older one's commit of batch 2 is refused naming both drivers and its record removed; the newer
one runs batch 2 again and the rest. The durable state, read back along the latest commit's
chain heads as a restore reads it, equals a pandas reference: nothing lost, nothing counted
twice."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from affinity_pipeline.cluster import StandaloneCluster
from pyspark import cloudpickle
from second_driver import WordQuery, job_config
from spark_app import SparkApp, stop_active_session
from streaming_soak import durable_counts

from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from locality.spark import SparkExecutors

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])

BATCHES = 5
HELD = 2  # the batch the first driver is in when the second one starts
SECOND = Path(__file__).with_name("second_driver.py")


def words(index: int) -> list[str]:
    return [f"w{(index * 5 + i) % 17}" for i in range(30 + index)]


def reference(batches: list[list[str]]) -> tuple[dict[int, list[tuple[str, int]]], dict[str, int]]:
    totals: dict[str, int] = {}
    outputs = {}
    for b, fed in enumerate(batches):
        counts = pd.Series(fed).value_counts()
        for word, n in counts.items():
            totals[str(word)] = totals.get(str(word), 0) + int(n)
        outputs[b] = sorted((str(w), totals[str(w)]) for w in counts.index)
    return outputs, totals


@pytest.fixture
def first_app(spark_cluster: StandaloneCluster) -> Iterator[SparkApp]:
    """The first driver's application: 2 executors (``spark.cores.max``), leaving the third
    worker to the second driver's application."""
    stop_active_session()
    app = SparkApp(spark_cluster, (), conf={"spark.cores.max": "2"})
    app.start()
    try:
        SparkExecutors(app.sc).wait_for(2)
        yield app
    finally:
        app.stop()


def test_a_second_driver_deposes_the_first_and_the_state_stays_exact(
    first_app: SparkApp,
    spark_cluster: StandaloneCluster,
    zk_server: EmbeddedZooKeeper,
    tmp_path: Path,
) -> None:
    name = "words-two-drivers"
    config = job_config(zk_server.hosts, tmp_path, name)
    fed = [words(b) for b in range(BATCHES)]
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for b, batch in enumerate(fed):  # one file a batch, in order
        path = inbox / f"{b:04d}.json"
        path.write_text("".join(json.dumps({"word": w}) + "\n" for w in batch))
        stamp = time.time() - 100 + b
        os.utime(path, (stamp, stamp))
    settings = {
        "master": spark_cluster.master_url,
        "log4j": str(spark_cluster.quiet_log4j_config),
        "zookeeper": zk_server.hosts,
        "tmp": str(tmp_path),
        "name": name,
        "checkpoint": "spark-checkpoint",
        "cores": 1,
        "go": str(tmp_path / "go"),
        "out": str(tmp_path / "second.json"),
    }
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    log = (tmp_path / "second.log").open("wb")
    # the second driver's application starts now; its query once the first holds batch 2
    second = subprocess.Popen(
        [sys.executable, str(SECOND), str(tmp_path / "settings.json")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    assert first_app.session is not None
    held, deposed = threading.Event(), threading.Event()

    def hold(batch: int) -> None:  # batch 2 waits in the sink until a newer driver took over
        if batch != HELD:
            return
        held.set()
        assert first is not None
        commits = first.handler.commits
        assert commits is not None
        until = time.monotonic() + 120
        while time.monotonic() < until:
            pointer = commits.pointer.current()
            if pointer is not None and pointer.epoch > commits.epoch:
                deposed.set()
                return
            time.sleep(0.2)

    first: WordQuery | None = None
    try:
        first = WordQuery(first_app.session, config, tmp_path, "spark-checkpoint", hold=hold)
        assert held.wait(120), "the first driver never reached batch 2"
        commits = first.handler.commits
        assert commits is not None
        older, epoch = commits.lease.driver, commits.epoch
        (tmp_path / "go").touch()
        with pytest.raises(Exception) as refused:
            first.query.awaitTermination(150)
            pytest.fail("the first driver's query went on after a newer driver started")
        assert deposed.is_set()
        first.stop()  # the first driver's executors leave the job; the second gets the tasks
        first_app.stop()
        assert second.wait(180) == 0, (tmp_path / "second.log").read_text()[-3000:]
    finally:
        if first is not None:  # stopped already, or the test failed on the way
            with contextlib.suppress(Exception):
                first.stop()
        if second.poll() is None:
            second.kill()
            second.wait()
        log.close()
    result = json.loads((tmp_path / "second.json").read_text())
    newer = result["driver"]
    assert newer.endswith(f":{result['pid']}") and newer != older
    message = str(refused.value)
    assert re.search(
        rf"commit batch {HELD}: refused, this driver {re.escape(repr(older))} \(epoch {epoch}\) "
        rf"was deposed by driver {re.escape(repr(newer))} \(epoch {epoch + 1}\)",
        message,
    ), message

    records = sorted((tmp_path / "durable").rglob("commit-*.json"))
    names = [r.name for r in records]
    assert not [n for n in names if n.startswith(f"commit-{HELD:012d}-e{epoch:08d}")], names
    expected, totals = reference(fed)
    assert first.outputs == {b: expected[b] for b in range(HELD + 1)}  # 2: not committed
    second_outputs = {int(b): [tuple(r) for r in rows] for b, rows in result["outputs"].items()}
    assert second_outputs == {b: expected[b] for b in range(HELD, BATCHES)}
    assert result["reports"] == list(range(HELD, BATCHES))
    committed, counts = durable_counts(config)
    assert committed == BATCHES - 1
    assert counts == totals  # nothing lost, nothing counted twice
