"""Replicas and capacity (issue 13), the coordinator's part, against a real ZooKeeper with real
coordinator and processor processes (``affinity coordinator run``, ``affinity processor run``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobharness import AFFINITY, JobHarness

from coordinator.demo.zookeeper import EmbeddedZooKeeper as ZooKeeperServer

pytestmark = [pytest.mark.zk, pytest.mark.slow]


@pytest.fixture
def job_factory(zk_private_server: ZooKeeperServer, tmp_path: Path) -> Iterator[type[JobHarness]]:
    made: list[JobHarness] = []

    class Factory(JobHarness):
        def __init__(self, **kw: object) -> None:
            super().__init__(zk_private_server, tmp_path / f"job{len(made)}", **kw)  # type: ignore[arg-type]
            made.append(self)

    yield Factory
    for job in made:
        job.stop_all()


def test_processors_get_tasks_in_proportion_to_their_registered_capacity(
    job_factory: type[JobHarness],
) -> None:
    job = job_factory(partitions=12)
    job.start_coordinator("coordinator-0")
    job.start_processor("big", "host-a", "--capacity", "3")
    job.start_processor("small", "host-b")
    job.wait_for(job.settled, 30, "the first job model to settle")
    model = job.done_model()
    assert model is not None
    assert {pid: len(c.tasks) for pid, c in model.containers.items()} == {"big": 9, "small": 3}
    live, _ = job.store.processors.read()
    assert {r.processor_id: r.capacity for r in live} == {"big": 3, "small": 1}


def test_a_bad_capacity_is_refused_in_one_line(job_factory: type[JobHarness]) -> None:
    job = job_factory()
    run = subprocess.run(
        [
            AFFINITY,
            "processor",
            "run",
            "--config",
            str(job.config),
            "--processor-id",
            "p",
            "--location",
            "h",
            "--capacity",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.strip() == "affinity: error: --capacity must be an integer >= 1, got '0'"
