"""benchmarks/zk_store.py --quick runs end to end against a real ZooKeeper and writes its table."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchdoc import run_quick

pytestmark = pytest.mark.zk


def test_quick_benchmark_writes_its_section(tmp_path: Path) -> None:
    text = run_quick("zk_store", "zk_store", tmp_path)
    # The 1% rewrite of 10,000 tasks writes 100 nodes.
    rows = [line for line in text.splitlines() if line.startswith("| 10,000")]
    locality_row = [cell.strip() for cell in rows[-1].strip("|").split("|")]
    assert locality_row[2] == "10,000" and locality_row[5] == "100"
