"""benchmarks/zk_store.py --quick runs end to end against a real ZooKeeper and writes its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.zk

ROOT = Path(__file__).resolve().parents[2]


def test_quick_benchmark_writes_its_section(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nanother section that must survive\n")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "zk_store.py"), "--quick", "--doc", str(doc)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = doc.read_text()
    assert "another section that must survive" in text
    assert "<!-- BEGIN zk_store -->" in text
    # The 1% rewrite of 10,000 tasks writes 100 nodes.
    rows = [line for line in text.splitlines() if line.startswith("| 10,000")]
    locality_row = [cell.strip() for cell in rows[-1].strip("|").split("|")]
    assert locality_row[2] == "10,000" and locality_row[5] == "100"
