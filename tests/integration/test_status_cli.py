"""``affinity status`` against a real ZooKeeper and real coordinator and processor processes:
the text table and ``--json``, before and after a processor dies."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jobharness import AFFINITY, JobHarness

from coordinator.launchers.zookeeper import EmbeddedZooKeeper

pytestmark = [pytest.mark.zk, pytest.mark.slow]

HOSTS = {
    "p-1": "zone-a/rack-1/host-1",
    "p-2": "zone-a/rack-2/host-2",
    "p-3": "zone-b/rack-3/host-3",
}


@pytest.fixture
def job(zk_private_server: EmbeddedZooKeeper, tmp_path: Path) -> Iterator[JobHarness]:
    harness = JobHarness(zk_private_server, tmp_path, partitions=12)
    yield harness
    harness.stop_all()


def status(job: JobHarness, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AFFINITY, "status", "--config", str(job.config), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def status_json(job: JobHarness) -> dict[str, Any]:
    done = status(job, "--json")
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def test_status_text_and_json_before_and_after_a_processor_dies(job: JobHarness) -> None:
    job.start_coordinator("c-1")
    job.start_coordinator("c-2")
    for pid, location in HOSTS.items():
        job.start_processor(pid, location)
    job.wait_for(job.settled, 60, "the first model in force")
    first = job.done_model()
    assert first is not None

    document = status_json(job)
    assert document["format"] == 1
    assert document["job"]["folder"] == "/affinity/clicks-1"
    assert document["leader"]["replica"] == document["leader"]["replicas"][0]
    assert len(document["leader"]["replicas"]) == 2
    assert document["version"]["in_force"] == first.version
    assert document["barrier"]["state"] == "DONE"
    assert document["tasks"] == 12
    counts = {p["id"]: p["tasks"] for p in document["processors"]}
    assert counts == {pid: len(c.tasks) for pid, c in first.containers.items()}
    zones = document["locations"]["children"]
    assert [z["name"] for z in zones] == ["zone-a", "zone-b"]
    assert [r["name"] for r in zones[0]["children"]] == ["rack-1", "rack-2"]
    host = zones[1]["children"][0]["children"][0]
    assert (host["path"], host["processors"]) == ("zone-b/rack-3/host-3", ["p-3"])
    assert zones[0]["tasks"] == counts["p-1"] + counts["p-2"]

    lost = len(first.containers["p-3"].tasks)
    job.kill(job.processors["p-3"])
    job.mark_dead("p-3")
    job.wait_for(
        lambda: (
            job.settled() and status_json(job)["rebalances"][-1]["trigger"] == "processors gone"
        ),
        60,
        "the rebalance after p-3 died, in the history",
    )
    after = status_json(job)
    model = job.done_model()
    assert model is not None and after["version"]["in_force"] == model.version > first.version
    assert {p["id"] for p in after["processors"]} == {"p-1", "p-2"}
    last = after["rebalances"][-1]
    assert (last["version"], last["outcome"], last["moved"]) == (model.version, "DONE", lost)
    assert [z["name"] for z in after["locations"]["children"]] == ["zone-a"]

    text = status(job)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert f"leader: {after['leader']['replica']} (2 replicas in the election)" in out
    assert f"version in force: {model.version} (latest {model.version})" in out
    assert f"barrier {model.version}: DONE, 2 of 2 joined" in out
    for name in ("zone-a", "rack-1", "rack-2", "host-1", "host-2", "p-1", "p-2"):
        assert name in out
    assert "zone-b" not in out and "p-3 " not in out
    assert "last rebalances" in out and "processors gone" in out
    row = next(line for line in out.splitlines() if "processors gone" in line)
    assert str(model.version) in row and "DONE" in row and str(lost) in row


def test_status_of_a_missing_job_is_one_line_and_exit_code_2(
    zk_private_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    harness = JobHarness(zk_private_server, tmp_path, name="nosuchjob")
    done = status(harness)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("affinity: error: no job nosuchjob-1")
    assert len(done.stderr.strip().splitlines()) == 1
