"""Version barriers on a real ZooKeeper: join, watch, decide, session expiry, bad data."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from polling import wait_for

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from metadata.errors import CorruptDataError
from metadata.model import BarrierState, ContainerModel, FrozenMap, JobModel
from metadata.zk import LeaderEpoch, NotFound, WriteConflict, ZkMetadataStore

pytestmark = pytest.mark.zk

PROCESSORS = ["p-1", "p-2", "zone/a b"]


@pytest.fixture
def epoch(zk_store: ZkMetadataStore) -> LeaderEpoch:
    """Version 1 published with barrier 1 expecting PROCESSORS."""
    leader_epoch = zk_store.epochs.acquire()
    containers = {pid: ContainerModel(pid, "loc") for pid in PROCESSORS}
    zk_store.job_models.publish(
        JobModel(1, FrozenMap(containers)), epoch=leader_epoch, participants=PROCESSORS
    )
    return leader_epoch


@pytest.fixture
def processor_store(
    zk_store: ZkMetadataStore, zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> ZkMetadataStore:
    return ZkMetadataStore(zk_connect(zk_server.hosts), zk_store.layout.folder, run_id="run-1")


def test_join_watch_and_done(
    zk_store: ZkMetadataStore, processor_store: ZkMetadataStore, epoch: LeaderEpoch
) -> None:
    events: list[tuple[str | None, set[str]]] = []
    done = threading.Event()

    def on_barrier(state: str | None, joined: set[str]) -> None:
        events.append((state, joined))
        if state == BarrierState.DONE:
            done.set()

    zk_store.barriers.watch(1, on_barrier)
    for pid in PROCESSORS:
        processor_store.barriers.join(1, pid)
    wait_for(lambda: events[-1][1] == set(PROCESSORS))
    assert zk_store.barriers.participants(1) == set(PROCESSORS)
    zk_store.barriers.set_state(1, BarrierState.DONE, epoch=epoch)

    assert done.wait(10)
    assert events[0][0] == BarrierState.NEW
    assert events[-1] == (BarrierState.DONE, set(PROCESSORS))
    assert zk_store.barriers.state(1) == BarrierState.DONE
    assert type(zk_store.barriers.state(1)) is BarrierState


def test_participant_leaves_when_its_session_expires(
    zk_store: ZkMetadataStore,
    processor_store: ZkMetadataStore,
    zk_server: ZooKeeperServer,
    epoch: LeaderEpoch,
) -> None:
    processor_store.barriers.join(1, "p-1")
    zk_store.barriers.join(1, "p-2")
    assert zk_store.barriers.participants(1) == {"p-1", "p-2"}

    zk_server.expire_session(processor_store.client)

    assert zk_store.barriers.participants(1) == {"p-2"}


def test_join_is_idempotent_per_session_and_exclusive_across_sessions(
    zk_store: ZkMetadataStore, processor_store: ZkMetadataStore, epoch: LeaderEpoch
) -> None:
    processor_store.barriers.join(1, "p-1")
    processor_store.barriers.join(1, "p-1")
    with pytest.raises(WriteConflict, match="another session"):
        zk_store.barriers.join(1, "p-1")
    assert zk_store.barriers.participants(1) == {"p-1"}


def test_missing_barrier(zk_store: ZkMetadataStore) -> None:
    assert zk_store.barriers.state(9) is None
    with pytest.raises(NotFound) as error:
        zk_store.barriers.join(9, "p-1")
    assert error.value.path == f"{zk_store.layout.folder}/barriers/barrier_9"
    with pytest.raises(NotFound):
        zk_store.barriers.participants(9)
    with pytest.raises(NotFound):
        zk_store.barriers.expected(9)


def test_a_decided_barrier_stays_decided(zk_store: ZkMetadataStore, epoch: LeaderEpoch) -> None:
    zk_store.barriers.set_state(1, BarrierState.TIMED_OUT, epoch=epoch)
    zk_store.barriers.set_state(1, BarrierState.TIMED_OUT, epoch=epoch)  # same state: a no-op
    with pytest.raises(WriteConflict, match="already TIMED_OUT"):
        zk_store.barriers.set_state(1, BarrierState.DONE, epoch=epoch)
    with pytest.raises(ValueError):
        zk_store.barriers.set_state(1, BarrierState.NEW, epoch=epoch)
    assert zk_store.barriers.state(1) == BarrierState.TIMED_OUT


def test_garbage_barrier_state(zk_store: ZkMetadataStore, epoch: LeaderEpoch) -> None:
    path = f"{zk_store.layout.folder}/barriers/barrier_1/state"
    zk_store.client.set(path, b"MAYBE")
    with pytest.raises(CorruptDataError) as error:
        zk_store.barriers.state(1)
    assert error.value.path == path
    assert "one of ['DONE', 'NEW', 'TIMED_OUT'], got 'MAYBE'" in str(error.value)
    assert zk_store.client.get(path)[0] == b"MAYBE"


def test_watch_ends_when_retention_removes_the_barrier(zk_store: ZkMetadataStore) -> None:
    store = ZkMetadataStore(zk_store.client, zk_store.layout.folder, run_id="run-1", retention=1)
    epoch = store.epochs.acquire()
    model = JobModel(1, FrozenMap({"p-1": ContainerModel("p-1", "loc")}))
    store.job_models.publish(model, epoch=epoch, participants=["p-1"])
    states: list[str | None] = []
    store.barriers.watch(1, lambda state, joined: states.append(state))

    store.job_models.publish(
        JobModel(2, FrozenMap({"p-1": ContainerModel("p-1", "loc")})),
        epoch=epoch,
        participants=["p-1"],
    )

    wait_for(lambda: states[-1] is None)
    assert states[0] == BarrierState.NEW


def test_state_watch_sees_decisions_but_not_joins(
    zk_store: ZkMetadataStore, processor_store: ZkMetadataStore, epoch: LeaderEpoch
) -> None:
    states: list[str | None] = []
    processor_store.barriers.watch_state(1, states.append)
    reads_before = processor_store.reads
    for pid in PROCESSORS:
        processor_store.barriers.join(1, pid)
    time.sleep(0.3)
    assert states == [BarrierState.NEW]  # joins change the participants, not the state
    zk_store.barriers.set_state(1, BarrierState.DONE, epoch=epoch)
    wait_for(lambda: states == [BarrierState.NEW, BarrierState.DONE])
    assert processor_store.reads == reads_before  # the watch counted nothing of its own


def test_state_watch_of_a_barrier_not_yet_created_and_removed(zk_store: ZkMetadataStore) -> None:
    store = ZkMetadataStore(zk_store.client, zk_store.layout.folder, run_id="run-1", retention=1)
    epoch = store.epochs.acquire()
    states: list[str | None] = []
    store.barriers.watch_state(1, states.append)
    model = JobModel(1, FrozenMap({"p-1": ContainerModel("p-1", "loc")}))
    store.job_models.publish(model, epoch=epoch, participants=["p-1"])
    wait_for(lambda: states == [None, BarrierState.NEW])
    store.job_models.publish(
        JobModel(2, FrozenMap({"p-1": ContainerModel("p-1", "loc")})),
        epoch=epoch,
        participants=["p-1"],
    )
    wait_for(lambda: states == [None, BarrierState.NEW, None])  # retention removed barrier 1
