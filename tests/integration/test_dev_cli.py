"""``affinity dev up|status|down`` with ZooKeeper alone (``--workers 0``; the README's quick start
test runs it with Spark): the server outlives the command, the state file and the job config
point at it, a second ``up`` is refused, ``down`` stops it and removes the directory, and a
``down`` with nothing up says so."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
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


def processes_naming(directory: Path) -> list[int]:
    """Every process whose command line names ``directory``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and names(int(entry.name), directory):
            found.append(int(entry.name))
    return found


def one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    [line] = done.stderr.splitlines()
    assert line.startswith("affinity: error: ") and "Traceback" not in done.stderr
    assert all(needle in line for needle in needles), line
    return line


@pytest.mark.parametrize(
    "state",
    [
        "{}",
        "[]",
        '{"directory": "D", "zookeeper": "127.0.0.1:1", "zookeeper_pid": "abc",'
        ' "config_path": "D/job.yaml"}',
        '{"directory": "D", "zookeeper": "127.0.0.1:1", "zookeeper_pid": 7,'
        ' "spark_groups": "12", "config_path": "D/job.yaml"}',
    ],
    ids=["empty-object", "list", "non-numeric-pid", "groups-not-a-list"],
)
def test_a_broken_state_file_is_one_line_from_every_command(tmp_path: Path, state: str) -> None:
    directory = tmp_path / ".affinity-dev"
    directory.mkdir()
    (directory / "state.json").write_text(state.replace("D", str(directory)))
    for command in ("up", "status", "down"):
        extra = ("--workers", "0") if command == "up" else ()
        one_line_error(
            affinity(command, *extra, cwd=tmp_path), "is not a state file of `affinity dev up`"
        )
    assert (directory / "state.json").exists()  # nothing removed


def test_a_state_file_naming_another_directory_removes_nothing(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    directory = tmp_path / ".affinity-dev"
    directory.mkdir()
    state = {
        "directory": str(victim),
        "zookeeper": "127.0.0.1:1",
        "zookeeper_pid": 0,
        "config_path": str(victim / "job.yaml"),
    }
    (directory / "state.json").write_text(json.dumps(state))
    one_line_error(affinity("down", cwd=tmp_path), "names another directory")
    assert (victim / "keep.txt").read_text() == "mine"


def test_a_copied_project_leaves_the_original_alone(tmp_path: Path) -> None:
    original, copy = tmp_path / "original", tmp_path / "copy"
    original.mkdir()
    up = affinity("up", "--workers", "0", cwd=original)
    assert up.returncode == 0, up.stderr
    try:
        shutil.copytree(original, copy)
        one_line_error(affinity("down", cwd=copy), "names another directory")
        env = DevEnvironment.load(original / ".affinity-dev")
        assert names(env.zookeeper_pid, original / ".affinity-dev")  # still running
        assert (original / ".affinity-dev" / "state.json").exists()
    finally:
        assert affinity("down", cwd=original).returncode == 0


def test_up_over_a_dead_environment_keeps_its_directory(tmp_path: Path) -> None:
    directory = tmp_path / ".affinity-dev"
    assert affinity("up", "--workers", "0", cwd=tmp_path).returncode == 0
    try:
        env = DevEnvironment.load(directory)
        os.kill(env.zookeeper_pid, signal.SIGKILL)
        (directory / "checkpoint").mkdir()
        (directory / "checkpoint" / "offsets").write_text("0")
        again = affinity("up", "--workers", "0", cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert (directory / "checkpoint" / "offsets").read_text() == "0"
        assert DevEnvironment.load(directory).processes() == {"zookeeper": True}
    finally:
        assert affinity("down", cwd=tmp_path).returncode == 0


def test_two_ups_at_once_one_starts_the_other_says_why_not(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "coordinator.cli", "dev", "up", "--workers", "0"]
    runs = [
        subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    try:
        results = sorted((run.wait(timeout=120), run.stderr.read().decode()) for run in runs)  # type: ignore[union-attr]
        assert [code for code, _ in results] == [0, 2], results
        refused = results[1][1]
        assert len(refused.splitlines()) == 1, refused
        assert (
            "another `affinity dev up` is starting in .affinity-dev" in refused
            or "a dev environment is already up in .affinity-dev" in refused
        )
    finally:
        assert affinity("down", cwd=tmp_path).returncode == 0
    assert not processes_naming(tmp_path / ".affinity-dev")


def test_sigterm_while_starting_leaves_no_daemon(tmp_path: Path) -> None:
    directory = tmp_path / ".affinity-dev"
    up = subprocess.Popen(
        [sys.executable, "-m", "coordinator.cli", "dev", "up", "--workers", "1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not processes_naming(directory) and up.poll() is None:
        assert time.monotonic() < deadline, "ZooKeeper never started"
        time.sleep(0.01)
    up.send_signal(signal.SIGTERM)
    _, stderr = up.communicate(timeout=60)
    assert up.returncode != 0 and "Traceback" not in stderr, stderr
    time.sleep(1)
    assert processes_naming(directory) == []
    assert not (directory / "state.json").exists()
