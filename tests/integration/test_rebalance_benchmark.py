"""benchmarks/rebalance.py --quick runs against a real ZooKeeper and writes its tables: the
measures per size, and the goals of issue 16 beside them."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchdoc import run_quick, tables

pytestmark = [pytest.mark.zk, pytest.mark.slow]


def milliseconds(cell: str) -> float:
    return float(cell.split(" ms")[0].replace(",", ""))


def test_quick_rebalance_benchmark_writes_its_section(tmp_path: Path) -> None:
    section = run_quick("rebalance", "rebalance", tmp_path)
    measured, goals = tables(section)
    assert [row["P"] for row in measured] == ["5", "10"]
    assert "re-run with `python benchmarks/rebalance.py --quick" in section
    for row in measured:
        assert row["deaths (worker processes)"].startswith("2 (")
        assert float(row["load (1 min)"]) >= 0
        done = milliseconds(row["death -> DONE"])
        beyond = milliseconds(row["beyond debounce"])
        assert abs(done - 200 - beyond) <= 1  # the debounce is 200 ms
        part = row["coordinator's part beyond debounce (its CPU)"]
        assert 0 <= milliseconds(part) <= beyond + 1 and part.endswith(" ms CPU)")
        # The leader's grouper run fits in its part; what comes after the commit is beside it.
        assert 0 < milliseconds(row["of which the grouper run"]) <= milliseconds(part)
        returned, observed = (
            milliseconds(cell.strip().lstrip("+"))
            for cell in row[
                "after the commit: the leader's publish returned / an observer saw it"
            ].split(" / ")
        )
        assert returned >= -20 and observed >= -20  # (ZooKeeper's clock has milliseconds)
        assert int(row["moved"].replace(",", "")) > 0
        first, last = (
            int(cell.strip().lstrip("+").removesuffix(" ms").replace(",", ""))
            for cell in row["joins after publish"].split("..")
        )
        assert 0 <= first <= last <= milliseconds(row["published -> DONE"]) + 50
        cpu = [
            int(cell.strip().removesuffix(" ms").replace(",", ""))
            for cell in row["CPU to DONE: processors / coordinator / ZooKeeper"].split(" / ")
        ]
        # (/proc's clock ticks are 10 ms: at P=5 the survivors' share may round to 0; the
        # coordinator's, with its grouper run, does not)
        assert len(cpu) == 3 and min(cpu) >= 0 and cpu[1] > 0
        assert milliseconds(row["bound: CPU to DONE / cores"]) > 0
        assert row["beyond debounce / bound"].endswith("x")
        survivor = row["survivor CPU per rebalance"]
        assert milliseconds(survivor) >= 0
        # ... and in plain get round trips, measured before and after (the machine's moment).
        gets, costs = survivor.split(" = ")[1].removesuffix(" us").split(" gets of ")
        before, after = (float(cost) for cost in costs.split("/"))
        assert 10 <= before <= 10_000 and 10 <= after <= 10_000  # microseconds
        per_get = milliseconds(survivor) * 1000 / ((before + after) / 2)
        assert float(gets) == pytest.approx(per_get, rel=0.05, abs=0.1)
        io = row["store writes / reads: coordinator, survivors"].split(", ")
        assert [len(part.split(" / ")) for part in io] == [2, 2]
        # Every client's requests are counted: the coordinator's and the survivors'.
        requests = row["ZooKeeper requests per rebalance: coordinator + survivors"]
        coordinator, survivors = requests.split(" (")[0].split(" + ")
        assert int(coordinator.replace(",", "")) > 0 and int(survivors.replace(",", "")) > 0
    assert [row["P"] for row in goals] == ["5", "10"]
    assert all("goal 300 ms" in row["coordinator's part"] for row in goals)
    assert all("goal 2 ms" in row["survivor CPU per rebalance"] for row in goals)
    assert all(" gets of " in row["survivor CPU per rebalance"] for row in goals)
