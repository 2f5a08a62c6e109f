"""Reads that decide on the latest state sync first: a lagging follower serves no old model.

SAMZA-2301: a processor connected to a ZooKeeper follower that lags behind the leader read an
old job model and acted on it. ``zk_lagging_ensemble`` makes that follower on demand: its quorum
links are held (``partition()``), so it keeps answering its clients with the state it had while
the other two servers commit new writes; ``heal()`` lets it catch up. Clients here are pinned to
that follower. Without ``sync`` a read returns the old state at once (the first test shows the
lag is real); with it, the server catches up first (the heal comes a second later).

The same holds for the two reads of the adapters that decide without a write of their own just
before: the member's fetch of the latest version (after a store error) and the leader's read of
the job's state on gaining leadership.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import structlog
from kazoo.client import KazooClient

from coordinator.config import load_config
from coordinator.launchers.ensemble import ZooKeeperEnsemble
from coordinator.leader.job_state import read_job_state
from coordinator.leader.service import job_tasks
from coordinator.member.group import MemberGroup
from coordinator.protocol.member_events import FetchLatestVersion, VersionAnnounced
from metadata.model import ContainerModel, FrozenMap, JobModel
from metadata.zk import ZkMetadataStore, connect

pytestmark = [pytest.mark.zk, pytest.mark.slow]

LAGGING = 2
HEAL_AFTER_S = 1.0


class Job:
    """A job folder written through the healthy servers and read through the lagging one."""

    def __init__(self, ensemble: ZooKeeperEnsemble) -> None:
        self.ensemble = ensemble
        self.name = f"lag-{uuid.uuid4().hex[:8]}"
        self.folder = f"/affinity-test/{self.name}-1"
        healthy = [i for i in range(len(ensemble.servers)) if i != LAGGING]
        self.writer_client = connect(ensemble.hosts_of(*healthy), session_timeout_s=20.0)
        self.reader_client = connect(ensemble.hosts_of(LAGGING), session_timeout_s=20.0)
        self.writer = ZkMetadataStore(self.writer_client, self.folder, run_id="r1")
        self.reader = ZkMetadataStore(self.reader_client, self.folder, run_id="r1")
        self.writer.ensure_layout()
        self.epoch = self.writer.epochs.acquire()
        self.tasks = job_tasks(self.config())

    def config(self) -> object:
        return load_config(
            data={
                "job": {"name": self.name, "id": "1", "run_id": "r1"},
                "zookeeper": {"connect": self.ensemble.hosts, "root": "/affinity-test"},
                "inputs": [{"system": "kafka", "stream": "events", "partitions": 4}],
            },
            environ={},
        )

    def publish(self, version: int, processors: tuple[str, ...]) -> JobModel:
        containers = {
            pid: ContainerModel(
                pid, "host-a", FrozenMap({t.name: t for t in self.tasks[i :: len(processors)]})
            )
            for i, pid in enumerate(processors)
        }
        model = JobModel(version, FrozenMap(containers), FrozenMap({"run.id": "r1"}))
        self.writer.job_models.publish(model, epoch=self.epoch, participants=list(processors))
        return model

    def lagging(self, read: Callable[[], object]) -> tuple[object, object, float]:
        """Partition the follower; return (a read without sync, ``read()``, its seconds), with
        the heal arriving ``HEAL_AFTER_S`` after ``read()`` started."""
        stale = self.reader.job_models.latest_version()
        timer = threading.Timer(HEAL_AFTER_S, self.ensemble.heal)
        started = time.monotonic()
        timer.start()
        try:
            fresh = read()
        finally:
            timer.cancel()
            self.ensemble.heal()
        return stale, fresh, time.monotonic() - started

    def close(self) -> None:
        for store in (self.writer, self.reader):
            store.close()
        for client in (self.writer_client, self.reader_client):
            client.stop()
            client.close()


@pytest.fixture
def job(zk_lagging_ensemble: ZooKeeperEnsemble) -> Iterator[Job]:
    ensemble = zk_lagging_ensemble
    ensemble.heal()
    ensemble.make_follower(LAGGING)
    created = Job(ensemble)
    created.publish(1, ("p1",))
    created.reader.sync()
    assert created.reader.job_models.latest_version() == 1
    try:
        yield created
    finally:
        ensemble.heal()
        created.close()


def test_a_lagging_follower_serves_the_old_version_until_synced(job: Job) -> None:
    job.ensemble.partition()
    job.publish(2, ("p1", "p2"))  # committed by the leader and the other follower

    def synced_read() -> int | None:
        job.reader.sync()
        return job.reader.job_models.latest_version()

    stale, fresh, seconds = job.lagging(synced_read)
    # The lag is real: without sync the follower answers v1.
    assert stale == 1, f"server {LAGGING} did not lag; modes {job.ensemble.modes()}"
    assert fresh == 2, f"read v{fresh} after sync"
    assert seconds >= HEAL_AFTER_S - 0.1  # sync waited for the follower to catch up


def test_a_member_fetching_the_latest_version_does_not_get_an_old_one(job: Job) -> None:
    group = MemberGroup(
        job.reader_client, job.reader, on_start=lambda *a: None, on_stop=lambda *a: None
    )
    job.ensemble.partition()
    job.publish(2, ("p1", "p2"))
    stale, fresh, _ = job.lagging(
        lambda: group._fetch_latest_version(None, FetchLatestVersion())  # type: ignore[arg-type]
    )
    assert stale == 1
    assert fresh == [VersionAnnounced(2)]


def test_a_new_leader_reads_the_state_the_zookeeper_leader_has(job: Job) -> None:
    log = structlog.get_logger("test")
    job.ensemble.partition()
    published = job.publish(2, ("p1", "p2"))
    stale, gained, _ = job.lagging(lambda: read_job_state(job.reader, 0.0, log))
    assert stale == 1
    assert gained.latest == published  # type: ignore[attr-defined]


def test_the_client_pins_hold(job: Job, zk_lagging_ensemble: ZooKeeperEnsemble) -> None:
    """The premise of the tests above: the reader talks to the lagging follower only."""
    client: KazooClient = job.reader_client
    _host, port = client._connection._socket.getpeername()
    assert port == zk_lagging_ensemble.servers[LAGGING].port
    assert zk_lagging_ensemble.modes()[LAGGING] == "follower"
