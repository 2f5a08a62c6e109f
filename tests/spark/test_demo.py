"""``affinity demo`` end to end: a private ZooKeeper, the coordinator and a real Spark cluster.

Runs ``affinity demo --json`` as a subprocess (a file-source query run by Spark's RocksDB state
store and by ``stateful_foreach_batch``, through an executor loss and an application restart),
checks its figures, and that none of the processes it started (ZooKeeper, the Spark JVMs: their
command lines name its work directory) survives it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")


@pytest.mark.skipif(not ZOOKEEPER_JAR.exists(), reason="Debian's zookeeper package is missing")
@pytest.mark.skipif(shutil.which("java") is None, reason="java is missing")
def test_demo_json(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    command = [
        sys.executable,
        "-m",
        "coordinator.cli",
        "demo",
        "--json",
        "--batches",
        "4",
        "--workdir",
        str(workdir),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        assert set(figures) == {
            "affinity",
            "spark_default",
            "spark_state_store",
            "output_correct",
        }
        affinity, spark = figures["affinity"], figures["spark_state_store"]
        assert set(affinity) == {
            "warm_ratio",
            "bytes_restored",
            "tasks_moved",
            "versions",
            "recovery_batch_s",
            "rows_in",
            "driver_rows",
        }
        assert set(figures["spark_default"]) == {"warm_ratio", "bytes_restored"}
        assert set(spark) == {"warm_ratio", "bytes_restored", "recovery_batch_s"}
        # both outputs equal the single-process reference, batch by batch
        assert figures["output_correct"] is True
        # the executor loss: a new processor, a new job model; its tasks moved to it
        assert affinity["versions"] >= 2 and affinity["tasks_moved"] >= 1
        # Spark reloads its stores from the checkpoint after the executor loss and the restart
        assert spark["bytes_restored"] > 1_000_000 and spark["warm_ratio"] < 1
        # affinity's tasks find their state on their hosts: at most a tenth of Spark's bytes
        assert affinity["bytes_restored"] * 10 <= spark["bytes_restored"]
        assert affinity["warm_ratio"] > spark["warm_ratio"]
        assert affinity["recovery_batch_s"] > 0 and spark["recovery_batch_s"] > 0
        # the batches went from the source to the pinned tasks without the driver
        assert affinity["rows_in"] > 0 and affinity["driver_rows"] == 0
    finally:
        survivors = subprocess.run(
            ["pgrep", "-f", str(workdir)], capture_output=True, text=True, check=False
        ).stdout.split()
        if survivors:
            subprocess.run(["kill", "-9", *survivors], check=False)
    assert not survivors, f"processes of the demo survived it: {survivors}"
