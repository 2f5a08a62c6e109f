"""A processor's view of a barrier on a real ZooKeeper: join and first read in one round trip,
then the state watched until it is decided, and nothing read after that."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from polling import wait_for
from zkrequests import requests_sent

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from metadata.model import BarrierState, ContainerModel, FrozenMap, JobModel
from metadata.zk import LeaderEpoch, NotFound, StoreUnavailable, WriteConflict, ZkMetadataStore

pytestmark = pytest.mark.zk


def publish(store: ZkMetadataStore, epoch: LeaderEpoch, version: int) -> None:
    containers = {"p-1": ContainerModel("p-1", "loc")}
    model = JobModel(version, FrozenMap(containers))
    store.job_models.publish(model, epoch=epoch, participants=["p-1", "p-2"])


@pytest.fixture
def leader(zk_store: ZkMetadataStore) -> tuple[ZkMetadataStore, LeaderEpoch]:
    """Retention 1: publishing version 2 removes barrier 1."""
    store = ZkMetadataStore(zk_store.client, zk_store.layout.folder, run_id="run-1", retention=1)
    epoch = store.epochs.acquire()
    publish(store, epoch, 1)
    return store, epoch


@pytest.fixture
def member(
    zk_store: ZkMetadataStore, zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> Callable[[], ZkMetadataStore]:
    def connect() -> ZkMetadataStore:
        client = zk_connect(zk_server.hosts)
        return ZkMetadataStore(client, zk_store.layout.folder, run_id="run-1")

    return connect


def fail(exc: Exception) -> None:
    raise AssertionError(f"unexpected error: {exc!r}")


def test_join_and_watch_joins_reads_new_then_done_and_nothing_after(
    leader: tuple[ZkMetadataStore, LeaderEpoch],
    member: Callable[[], ZkMetadataStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, epoch = leader
    processor = member()
    sent = requests_sent(processor.client, monkeypatch)
    states: list[BarrierState | None] = []
    writes, reads = processor.ops, processor.reads
    watch = processor.barriers.join_and_watch(1, "p-1", states.append, fail)
    assert store.barriers.participants(1) == {"p-1"}
    assert states == [BarrierState.NEW] and not watch.stopped
    store.barriers.set_state(1, BarrierState.DONE, epoch=epoch)
    wait_for(lambda: states == [BarrierState.NEW, BarrierState.DONE])
    assert watch.stopped  # decided for good
    publish(store, epoch, 2)  # retention removes barrier 1: the member hears nothing of it
    wait_for(lambda: 1 not in store.barriers.versions())
    time.sleep(0.3)
    assert states == [BarrierState.NEW, BarrierState.DONE]
    assert processor.ops - writes == 1  # the join
    assert processor.reads - reads == 2  # the state with the join, and once decided
    assert sent == ["Create", "GetData", "GetData"]  # one round trip, then the decision


def test_the_join_is_answered_on_the_connection_thread_alone(
    leader: tuple[ZkMetadataStore, LeaderEpoch],
    member: Callable[[], ZkMetadataStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kazoo's ``create_async`` hands its answer on through its completion thread (a queue and
    a thread woken per join); the join's create is answered where its read is."""
    processor = member()
    handed_on: list[object] = []
    completions = processor.client.handler.completion_queue
    put = completions.put

    def counted(item: object, *args: object) -> None:
        handed_on.append(item)
        put(item, *args)

    monkeypatch.setattr(completions, "put", counted)
    states: list[BarrierState | None] = []
    processor.barriers.join_and_watch(1, "p-1", states.append, fail)
    assert states == [BarrierState.NEW] and processor.barriers.participants(1) == {"p-1"}
    assert handed_on == []


def test_join_and_watch_twice_from_one_session_or_from_another(
    leader: tuple[ZkMetadataStore, LeaderEpoch], member: Callable[[], ZkMetadataStore]
) -> None:
    first, second = member(), member()
    states: list[BarrierState | None] = []
    first.barriers.join_and_watch(1, "p-1", states.append, fail)
    first.barriers.join_and_watch(1, "p-1", states.append, fail)  # the same session: fine
    assert states == [BarrierState.NEW, BarrierState.NEW]
    with pytest.raises(WriteConflict, match="another session"):
        second.barriers.join_and_watch(1, "p-1", states.append, fail)
    with pytest.raises(NotFound, match="barrier 7 does not exist"):
        second.barriers.join_and_watch(7, "p-2", states.append, fail)
    assert len(states) == 2


def test_watch_decision_of_a_decided_or_missing_barrier_ends_at_once(
    leader: tuple[ZkMetadataStore, LeaderEpoch], member: Callable[[], ZkMetadataStore]
) -> None:
    store, epoch = leader
    processor = member()
    states: list[BarrierState | None] = []
    assert processor.barriers.watch_decision(9, states.append, fail).stopped
    assert states == [None]
    store.barriers.set_state(1, BarrierState.TIMED_OUT, epoch=epoch)
    assert processor.barriers.watch_decision(1, states.append, fail).stopped
    assert states == [None, BarrierState.TIMED_OUT]


def test_a_failed_reread_reports_the_error_and_ends_the_watch(
    leader: tuple[ZkMetadataStore, LeaderEpoch],
    member: Callable[[], ZkMetadataStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, epoch = leader
    processor = member()
    states: list[BarrierState | None] = []
    errors: list[Exception] = []
    watch = processor.barriers.watch_decision(1, states.append, errors.append)
    assert states == [BarrierState.NEW]

    def unavailable(path: str, what: str, watch: object) -> None:
        raise StoreUnavailable(path, f"{what}: ZooKeeper unreachable (injected)")

    monkeypatch.setattr(processor.barriers._ops, "get_watched", unavailable)
    store.barriers.set_state(1, BarrierState.DONE, epoch=epoch)
    wait_for(lambda: len(errors) == 1)
    assert isinstance(errors[0], StoreUnavailable) and watch.stopped
    assert states == [BarrierState.NEW]  # the caller resyncs: it reads the state again
