"""``affinity dev up|status|down`` with ZooKeeper alone (``--workers 0``; the README's quick start
test runs it with Spark): the server outlives the command, the state file and the job config
point at it, a second ``up`` is refused, ``down`` stops it and removes the directory, and a
``down`` with nothing up says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.config import load_config
from coordinator.dev import DevEnvironment
from coordinator.launchers.zookeeper import four_letter_word

pytestmark = pytest.mark.zk


def affinity(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "dev", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def names(pid: int, directory: Path) -> bool:
    """Process ``pid`` runs with ``directory`` in its command line."""
    try:
        return str(directory) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_up_outlives_the_command_and_down_stops_it(tmp_path: Path) -> None:
    up = affinity("up", "--workers", "0", cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        env = DevEnvironment.load(tmp_path / ".affinity-dev")
        assert f"ZooKeeper     {env.zookeeper}" in up.stdout
        assert "job config    .affinity-dev/job.yaml" in up.stdout
        port = int(env.zookeeper.rsplit(":", 1)[1])
        assert "Mode: standalone" in four_letter_word(port, "srvr")  # the command has exited
        config = env.config()
        assert config.zookeeper.connect == env.zookeeper
        assert config == load_config(env.config_path, environ={})
        assert config.logging.level == "warning" and env.master_url is None

        status = affinity("status", "--json", cwd=tmp_path)
        assert status.returncode == 0
        assert json.loads(status.stdout)["running"] == {"zookeeper": True}

        again = affinity("up", "--workers", "0", cwd=tmp_path)
        assert again.returncode == 2
        assert "a dev environment is already up in .affinity-dev" in again.stderr
    finally:
        down = affinity("down", cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert down.stdout.strip() == "affinity dev: down (1 daemon(s) stopped)"
    assert not (tmp_path / ".affinity-dev").exists()
    assert not names(env.zookeeper_pid, tmp_path)  # the server is gone

    nothing = affinity("down", cwd=tmp_path)
    assert nothing.returncode == 2
    assert "no dev environment in .affinity-dev: run `affinity dev up` first" in nothing.stderr


def test_a_bad_worker_count_is_refused(tmp_path: Path) -> None:
    bad = affinity("up", "--workers", "9", cwd=tmp_path)
    assert bad.returncode == 2
    assert "--workers must be between 0 and 4, got 9" in bad.stderr
    assert not (tmp_path / ".affinity-dev").exists()
