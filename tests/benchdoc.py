"""Running a benchmark script in quick mode and reading the Markdown section it writes.

Shared by the benchmark tests: each runs ``benchmarks/<script>.py --quick --doc <tmp file>`` in a
temporary folder (so the script must find its own imports), checks that the other sections of the
file survive, and reads the tables of the section the script wrote.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEEP = "another section that must survive"


def run_quick(script: str, section: str, workdir: Path, timeout_s: float = 300) -> str:
    """Run ``benchmarks/<script>.py --quick``; the text of the section ``section`` it wrote."""
    doc = workdir / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\n{KEEP}\n")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), "--quick", "--doc", str(doc)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = doc.read_text()
    assert KEEP in text
    begin, end = f"<!-- BEGIN {section} -->", f"<!-- END {section} -->"
    assert begin in text and end in text
    return text.split(begin, 1)[1].split(end, 1)[0]


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
