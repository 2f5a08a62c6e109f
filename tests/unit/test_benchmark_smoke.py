"""benchmarks/groupers.py --quick runs end to end and writes a table with every scenario row."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from groupers.scenarios import SCENARIO_KINDS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "groupers.py"
GROUPERS = ["host-affinity", "kafka sticky", "hash ring", "round-robin"]


def _table_rows(markdown: str) -> list[list[str]]:
    rows = []
    for line in markdown.splitlines():
        if line.startswith("| ") and not line.startswith("| scenario"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def test_quick_benchmark_writes_every_scenario_row(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nsomething else that must survive\n")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--doc", str(doc)],
        cwd=tmp_path,  # not the repo: the script must find its own imports
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = doc.read_text()
    assert "something else that must survive" in text
    assert "<!-- BEGIN groupers -->" in text and "<!-- END groupers -->" in text
    section = text.split("<!-- BEGIN groupers -->", 1)[1].split("<!-- END groupers -->", 1)[0]
    rows = _table_rows(section)
    seen = {(r[0], r[1], r[4]) for r in rows}
    for kind in SCENARIO_KINDS:
        for layout in ("1/location", "10/location"):
            for grouper in GROUPERS:
                assert (kind, layout, grouper) in seen, (kind, layout, grouper)
    # Our grouper's rows carry numbers, and they meet the yardsticks the benchmark reports.
    ours = [r for r in rows if r[4] == "host-affinity"]
    assert len(ours) == len(SCENARIO_KINDS) * 2
    for r in ours:
        moved, lower, kept, best, spread = int(r[5]), int(r[6]), int(r[7]), r[8], int(r[9])
        assert moved == lower, r
        assert best.isdigit() and kept == int(best), r
        assert spread <= 1, r
    assert "peak RSS" in section
    assert "Memory check failed" not in section
