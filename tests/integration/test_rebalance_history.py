"""The leader records every decided rebalance in the job's history (real ZooKeeper, real
coordinator and processor processes): the trigger, the version, moved and kept-local tasks, the
phase times and the outcome."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from jobharness import JobHarness

from coordinator.launchers.zookeeper import EmbeddedZooKeeper

pytestmark = [pytest.mark.zk, pytest.mark.slow]


@pytest.fixture
def job(zk_private_server: EmbeddedZooKeeper, tmp_path: Path) -> Iterator[JobHarness]:
    harness = JobHarness(zk_private_server, tmp_path, partitions=12)
    yield harness
    harness.stop_all()


def test_history_records_the_first_model_and_a_processor_death(job: JobHarness) -> None:
    job.start_coordinator("c-1")
    for pid, host in (("p-1", "zone-a/host-1"), ("p-2", "zone-a/host-2"), ("p-3", "zone-b/host-3")):
        job.start_processor(pid, host)
    job.wait_for(job.settled, 60, "the first model in force")
    first = job.done_model()
    assert first is not None
    lost = len(first.containers["p-3"].tasks)

    job.kill(job.processors["p-3"])
    job.mark_dead("p-3")
    job.wait_for(lambda: job.settled() and len(job.store.history.read()) >= 2, 60, "p-3 gone")

    entries = job.store.history.read()
    last = entries[-1]
    assert [e.outcome for e in entries] == ["DONE"] * len(entries)
    assert entries[0].trigger in ("first model", "processors new")
    assert (last.version, last.trigger) == (job.done_model().version, "processors gone")  # type: ignore[union-attr]
    assert last.moved == lost and last.processors == 2 and last.tasks == 12
    assert last.kept_local == 12 - lost  # the survivors keep theirs; p-3's state is lost
    assert set(last.phases) == {"debounce", "grouper", "publish", "barrier"}
    assert all(v is not None and v >= 0 for v in last.phases.values())
    assert last.phases["debounce"] >= 0.3  # debounce_ms: 300
    assert last.published_at <= last.decided_at
    assert last.epoch >= 1 and last.leader
    versions = [e.version for e in entries]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
