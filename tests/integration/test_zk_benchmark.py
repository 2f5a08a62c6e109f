"""benchmarks/zk_store.py --quick runs end to end against a real ZooKeeper and writes its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from benchdoc import ROOT, run_quick

pytestmark = pytest.mark.zk


def test_quick_benchmark_writes_its_section(tmp_path: Path) -> None:
    text = run_quick("zk_store", "zk_store", tmp_path)
    # The 1% rewrite of 10,000 tasks writes 100 nodes.
    rows = [line for line in text.splitlines() if line.startswith("| 10,000")]
    locality_row = [cell.strip() for cell in rows[-1].strip("|").split("|")]
    assert locality_row[2] == "10,000" and locality_row[5] == "100"


def test_quick_benchmark_compares_with_the_goals(tmp_path: Path) -> None:
    text = run_quick("zk_store", "zk_store", tmp_path)
    goals = [line for line in text.splitlines() if line.startswith("| ") and "ms" in line]
    assert any(line.startswith("| own container read") for line in goals)
    assert any(line.startswith("| 1% locality rewrite") for line in goals)


def test_a_100k_partition_job_reaches_done_with_the_default_barrier_timeout() -> None:
    """benchmarks/million_partitions.py at 100,000 partitions: a real coordinator and three
    processors reach DONE (about 10 s on the shared 2-core machine)."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "million_partitions.py"),
            "--partitions",
            "100000",
            "--timeout-s",
            "240",
            "--no-write",  # docs/benchmarks.md holds the 1,000,000-partition run
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "DONE at version" in proc.stdout
    # The coordinator's way there, from its log, in order.
    (way,) = [line for line in proc.stdout.splitlines() if "s started (the job's tasks" in line]
    milestones = ["started", "leading", "grouper ran", "published", "DONE decided"]
    assert [way.index(f" s {m}") for m in milestones] == sorted(
        way.index(f" s {m}") for m in milestones
    ), way
