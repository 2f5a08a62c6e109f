"""A processor cut off from ZooKeeper stops its tasks before its session can expire (rule 7b).

While a processor's connection is down its session may still expire on the server, and the
leader then gives its tasks to others. The processor learns of the expiry only when it reaches a
server again, so without a fence it would run those tasks beside their new owner (I3) for as long
as it stays cut off. Here one processor reaches the real ZooKeeper server through a relay that
holds all traffic (a network partition); the other processor and the coordinator do not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobharness import JobHarness

from coordinator.launchers.ensemble import Link
from coordinator.launchers.zookeeper import EmbeddedZooKeeper

pytestmark = [pytest.mark.zk, pytest.mark.slow]

SESSION_TIMEOUT_MS = 4000


@pytest.fixture
def job(zk_private_server: EmbeddedZooKeeper, tmp_path: Path) -> Iterator[JobHarness]:
    harness = JobHarness(
        zk_private_server, tmp_path / "job", partitions=8, session_timeout_ms=SESSION_TIMEOUT_MS
    )
    yield harness
    harness.stop_all()


def _first(job: JobHarness, pid: str, event: str, tasks: set[str]) -> float | None:
    """When ``pid`` first logged ``event`` ("start"/"stop") for any of ``tasks``."""
    for record in job.events():
        if record["processor"] == pid and record["event"] == event and tasks & set(record["tasks"]):
            return float(record["t"])
    return None


def test_a_cut_off_processor_stops_its_tasks_before_another_starts_them(
    job: JobHarness, zk_private_server: EmbeddedZooKeeper
) -> None:
    link = Link(zk_private_server.port)
    try:
        job.start_coordinator("coordinator-0")
        job.start_processor("p-1", "host-a", connect=f"127.0.0.1:{link.port}")
        job.start_processor("p-2", "host-b")
        job.wait_for(job.settled, 30, "the first job model to settle")
        cut_off = set(job.running("p-1"))
        assert cut_off, "p-1 runs nothing: the test would prove nothing"

        link.pause()  # p-1 hears nothing from ZooKeeper, and ZooKeeper nothing from it
        paused_at = time.time()
        job.wait_for(lambda: cut_off <= set(job.running("p-2")), 30, "p-2 to take over p-1's tasks")
        stopped = _first(job, "p-1", "stop", cut_off)
        taken = _first(job, "p-2", "start", cut_off)
        assert stopped is not None, "p-1 kept running its tasks while cut off"
        assert taken is not None
        # Fenced while cut off: before its session could expire, so before p-2 took over.
        assert stopped < taken
        assert stopped - paused_at < SESSION_TIMEOUT_MS / 1000
        job.assert_no_task_ran_twice_at_once()
        assert "processor.fenced" in (job.workdir / "p-1.log").read_text()

        link.resume()  # p-1 finds its session expired, registers again and gets a share back
        job.wait_for(job.settled, 40, "p-1 to rejoin after the partition")
        assert job.running("p-1")
        job.assert_no_task_ran_twice_at_once()
    finally:
        link.close()


def test_fenced_processors_restart_their_tasks_when_their_sessions_come_back(
    job: JobHarness, zk_private_server: EmbeddedZooKeeper
) -> None:
    """ZooKeeper down past the fence time, back before any session expires (a restarted server
    gives every session a fresh timeout): each processor stops its tasks, then, the same session
    back, reads the model in force again and restarts them - no new version, same owners."""
    job.start_coordinator("coordinator-0")
    job.start_processor("p-1", "host-a")
    job.start_processor("p-2", "host-b")
    job.wait_for(job.settled, 30, "the first job model to settle")
    before = job.done_model()
    assert before is not None
    owners = {pid: set(job.running(pid)) for pid in ("p-1", "p-2")}

    zk_private_server.kill()
    fence_s = SESSION_TIMEOUT_MS / 1000 / 4
    job.wait_for(
        lambda: not job.running("p-1") and not job.running("p-2"), 10 * fence_s, "the fences"
    )
    zk_private_server.start()

    job.wait_for(
        lambda: all(set(job.running(pid)) == tasks for pid, tasks in owners.items()),
        30,
        "both processors to restart their tasks",
    )
    after = job.done_model()
    assert after is not None and after.version == before.version
    for pid in owners:
        assert "processor.fenced" in (job.workdir / f"{pid}.log").read_text()
    job.assert_no_task_ran_twice_at_once()
