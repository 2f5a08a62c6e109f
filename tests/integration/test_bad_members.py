"""Members that break the rules, against a real ZooKeeper with real coordinator and processor
processes: a second processor with a live processor's id (I3), a malformed registration.

Each test has its own ZooKeeper server and its own processes (``jobharness.JobHarness``).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobharness import AFFINITY, JobHarness, Proc

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer

pytestmark = [pytest.mark.zk, pytest.mark.slow]


@pytest.fixture
def job(zk_private_server: ZooKeeperServer, tmp_path: Path) -> Iterator[JobHarness]:
    harness = JobHarness(zk_private_server, tmp_path / "job", partitions=6, session_timeout_ms=4000)
    yield harness
    harness.stop_all()


def spawn_processor(job: JobHarness, name: str, pid: str, location: str) -> Proc:
    """``affinity processor run`` outside the harness's bookkeeping (its status file: name)."""
    status = job.workdir / f"{name}.json"
    args = ["processor", "run", "--config", str(job.config), "--processor-id", pid]
    return job._spawn(name, [*args, "--location", location, "--status-file", str(status)])


def log_events(proc: Proc) -> list[str]:
    events = []
    for line in proc.log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            events.append(json.loads(line).get("event", ""))
    return events


# ------------------------------------------------------------------------ item 1 (I3)


def test_a_second_processor_with_a_live_processors_id_is_refused(job: JobHarness) -> None:
    job.start_coordinator("coordinator-0")
    job.start_processor("dup", "zone-a/h1")
    job.wait_for(job.settled, 30, "dup to run every task")
    (older,), _ = job.store.processors.read()
    before = job.running("dup")
    assert len(before) == 6

    # The duplicate waits a session timeout (4 s) + 1 s for the older one to go; meanwhile a
    # third processor comes, so new versions (and barriers) are published under its nose.
    second = spawn_processor(job, "dup-2", "dup", "zone-b/h2")
    job.start_processor("p-3", "zone-c/h3")
    code = second.popen.wait(30)
    job.wait_for(job.settled, 30, "dup and p-3 to share the tasks")

    assert code == 1
    stderr = [line for line in second.log.read_text().splitlines() if "affinity: error" in line]
    assert len(stderr) == 1, stderr
    assert "'dup'" in stderr[0] and older.node in stderr[0]
    events = log_events(second)
    assert "processor.duplicate_id" in events and "processor.registration_refused" in events
    assert "processor.joined_barrier" not in events and "sample.start" not in events
    assert not (job.workdir / "dup-2.json.events").exists()  # started (and stopped) nothing

    # The older one was never displaced: it still holds the id, at its location, and runs its
    # share of the tasks; the refused registration is gone.
    (first, _third), duplicates = job.store.processors.read()
    assert (first.node, first.location_id) == (older.node, "zone-a/h1") and not duplicates
    model = job.done_model()
    assert model is not None and set(model.containers) == {"dup", "p-3"}
    assert set(job.running("dup")) == set(model.containers["dup"].tasks)
    assert job.processors["dup"].popen.poll() is None
    job.assert_no_task_ran_twice_at_once()


# ------------------------------------------------------------------------ item 4


def bad_registration(job: JobHarness, data: bytes) -> str:
    """What any processor can write: an ephemeral sequential processors/processor- node."""
    path: str = job.store.client.create(
        job.store.layout.processor_prefix, data, ephemeral=True, sequence=True
    )
    return path


@pytest.mark.parametrize(
    "data", [b"{not json", b'{"processor_id": "p-x", "host": "h"}'], ids=["not-json", "no-location"]
)
def test_a_malformed_registration_is_skipped_and_the_job_rebalances(
    job: JobHarness, data: bytes
) -> None:
    job.start_coordinator("coordinator-0")
    job.start_processor("p-1", "zone-a/h1")
    job.wait_for(job.settled, 30, "p-1 to run every task")
    first = job.done_model()
    assert first is not None
    bad = bad_registration(job, data)

    job.start_processor("p-2", "zone-b/h2")
    job.wait_for(job.settled, 30, "p-2 to get its tasks despite the bad registration")
    model = job.done_model()
    assert model is not None and set(model.containers) == {"p-1", "p-2"}
    assert len(model.containers["p-2"].tasks) == 3
    assert model.version <= first.version + 3  # no storm of elections and versions

    live, _ = job.store.processors.read()
    assert [r.processor_id for r in live] == ["p-1", "p-2"]
    assert job.store.processors.skipped == (bad,)
    log = job.coordinators["coordinator-0"].log.read_text()
    assert log.count('"coordinator.leading"') == 1  # never stepped down
    assert "zk.bad_registration_skipped" in log and bad in log
    # ... and counted: the coordinator's /metrics shows the skipped registration.
    started = next(json.loads(line) for line in log.splitlines() if '"coordinator.started"' in line)
    url = f"http://127.0.0.1:{started['http_port']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert "affinity_registrations_skipped 1.0" in response.read().decode()

    shown = subprocess.run(
        [AFFINITY, "locality", "show", "--config", str(job.config), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["processors"] == {"p-1": "zone-a/h1", "p-2": "zone-b/h2"}
