"""A grouper that cannot be built stops ``affinity coordinator run`` at start-up (issue 28 item 1).

The grouper runs in a worker process (:mod:`coordinator.leader.grouper_worker`); when that move
dropped the start-up check, a replica with a grouper typo led, answered ``/readyz`` 200, logged
one ``grouper_failed`` and never published, so a rolling update with a typo passed readiness.
Real processes on a real ZooKeeper: each bad configuration exits 2 with one line naming the key,
before the replica connects (its job folder is never created, so it never took part in the
election). The plugins are a real distribution on ``PYTHONPATH`` (a ``.dist-info`` folder with
its entry points), loaded in the worker exactly as a rebalance loads them. A replica whose
grouper can no longer be built later (its worker replaced after a time-out) is not ready.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from jobharness import JobHarness
from kazoo.client import KazooClient

from coordinator.launchers.zookeeper import EmbeddedZooKeeper

pytestmark = [pytest.mark.zk, pytest.mark.slow]

AFFINITY = str(Path(sys.executable).with_name("affinity"))

PLUGINS = '''
import os
from pathlib import Path

from groupers import HostAffinityGrouper


class Boom:
    """Its constructor raises, whatever it is given."""

    def __init__(self, level: int = 0) -> None:
        raise RuntimeError(f"licence server unreachable (level {level})")


class BuiltOnce:
    """Builds once per marker file; its first grouping outlives any time limit."""

    def __init__(self) -> None:
        marker = Path(os.environ["BUILT_ONCE_MARKER"])
        if marker.exists():
            raise RuntimeError("licence already used")
        marker.write_text("built")
        self.runs = 0

    def group(self, tasks, metadata):
        import time

        time.sleep(30)
        return HostAffinityGrouper().group(tasks, metadata)
'''


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    """A folder holding a module and the ``.dist-info`` of a distribution that registers
    ``boom``, ``built-once`` and ``missing`` (a module that does not exist) as groupers."""
    folder = tmp_path / "plugins"
    info = folder / "affinity_test_groupers-0.1.dist-info"
    info.mkdir(parents=True)
    (folder / "affinity_test_groupers.py").write_text(PLUGINS)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: affinity-test-groupers\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        "[affinity.groupers]\n"
        "boom = affinity_test_groupers:Boom\n"
        "built-once = affinity_test_groupers:BuiltOnce\n"
        "missing = affinity_no_such_module:Grouper\n"
    )
    return folder


def config(path: Path, hosts: str, root: str, grouper: str) -> Path:
    path.write_text(
        "job: {name: startup, id: '1', run_id: r1}\n"
        f"zookeeper: {{connect: '{hosts}', root: {root}, session_timeout_ms: 4000}}\n"
        "inputs: [{system: kafka, stream: events, partitions: 4}]\n"
        f"grouper: {grouper}\n"
        "coordinator: {debounce_ms: 100, http_host: 127.0.0.1, http_port: 0}\n"
        "logging: {format: json}\n"
    )
    return path


CASES = [
    ("{name: no-such-grouper}", {}, "job.yaml: grouper.name: unknown grouper 'no-such-grouper'"),
    (
        "{name: host-affinity, options: {bogus: 1}}",
        {},
        "job.yaml: grouper.options: grouper 'host-affinity' does not take option(s) bogus",
    ),
    (
        "{name: host-affinity}",
        {"AFFINITY_GROUPER": "nope"},
        "the environment (AFFINITY_GROUPER): grouper.name: unknown grouper 'nope'",
    ),
    (
        "{name: boom}",
        {},
        "job.yaml: grouper.name: cannot create grouper 'boom': RuntimeError: licence server"
        " unreachable (level 0)",
    ),
    (
        "{name: boom, options: {level: 3}}",
        {},
        "job.yaml: grouper.options: cannot create grouper 'boom': RuntimeError: licence server"
        " unreachable (level 3)",
    ),
    (
        "{name: missing}",
        {},
        "job.yaml: grouper.name: grouper plugin 'missing' (affinity_no_such_module:Grouper) failed"
        " to load: ModuleNotFoundError: No module named 'affinity_no_such_module'",
    ),
]


@pytest.mark.parametrize(
    ("grouper", "env", "message"),
    CASES,
    ids=["unknown", "unknown-option", "env-unknown", "raises", "raises-options", "module-missing"],
)
def test_a_grouper_that_cannot_be_built_exits_2_before_the_election(
    zk_server: EmbeddedZooKeeper,
    zk_client: KazooClient,
    tmp_path: Path,
    plugins: Path,
    grouper: str,
    env: dict[str, str],
    message: str,
) -> None:
    root = f"/startup-{tmp_path.name}"
    path = config(tmp_path / "job.yaml", zk_server.hosts, root, grouper)
    environ = {**os.environ, "PYTHONPATH": str(plugins), **env}
    began = time.monotonic()
    try:
        done = subprocess.run(
            [AFFINITY, "coordinator", "run", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=45,
            check=False,
            env=environ,
        )
    except subprocess.TimeoutExpired as exc:  # it ran as a replica instead
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        pytest.fail(f"the replica did not exit; it logged:\n{out[-3000:]}")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("affinity: error: invalid configuration in "), lines[0]
    assert message in lines[0], lines[0]
    assert "coordinator.started" not in done.stdout  # no HTTP server, so no /readyz at all
    assert time.monotonic() - began < 30
    # It never connected: no job folder, no contender in the election.
    assert zk_client.exists(root) is None


def readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=3) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def logged(log: Path, event: str) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for line in log.read_text(errors="replace").splitlines()
        if line.startswith("{") and f'"{event}"' in line
    ]


def test_a_replica_whose_grouper_can_no_longer_be_built_is_not_ready(
    job_factory: Callable[..., JobHarness],
    plugins: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``built-once`` builds at start-up (ready, leading), then its first grouping is killed at
    the time limit; the worker that replaces it cannot build the grouper again: from then on
    the replica answers /readyz 503, and says why in its log."""
    monkeypatch.setenv("PYTHONPATH", str(plugins))
    monkeypatch.setenv("BUILT_ONCE_MARKER", str(tmp_path / "built-once.marker"))
    job = job_factory(partitions=4, debounce_ms=100)
    text = job.config.read_text().replace("{name: host-affinity,", "{name: built-once,")
    job.config.write_text(text.replace("options: {}}", "options: {}, timeout_ms: 1000}"))
    coordinator = job.start_coordinator("coordinator-0")
    ports: list[int] = []

    def started() -> bool:
        found = logged(coordinator.log, "coordinator.started")
        ports.extend(int(r["http_port"]) for r in found)  # type: ignore[call-overload]
        return bool(found)

    job.wait_for(started, 30, "coordinator.started")
    port = ports[0]
    job.wait_for(lambda: readyz(port) == 200, 20, "ready with a grouper that builds")
    job.start_processor("p-1", "host-a")

    def timed_out() -> bool:
        failed = logged(coordinator.log, "coordinator.grouper_failed")
        return any("timed out" in str(record["error"]) for record in failed)

    job.wait_for(timed_out, 30, "the first grouping killed at its time limit")
    job.start_processor("p-2", "host-b")  # the next rebalance needs a new worker
    job.wait_for(lambda: readyz(port) == 503, 30, "not ready once the grouper cannot be built")
    failures = [str(r["error"]) for r in logged(coordinator.log, "coordinator.grouper_failed")]
    assert any("cannot create grouper 'built-once'" in f for f in failures), failures
    for _ in range(10):  # and it stays so: no worker can build it
        assert readyz(port) == 503
        time.sleep(0.3)
    assert coordinator.popen.poll() is None  # alive (/healthz): restarting it would not help
