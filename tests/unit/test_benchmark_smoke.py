"""benchmarks/groupers.py --quick runs end to end and writes a table with every scenario row."""

from __future__ import annotations

from pathlib import Path

from benchdoc import run_quick

from groupers.testing.scenarios import SCENARIO_KINDS

GROUPERS = [
    "host-affinity",
    "host-affinity standby_replicas=1",
    "kafka sticky",
    "hash ring",
    "round-robin",
]


def _table_rows(markdown: str) -> list[list[str]]:
    rows = []
    for line in markdown.splitlines():
        if line.startswith("| ") and not line.startswith("| scenario"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def test_quick_benchmark_writes_every_scenario_row(tmp_path: Path) -> None:
    section = run_quick("groupers", "groupers", tmp_path)
    rows = _table_rows(section)
    seen = {(r[0], r[1], r[4]) for r in rows}
    for kind in SCENARIO_KINDS:
        for layout in ("1/location", "10/location"):
            for grouper in GROUPERS:
                assert (kind, layout, grouper) in seen, (kind, layout, grouper)
    # Our grouper's rows carry numbers, and they meet the yardsticks the benchmark reports.
    ours = [r for r in rows if r[4] in ("host-affinity", "host-affinity standby_replicas=1")]
    assert len(ours) == len(SCENARIO_KINDS) * 2 * 2
    for r in ours:
        moved, lower, kept, best, spread = int(r[5]), int(r[6]), int(r[7]), r[8], int(r[9])
        assert moved == lower, r
        assert best.isdigit() and kept == int(best), r
        assert spread <= 1, r
    assert "peak RSS" in section
    assert "Memory check failed" not in section
