"""Fencing on a real ZooKeeper (I2): a leader that lost its epoch writes nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from metadata.model import (
    BarrierState,
    ContainerModel,
    FrozenMap,
    JobModel,
    SystemStreamPartition,
    TaskModel,
)
from metadata.serde import dump_job_model
from metadata.zk import FencedOut, LeaderEpoch, ZkMetadataStore
from metadata.zk.chunks import split_blob

pytestmark = pytest.mark.zk


def job_model(version: int, tasks: int) -> JobModel:
    owned = {
        f"Partition {i}": TaskModel(
            f"Partition {i}", frozenset({SystemStreamPartition("kafka", "events", i)}), i
        )
        for i in range(tasks)
    }
    return JobModel(version, FrozenMap({"p-1": ContainerModel("p-1", "zone-a/n1", owned)}))


def snapshot(client: KazooClient, root: str) -> dict[str, tuple[bytes, int]]:
    """Every node under ``root``: (data, znode version)."""
    nodes = {}
    stack = [root]
    while stack:
        path = stack.pop()
        data, stat = client.get(path)
        nodes[path] = (data, stat.version)
        stack += [f"{path}/{child}" for child in client.get_children(path)]
    return nodes


@pytest.fixture
def second_store(
    zk_store: ZkMetadataStore, zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> ZkMetadataStore:
    """Another coordinator replica of the same job, on its own session."""
    return ZkMetadataStore(zk_connect(zk_server.hosts), zk_store.layout.folder, run_id="run-1")


def test_acquiring_bumps_the_epoch(
    zk_store: ZkMetadataStore, second_store: ZkMetadataStore
) -> None:
    first = zk_store.epochs.acquire()
    second = second_store.epochs.acquire()

    assert (first.epoch, second.epoch) == (1, 2)
    assert not zk_store.epochs.holds(first)
    assert zk_store.epochs.holds(second)
    assert zk_store.epochs.current() == second


def test_deposed_leader_publish_fails_and_changes_nothing(
    zk_store: ZkMetadataStore, second_store: ZkMetadataStore
) -> None:
    old = zk_store.epochs.acquire()
    zk_store.job_models.publish(job_model(1, 10), epoch=old, participants=["p-1"])
    second_store.epochs.acquire()
    before = snapshot(zk_store.client, zk_store.layout.folder)
    ops = zk_store.ops

    with pytest.raises(FencedOut) as error:
        zk_store.job_models.publish(job_model(2, 10), epoch=old, participants=["p-1"])

    assert error.value.path == f"{zk_store.layout.folder}/leader/epoch"
    assert "epoch 1" in error.value.problem and "epoch 2" in error.value.problem
    assert snapshot(zk_store.client, zk_store.layout.folder) == before
    assert zk_store.ops == ops
    assert zk_store.job_models.read_latest() == job_model(1, 10)


def test_leader_deposed_while_writing_chunks_commits_nothing(
    zk_store: ZkMetadataStore, second_store: ZkMetadataStore
) -> None:
    slow = ZkMetadataStore(zk_store.client, zk_store.layout.folder, run_id="run-1", chunk_size=512)
    old = slow.epochs.acquire()
    slow.job_models.publish(job_model(1, 10), epoch=old, participants=["p-1"])
    folder = f"{zk_store.layout.folder}/jobModels/2"
    deposed = threading.Event()

    def depose_once_chunks_appear() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if second_store.client.exists(folder) and second_store.client.get_children(folder):
                second_store.epochs.acquire()
                deposed.set()
                return
            time.sleep(0.002)

    big = job_model(2, 40_000)
    _, all_chunks = split_blob(
        dump_job_model(big, run_id="run-1"), version=2, epoch=1, chunk_size=512
    )
    usurper = threading.Thread(target=depose_once_chunks_appear)
    usurper.start()
    try:
        with pytest.raises(FencedOut):
            # Hundreds of chunks: the usurper strikes while they are being written.
            slow.job_models.publish(big, epoch=old, participants=["p-1"])
    finally:
        usurper.join()

    assert deposed.is_set()
    chunks_left = len(zk_store.client.get_children(folder))
    # Chunk writes stopped at the first one after the new epoch.
    assert 0 < chunks_left < len(all_chunks)
    assert zk_store.client.get(folder)[0] == b""  # never committed
    assert zk_store.job_models.latest_version() == 1
    assert zk_store.barriers.state(2) is None
    assert zk_store.job_models.read_latest() == job_model(1, 10)
    # The new leader publishes version 2 over the abandoned attempt.
    new = second_store.epochs.current()
    assert new is not None
    second_store.job_models.publish(job_model(2, 5), epoch=new, participants=["p-1"])
    assert zk_store.job_models.read_latest() == job_model(2, 5)
    names = zk_store.client.get_children(folder)
    assert all(name.startswith(f"e{new.epoch}-") for name in names)


def test_deposed_leader_cannot_decide_a_barrier(
    zk_store: ZkMetadataStore, second_store: ZkMetadataStore
) -> None:
    old = zk_store.epochs.acquire()
    zk_store.job_models.publish(job_model(1, 4), epoch=old, participants=["p-1"])
    second_store.epochs.acquire()

    with pytest.raises(FencedOut):
        zk_store.barriers.set_state(1, BarrierState.DONE, epoch=old)

    assert zk_store.barriers.state(1) == BarrierState.NEW


def test_deposed_leader_cannot_apply_retention(
    zk_store: ZkMetadataStore, second_store: ZkMetadataStore
) -> None:
    store = ZkMetadataStore(zk_store.client, zk_store.layout.folder, run_id="run-1", retention=1)
    old = store.epochs.acquire()
    for version in (1, 2):
        store.job_models.publish(job_model(version, 4), epoch=old, participants=["p-1"])
    # Make version 1 old again behind the store's back, then let the deposed leader try.
    zk_store.client.create(f"{zk_store.layout.folder}/jobModels/0", b"")
    second_store.epochs.acquire()

    with pytest.raises(FencedOut):
        store.job_models.remove_old_versions(epoch=old)

    assert zk_store.client.exists(f"{zk_store.layout.folder}/jobModels/0")


def test_deposed_leader_cannot_remove_below(
    zk_store: ZkMetadataStore, second_store: ZkMetadataStore
) -> None:
    old = zk_store.epochs.acquire()
    for version in (1, 2):
        zk_store.job_models.publish(job_model(version, 4), epoch=old, participants=["p-1"])
    second_store.epochs.acquire()

    with pytest.raises(FencedOut):
        zk_store.job_models.remove_below(2, epoch=old)

    assert zk_store.job_models.versions() == [1, 2]
    assert zk_store.barriers.versions() == [1, 2]


def test_epoch_of_another_job_does_not_fence(
    zk_store: ZkMetadataStore, second_store: ZkMetadataStore
) -> None:
    other_job = ZkMetadataStore(zk_store.client, zk_store.layout.folder + "-other", run_id="run-1")
    other_job.ensure_layout()
    mine: LeaderEpoch = zk_store.epochs.acquire()
    other_job.epochs.acquire()
    zk_store.job_models.publish(job_model(1, 3), epoch=mine, participants=["p-1"])
    assert zk_store.job_models.latest_version() == 1
