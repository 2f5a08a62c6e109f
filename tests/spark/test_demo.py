"""``affinity demo`` end to end: a private ZooKeeper, the coordinator and a real Spark cluster.

Runs ``affinity demo --json`` as a subprocess, checks its figures, and that none of the
processes it started (ZooKeeper, the Spark JVMs: their command lines name its work directory)
survives it.
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
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-4000:]
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        assert set(figures) == {"affinity", "spark_default", "output_correct"}
        assert set(figures["affinity"]) == {
            "warm_ratio",
            "bytes_restored",
            "tasks_moved",
            "versions",
        }
        assert set(figures["spark_default"]) == {"warm_ratio", "bytes_restored"}
        assert figures["output_correct"] is True
        assert figures["affinity"]["versions"] >= 2
        assert figures["affinity"]["warm_ratio"] > figures["spark_default"]["warm_ratio"]
        assert figures["affinity"]["tasks_moved"] >= 1
    finally:
        survivors = subprocess.run(
            ["pgrep", "-f", str(workdir)], capture_output=True, text=True, check=False
        ).stdout.split()
        if survivors:
            subprocess.run(["kill", "-9", *survivors], check=False)
    assert not survivors, f"processes of the demo survived it: {survivors}"
