"""The benchmarks' one way of running a measurement in a fresh process
(:func:`benchmarks._child_runs.run_in_child`): the child's last JSON line comes back; a child
that fails or overstays gives None, with its error's tail on stderr."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._child_runs import mib, run_in_child  # noqa: E402

CHILD = """
import json, sys, time
run = json.loads(sys.argv[-1])
if run.get("fail"):
    sys.exit("the child failed on purpose")
time.sleep(run.get("sleep", 0))
print("progress, not JSON")
print(json.dumps({"first": 1}))
print(json.dumps({"args": sys.argv[1:-1], "rows": run["rows"] * 2}))
"""


@pytest.fixture
def child(tmp_path: Path) -> Path:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return script


def test_the_child_s_last_json_line_comes_back_with_its_arguments(child: Path) -> None:
    assert run_in_child(child, ["--child"], {"rows": 21}, timeout_s=60) == {
        "args": ["--child"],
        "rows": 42,
    }


def test_a_failed_child_gives_none_and_its_error(
    child: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_in_child(child, [], {"rows": 1, "fail": True}, timeout_s=60) is None
    assert "the child failed on purpose" in capsys.readouterr().err


def test_a_child_that_overstays_gives_none(child: Path) -> None:
    assert run_in_child(child, [], {"rows": 1, "sleep": 30}, timeout_s=1) is None


def test_bytes_read_as_whole_mebibytes() -> None:
    assert mib(3 * 2**20 + 100) == "3 MiB"
    assert mib(1536 * 2**20) == "1,536 MiB"
