"""``affinity jobmodel show`` and ``affinity locality show`` against a real ZooKeeper, run as the
real command (a subprocess), so stdout holds only the answer."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kazoo.client import KazooClient

from coordinator.launchers.processes import free_port
from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from metadata.model import (
    BarrierState,
    ContainerModel,
    FrozenMap,
    JobModel,
    SystemStreamPartition,
    TaskModel,
)
from metadata.serde import load_job_model_document
from metadata.zk import ZkMetadataStore

pytestmark = pytest.mark.zk

ROOT = Path(__file__).resolve().parents[2]


def affinity(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def task(i: int) -> TaskModel:
    return TaskModel(f"Partition {i}", frozenset({SystemStreamPartition("kafka", "events", i)}), i)


def model(version: int) -> JobModel:
    containers = {
        "p-1": ContainerModel(
            "p-1", "zone-a/node-1", {t.name: t for t in map(task, range(0, 12, 2))}
        ),
        "p-2": ContainerModel(
            "p-2", "zone-b/node-2", {t.name: t for t in map(task, range(1, 12, 2))}
        ),
        "p-3": ContainerModel(
            "p-3",
            "zone-b/node-3",
            {},
            # version 2 keeps standby replicas of p-1's first two tasks on p-3
            {t.name: t for t in map(task, (0, 2))} if version == 2 else {},
        ),
    }
    return JobModel(version, FrozenMap(containers), FrozenMap({"job.name": "clicks"}))


def write_config(path: Path, hosts: str, root: str, **zookeeper: object) -> Path:
    document = {
        "job": {"name": "clicks", "id": "1", "run_id": "r1"},
        "zookeeper": {"connect": hosts, "root": root, "connect_timeout_ms": 3000, **zookeeper},
        "inputs": [{"system": "kafka", "stream": "events", "partitions": 12}],
    }
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture
def running_job(
    zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient], tmp_path: Path
) -> Iterator[tuple[Path, ZkMetadataStore]]:
    """A job with versions 1 and 2 published, barrier 2 DONE, processors and locality."""
    root = f"/cli-{uuid.uuid4().hex[:8]}"
    store = ZkMetadataStore(zk_connect(zk_server.hosts), f"{root}/clicks-1", run_id="r1")
    store.ensure_layout()
    epoch = store.epochs.acquire()
    for version in (1, 2):
        store.job_models.publish(
            model(version), epoch=epoch, participants=["p-1", "p-2", "p-3"], grouper="host-affinity"
        )
    for pid in ("p-1", "p-2", "p-3"):
        store.barriers.join(2, pid)
    store.barriers.set_state(2, BarrierState.DONE, epoch=epoch)
    store.processors.register("p-1", "zone-a/node-1")
    store.processors.register("p-2", "zone-b/node-2")
    store.locality.write({"Partition 0": "zone-a/node-1", "Partition 1": "zone-b/node-2"})
    yield write_config(tmp_path / "job.yaml", zk_server.hosts, root), store
    store.close()


def test_jobmodel_show_json_is_the_job_model_format(
    running_job: tuple[Path, ZkMetadataStore],
) -> None:
    config, _ = running_job
    result = affinity("jobmodel", "show", "--config", str(config), "--json")

    assert result.returncode == 0, result.stderr
    document = load_job_model_document(result.stdout)
    assert document.model == model(2)
    assert (document.run_id, document.grouper) == ("r1", "host-affinity")
    assert json.loads(result.stdout)["format"] == 1
    assert json.loads(result.stdout)["containers"]["p-3"]["standby_tasks"]  # standbys in the JSON


def test_jobmodel_show_a_given_version(running_job: tuple[Path, ZkMetadataStore]) -> None:
    config, _ = running_job
    result = affinity("jobmodel", "show", "--config", str(config), "--version", "1", "--json")
    assert result.returncode == 0, result.stderr
    assert load_job_model_document(result.stdout).model == model(1)


def test_jobmodel_show_summary(running_job: tuple[Path, ZkMetadataStore]) -> None:
    config, _ = running_job
    result = affinity("jobmodel", "show", "--config", str(config))

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "job model version 2 (latest 2), run r1, grouper host-affinity" in out
    assert "barrier 2: DONE, 3 of 3 expected processors joined" in out
    assert "3 processors, 12 tasks, 2 standby replicas" in out
    assert "p-1  zone-a/node-1  6 tasks: Partition 0, Partition 2, Partition 4" in out
    assert "p-3  zone-b/node-3  0 tasks; standby 2: Partition 0, Partition 2" in out
    assert result.stderr == ""


def test_locality_show(running_job: tuple[Path, ZkMetadataStore]) -> None:
    config, _ = running_job
    as_json = affinity("locality", "show", "--config", str(config), "--json")
    summary = affinity("locality", "show", "--config", str(config))

    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == {
        "processors": {"p-1": "zone-a/node-1", "p-2": "zone-b/node-2"},
        "tasks": {"Partition 0": "zone-a/node-1", "Partition 1": "zone-b/node-2"},
        "standbys": {"p-3": ["Partition 0", "Partition 2"]},
    }
    assert summary.returncode == 0, summary.stderr
    assert "2 live processors" in summary.stdout
    assert "2 tasks with locality, at 2 locations" in summary.stdout
    assert "standby replicas (2, latest job model):" in summary.stdout
    assert "p-3  2 tasks: Partition 0, Partition 2" in summary.stdout


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""
    return lines[0]


def test_missing_version_exits_2(running_job: tuple[Path, ZkMetadataStore]) -> None:
    config, _ = running_job
    result = affinity("jobmodel", "show", "--config", str(config), "--version", "9")
    assert result.returncode == 2
    assert "jobModels/9" in one_error_line(result)


def test_missing_job_exits_2(zk_server: ZooKeeperServer, tmp_path: Path) -> None:
    config = write_config(tmp_path / "job.yaml", zk_server.hosts, "/no-such-root")
    for command in (["jobmodel", "show"], ["locality", "show"]):
        result = affinity(*command, "--config", str(config))
        assert result.returncode == 2
        assert "no job clicks-1" in one_error_line(result)


def test_bad_config_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("job: {name: clicks}\nzookeeper: {root: relative}\n")
    result = affinity("jobmodel", "show", "--config", str(bad))
    assert result.returncode == 2
    assert "zookeeper.root" in one_error_line(result)

    result = affinity("locality", "show", "--config", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2
    assert "cannot read configuration file" in one_error_line(result)


def test_unreachable_zookeeper_exits_1(tmp_path: Path) -> None:
    config = write_config(tmp_path / "job.yaml", f"127.0.0.1:{free_port()}", "/affinity")
    result = affinity("jobmodel", "show", "--config", str(config))
    assert result.returncode == 1
    assert "could not connect" in one_error_line(result)


def test_protected_job_without_credentials_exits_1(
    zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient], tmp_path: Path
) -> None:
    root = f"/cli-{uuid.uuid4().hex[:8]}"
    auth = "ops:pw"
    store = ZkMetadataStore(
        zk_connect(zk_server.hosts, auth=auth), f"{root}/clicks-1", run_id="r1", auth=auth
    )
    store.ensure_layout()
    store.job_models.publish(model(1), epoch=store.epochs.acquire(), participants=["p-1"])

    denied = affinity(
        "jobmodel",
        "show",
        "--config",
        str(write_config(tmp_path / "a.yaml", zk_server.hosts, root)),
    )
    allowed = affinity(
        "jobmodel",
        "show",
        "--json",
        "--config",
        str(write_config(tmp_path / "b.yaml", zk_server.hosts, root, auth=auth)),
    )

    assert denied.returncode == 1
    assert "permission denied" in one_error_line(denied)
    assert allowed.returncode == 0, allowed.stderr
    assert load_job_model_document(allowed.stdout).model == model(1)


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    """531 bytes of nested aliases (9**9 values) once ran ``jobmodel show`` to 2.6 GB over 90 s;
    under a 1 GB address-space limit the command must answer in one line, quickly."""
    lines = ["job: {name: bomb}", "inputs: [{system: k, stream: s, partitions: 1}]"]
    lines.append("a: &a [" + ",".join(['"lol"'] * 9) + "]")
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "jobmodel", "show", "--config", str(bomb)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)),
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "YAML aliases (*a, line 4) are not supported" in one_error_line(result)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    ("zookeeper", "key"),
    [
        ({"session_timeout_ms": True}, "zookeeper.session_timeout_ms"),
        ({"auth": "secretpw"}, "auth"),
    ],
)
def test_bad_zookeeper_values_exit_2_without_echoing_secrets(
    tmp_path: Path, zookeeper: dict[str, object], key: str
) -> None:
    config = write_config(tmp_path / "job.yaml", "127.0.0.1:2181", "/affinity", **zookeeper)
    result = affinity("jobmodel", "show", "--config", str(config))
    assert result.returncode == 2
    line = one_error_line(result)
    assert key in line
    assert "secretpw" not in line


# ---------------------------------------------------------------- one line, no traceback


def run_command(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m coordinator.cli ...``; a command that does not end in time fails the test."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "coordinator.cli", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=timeout_s,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"{args[:2]} still running after {timeout_s} s: {exc.stdout!r}"
        ) from None


def only_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """stderr is exactly one ``affinity: error:`` line; nothing anywhere is a traceback."""
    assert "Traceback" not in result.stderr + result.stdout, result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("affinity: error: "), lines[0]
    return lines[0]


LONG_RUNNING = (
    ("coordinator", "run", "--http-port", "0"),
    ("processor", "run", "--processor-id", "p-1", "--location", "zone-a/h1"),
)


@pytest.mark.parametrize(
    ("command", "code"),
    [*((c, 2) for c in LONG_RUNNING), (("jobmodel", "show"), 1)],
    ids=lambda c: c[0] if isinstance(c, tuple) else str(c),
)
def test_unreachable_zookeeper_is_one_line(
    tmp_path: Path, command: tuple[str, ...], code: int
) -> None:
    """A long-running command that cannot reach ZooKeeper at start cannot start with this
    configuration: exit 2 (issue 15 item 8); a read command fails at run time: exit 1."""
    config = write_config(
        tmp_path / "job.yaml", f"127.0.0.1:{free_port()}", "/affinity", connect_timeout_ms=1000
    )
    result = run_command(*command[:2], "--config", str(config), *command[2:])
    assert result.returncode == code
    line = only_error_line(result)
    assert "could not connect to ZooKeeper within 1.0s" in line
    if code == 2:
        assert "cannot start" in line


@pytest.mark.parametrize("command", [*LONG_RUNNING, ("jobmodel", "show")], ids=lambda c: c[0])
@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"AFFINITY_ZK_CONNECT": "::::not a host"}, "zookeeper.connect"),
        ({"AFFINITY_ZK_CONNECT": "zk-0:2181,,zk-2:2181"}, "zookeeper.connect"),
        ({"AFFINITY_ZK_AUTH": ":pw"}, "zookeeper.auth"),
    ],
    ids=["bad-hostname", "empty-host", "auth-without-user"],
)
def test_a_bad_connect_string_or_auth_is_one_line_exit_2(
    tmp_path: Path, command: tuple[str, ...], env: dict[str, str], key: str
) -> None:
    config = write_config(tmp_path / "job.yaml", "127.0.0.1:2181", "/affinity")
    result = run_command(*command[:2], "--config", str(config), *command[2:], env=env)
    assert result.returncode == 2
    line = only_error_line(result)
    assert f"{key}: " in line
    assert ":pw" not in line


def test_a_processor_with_wrong_credentials_stops_with_one_line(
    zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient], tmp_path: Path
) -> None:
    """It used to retry its registration every second for ever (``member.store_error``)."""
    root = f"/cli-{uuid.uuid4().hex[:8]}"
    store = ZkMetadataStore(
        zk_connect(zk_server.hosts, auth="ops:pw"), f"{root}/clicks-1", run_id="r1", auth="ops:pw"
    )
    store.ensure_layout()
    config = write_config(tmp_path / "job.yaml", zk_server.hosts, root, auth="ops:wrong")
    result = run_command(
        *LONG_RUNNING[1][:2], "--config", str(config), *LONG_RUNNING[1][2:], timeout_s=30
    )
    assert result.returncode == 2  # cannot start with these credentials (issue 15 item 8)
    line = only_error_line(result)
    assert f"{root}/clicks-1" in line
    assert "permission denied" in line
    assert store.processors.locality() == {}
