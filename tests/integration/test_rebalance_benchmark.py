"""benchmarks/rebalance.py --quick runs against a real ZooKeeper and writes its tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.zk, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def tables(markdown: str) -> list[list[dict[str, str]]]:
    """Every Markdown table of ``markdown``, as rows of {column: cell}."""
    found: list[list[dict[str, str]]] = []
    lines: list[str] = []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            lines.append(line)
            continue
        if lines:
            cells = [[c.strip() for c in row.strip("|").split("|")] for row in lines]
            header, rows = cells[0], cells[2:]  # cells[1] is the |---| line
            found.append([dict(zip(header, row, strict=True)) for row in rows])
            lines = []
    return found


def milliseconds(cell: str) -> int:
    return int(cell.removesuffix(" ms").replace(",", ""))


def test_quick_rebalance_benchmark_writes_its_section(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nanother section that must survive\n")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "rebalance.py"), "--quick", "--doc", str(doc)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = doc.read_text()
    assert "another section that must survive" in text
    assert "<!-- BEGIN rebalance -->" in text and "<!-- END rebalance -->" in text
    section = text.split("<!-- BEGIN rebalance -->", 1)[1].split("<!-- END rebalance -->", 1)[0]
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
