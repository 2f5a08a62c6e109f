"""benchmarks/rebalance.py --quick runs against a real ZooKeeper and writes its tables."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchdoc import run_quick, tables

pytestmark = [pytest.mark.zk, pytest.mark.slow]


def milliseconds(cell: str) -> int:
    return int(cell.removesuffix(" ms").replace(",", ""))


def test_quick_rebalance_benchmark_writes_its_section(tmp_path: Path) -> None:
    section = run_quick("rebalance", "rebalance", tmp_path)
    (measured,) = tables(section)
    assert [row["P"] for row in measured] == ["5", "10"]
    for row in measured:
        assert row["deaths"] == "2" and row["debounce"] == "200 ms"
        published = milliseconds(row["death -> published"])
        assert 200 <= published <= milliseconds(row["death -> DONE"])  # debounce, then DONE
        assert int(row["moved"].replace(",", "")) > 0
        for column in ("coordinator writes / reads", "processors writes / reads"):
            writes, reads = row[column].split(" / ")
            assert int(writes.replace(",", "")) > 0 and int(reads.replace(",", "")) > 0, column
        first, last = (
            int(cell.strip().lstrip("+").removesuffix(" ms").replace(",", ""))
            for cell in row["joins after publish"].split("..")
        )
        assert 0 <= first <= last <= milliseconds(row["published -> DONE"]) + 50
        cpu = [
            int(cell.strip().removesuffix(" ms").replace(",", ""))
            for cell in row["CPU to DONE: processors / coordinator / ZooKeeper"].split(" / ")
        ]
        assert len(cpu) == 3 and cpu[0] > 0  # the survivors did measurable work
