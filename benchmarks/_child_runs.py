"""The one home of "each run in a fresh process, on one cluster whose inputs are written once",
shared by the file-source streaming benchmarks (``spark_streaming.py --throughput`` through
:mod:`benchmarks._throughput_report`, and ``spark_memory.py``).

- :func:`input_cluster`: ZooKeeper, the standalone cluster (a worker on each of 127.0.0.2-4) and
  one pool of batch files per size (:func:`benchmarks._streaming_throughput.write_input`);
- :func:`run_in_child`: one run's measuring function in a fresh Python process, so its driver's
  Python and JVM are measured alone and one run's leftovers do not reach the next; the child
  prints its figures as the last JSON line of its output.

Imports only the standard library and the benchmarks' own modules (the cluster lazily).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._streaming_throughput import write_input

__all__ = ["InputCluster", "input_cluster", "mib", "run_in_child"]


@dataclass(frozen=True)
class InputCluster:
    """A running cluster and ZooKeeper, and the batch files written for each size."""

    work: Path
    master: str
    zookeeper: str

    def pool(self, rows: int) -> str:
        """The folder of the batch files of ``rows`` rows each."""
        return str(self.work / f"pool-{rows}")

    def run_dir(self, index: int) -> str:
        """A fresh work folder for run number ``index``."""
        return str(self.work / f"run-{index}")


@contextmanager
def input_cluster(prefix: str, sizes: Sequence[int], batches: int) -> Iterator[InputCluster]:
    """Start ZooKeeper and the cluster, write ``batches`` batch files of each size, and stop both
    when the block ends."""
    from affinity_pipeline.cluster import StandaloneCluster, spark_session

    from coordinator.demo.race_ways import HOSTS
    from coordinator.launchers.zookeeper import EmbeddedZooKeeper

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        work = Path(tmp)
        zookeeper = EmbeddedZooKeeper(work / "zookeeper")
        cluster = StandaloneCluster(work / "spark", HOSTS, worker_memory="1500m")
        try:
            zookeeper.start()
            cluster.start()
            print("writing the input ...", file=sys.stderr, flush=True)
            writer = spark_session(cluster.master_url, app_name=f"{prefix}input")
            for rows in sizes:
                write_input(writer, work / f"pool-{rows}", rows, batches)
            writer.stop()
            yield InputCluster(work, cluster.master_url, zookeeper.hosts)
        finally:
            cluster.stop()
            zookeeper.stop()


def run_in_child(
    script: str | Path, args: Sequence[str], run: Mapping[str, Any], timeout_s: float
) -> dict[str, Any] | None:
    """Run ``python script *args <run as JSON>`` and give back the last JSON object it printed;
    None when it failed (its error's tail goes to stderr) or took longer than ``timeout_s``."""
    command = [sys.executable, str(script), *args, json.dumps(dict(run))]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stderr[-3000:])
        return None
    figures: dict[str, Any] = json.loads(lines[-1])
    return figures


def mib(n: int) -> str:
    """``n`` bytes in whole MiB, for a table."""
    return f"{n / 2**20:,.0f} MiB"
