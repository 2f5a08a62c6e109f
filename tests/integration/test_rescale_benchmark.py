"""benchmarks/rescale.py --quick writes its tables, and the numbers say what the issue asks."""

from __future__ import annotations

from pathlib import Path

from benchdoc import run_quick, tables


def kilobytes(cell: str) -> int:
    return int(cell.split(" KB")[0].replace(",", ""))


def test_quick_rescale_benchmark(tmp_path: Path) -> None:
    section = run_quick("rescale", "rescale", tmp_path)
    moves, checkpoints = tables(section)
    assert [row["tasks"] for row in moves] == ["8 -> 16", "16 -> 8"] * 3
    for row in moves:
        ours = kilobytes(row["ours (virtual tasks, host-affinity)"])
        bound = kilobytes(row["lower bound"])
        assert bound <= ours <= kilobytes(row["naive range"])
        assert ours <= bound * 1.1 + 2  # within 10% of the lower bound
    fixed = [row for row in moves if row["hosts"].startswith("fixed pool of 4")]
    assert all(kilobytes(row["ours (virtual tasks, host-affinity)"]) == 0 for row in fixed)
    six = [row for row in moves if row["hosts"].startswith("fixed pool of 6")]
    assert all(kilobytes(r["hash-mod"]) > 2 * kilobytes(r["lower bound"]) for r in six)
    smallest = checkpoints[0]
    assert (
        kilobytes(smallest["differential written"])
        < kilobytes(smallest["state (full snapshot)"]) / 4
    )
