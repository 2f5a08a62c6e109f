"""The README's quick start, run as written (its ``quickstart`` block, with bash) from an empty
directory: ``affinity dev up`` starts a private ZooKeeper and a Spark cluster as daemons, the
query prints each batch's counts, ``affinity dev down`` stops every daemon and removes
``.affinity-dev/``. The dev job config's ``logging.level`` (warning) holds: no info line."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_snippets import snippet

from coordinator.dev import DevError, dev_down

pytestmark = pytest.mark.spark

CHATTY = re.compile(r"\[(debug|info)\s*\]|\"level\": \"(debug|info)\"")


def processes_naming(directory: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(directory) in cmdline:
                found.append(int(entry.name))
    return found


def test_the_readme_quick_start_runs_as_written(tmp_path: Path) -> None:
    script = snippet("README.md", "quickstart")
    # `. .venv/bin/activate`, as the README asks first: this interpreter's bin first on PATH
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    try:
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=tmp_path,
            env={**os.environ, "PATH": path},
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        with contextlib.suppress(DevError):  # only if the block's own `down` did not run
            dev_down(tmp_path / ".affinity-dev")
    lines = done.stdout.splitlines()
    assert "affinity dev: up" in lines, done.stdout + done.stderr[-3000:]
    assert any(line.strip().startswith("Spark master  spark://127.0.0.1:") for line in lines)
    assert "0 [('a', 2), ('b', 1)]" in lines, done.stdout + done.stderr[-3000:]
    assert "1 [('b', 2), ('c', 1)]" in lines
    assert lines[-1] == "affinity dev: down (4 daemon(s) stopped)"
    assert done.returncode == 0
    assert not (tmp_path / ".affinity-dev").exists()
    assert processes_naming(tmp_path) == []
    assert [line for line in lines if CHATTY.search(line)] == []
