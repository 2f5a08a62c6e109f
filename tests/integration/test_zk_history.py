"""The rebalance history recipe (store.history) on a real ZooKeeper: bounded, fenced by the
leader epoch, tolerant readers."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.leader.rebalances import RebalanceRecorder
from coordinator.protocol.leader_events import MarkBarrier, PublishJobModel
from coordinator.protocol.leader_trigger import RebalanceCause, Trigger
from metadata.errors import CorruptDataError
from metadata.model import (
    BarrierState,
    ContainerModel,
    FrozenMap,
    JobModel,
    SystemStreamPartition,
    TaskModel,
)
from metadata.zk import FencedOut, ZkMetadataStore
from metadata.zk.recipe.history import RebalanceEntry

pytestmark = pytest.mark.zk


def entry(version: int, **kw: object) -> RebalanceEntry:
    fields: dict[str, object] = {
        "outcome": "DONE",
        "trigger": "processors gone",
        "published_at": 1000.0 + version,
        "decided_at": 1000.5 + version,
        "moved": version,
        "phases": {"debounce": 2.0, "grouper": 0.01, "publish": 0.02, "barrier": 0.4},
    }
    fields.update(kw)
    return RebalanceEntry(version, **fields)  # type: ignore[arg-type]


@pytest.fixture
def second_store(
    zk_store: ZkMetadataStore, zk_server: EmbeddedZooKeeper, zk_connect: Callable[..., KazooClient]
) -> ZkMetadataStore:
    """Another coordinator replica of the same job, on its own session."""
    return ZkMetadataStore(zk_connect(zk_server.hosts), zk_store.layout.folder, run_id="run-1")


def test_entries_round_trip_oldest_first(zk_store: ZkMetadataStore) -> None:
    epoch = zk_store.epochs.acquire()
    written = [entry(v, leader="replica-a", epoch=epoch.epoch) for v in (1, 2, 10)]
    for e in written:
        assert zk_store.history.record(e, epoch=epoch, keep=50)
    assert zk_store.history.read() == written
    assert zk_store.history.read(limit=2) == written[1:]
    assert zk_store.history.read(limit=0) == []
    assert zk_store.client.exists(f"{zk_store.layout.folder}/history/rebalance-10")


def test_history_is_bounded_oldest_pruned_in_the_same_transaction(
    zk_store: ZkMetadataStore,
) -> None:
    epoch = zk_store.epochs.acquire()
    for version in range(1, 9):
        zk_store.history.record(entry(version), epoch=epoch, keep=5)
        assert len(zk_store.history.versions()) == min(version, 5)
    assert zk_store.history.versions() == [4, 5, 6, 7, 8]
    # A smaller bound later prunes down to it at the next write.
    zk_store.history.record(entry(9), epoch=epoch, keep=2)
    assert zk_store.history.versions() == [8, 9]


def test_a_deposed_leader_cannot_write_history(
    zk_store: ZkMetadataStore, second_store: ZkMetadataStore
) -> None:
    old = zk_store.epochs.acquire()
    zk_store.history.record(entry(1), epoch=old, keep=1)
    new = second_store.epochs.acquire()

    with pytest.raises(FencedOut):
        zk_store.history.record(entry(2), epoch=old, keep=1)

    # Nothing of the refused transaction applied: no new entry, and the old one not pruned.
    assert zk_store.history.versions() == [1]
    assert second_store.history.record(entry(2), epoch=new, keep=1)
    assert zk_store.history.versions() == [2]


def test_recording_a_version_twice_keeps_the_first(zk_store: ZkMetadataStore) -> None:
    epoch = zk_store.epochs.acquire()
    assert zk_store.history.record(entry(3, moved=1), epoch=epoch, keep=5)
    assert not zk_store.history.record(entry(3, moved=99), epoch=epoch, keep=5)
    assert [e.moved for e in zk_store.history.read()] == [1]


def test_readers_accept_unknown_fields_and_name_a_corrupt_entry(
    zk_store: ZkMetadataStore,
) -> None:
    folder = zk_store.layout.folder
    newer = {"format": 2, "version": 4, "outcome": "DONE", "trigger": "probing",
             "published_at": 1.0, "decided_at": 2.0, "warm": 0.9}  # fmt: skip
    zk_store.client.create(f"{folder}/history/rebalance-4", json.dumps(newer).encode())
    (read,) = zk_store.history.read()
    assert (read.version, read.trigger, read.moved, read.phases) == (4, "probing", 0, {})

    zk_store.client.create(f"{folder}/history/rebalance-5", b"{not json")
    with pytest.raises(CorruptDataError) as error:
        zk_store.history.read()
    assert error.value.path == f"{folder}/history/rebalance-5"


def test_bad_bound_is_refused(zk_store: ZkMetadataStore) -> None:
    with pytest.raises(ValueError, match="keep"):
        zk_store.history.record(entry(1), epoch=zk_store.epochs.acquire(), keep=0)


# ------------------------------------------------------------------ the leader's recorder


class Log:
    def __init__(self) -> None:
        self.warnings: list[tuple[str, dict[str, object]]] = []

    def warning(self, event: str, **kw: object) -> None:
        self.warnings.append((event, kw))


def published(version: int) -> PublishJobModel:
    tasks = {
        f"Partition {i}": TaskModel(
            f"Partition {i}", frozenset({SystemStreamPartition("k", "e", i)})
        )
        for i in range(4)
    }
    model = JobModel(version, FrozenMap({"p-1": ContainerModel("p-1", "zone-a/h1", tasks)}))
    cause = RebalanceCause(Trigger.PROCESSORS_NEW, started=10.0, debounce_s=2.5, grouper_s=0.125)
    return PublishJobModel(
        model, frozenset({"p-1"}), base=None, losing=frozenset(), moved=3, locality_kept=1,
        with_locality=2, cause=cause,
    )  # fmt: skip


def test_the_recorder_writes_what_the_machine_and_the_adapter_measured(
    zk_store: ZkMetadataStore,
) -> None:
    epoch = zk_store.epochs.acquire()
    clock = iter([100.0, 101.5, 200.0])
    recorder = RebalanceRecorder(zk_store.history, keep=3, leader="r-1", wall=lambda: next(clock))
    recorder.published(published(5), publish_s=0.04)
    recorder.decided(MarkBarrier(5, BarrierState.DONE, 1.25), epoch=epoch, log=Log())
    # A version a previous leader published, decided by this one.
    recorder.decided(MarkBarrier(6, BarrierState.TIMED_OUT, 30.0), epoch=epoch, log=Log())

    mine, inherited = zk_store.history.read()
    assert (mine.version, mine.outcome, mine.trigger) == (5, "DONE", "processors new")
    assert (mine.published_at, mine.decided_at) == (100.0, 101.5)
    assert (mine.processors, mine.tasks, mine.moved, mine.kept_local) == (1, 4, 3, 1)
    assert mine.phases == {"debounce": 2.5, "grouper": 0.125, "publish": 0.04, "barrier": 1.25}
    assert (mine.leader, mine.epoch) == ("r-1", epoch.epoch)
    assert (inherited.trigger, inherited.outcome, inherited.published_at) == (
        "inherited",
        "TIMED_OUT",
        170.0,
    )
    assert inherited.phases == {"debounce": None, "grouper": None, "publish": None, "barrier": 30.0}


def test_the_recorder_steps_down_when_fenced_and_logs_other_failures(
    zk_store: ZkMetadataStore, second_store: ZkMetadataStore
) -> None:
    old = zk_store.epochs.acquire()
    recorder = RebalanceRecorder(zk_store.history, keep=3, leader="r-1")
    zk_store.client.delete(zk_store.history.path)  # a store error of another kind
    log = Log()
    recorder.decided(MarkBarrier(1, BarrierState.DONE, 0.5), epoch=old, log=log)
    assert [event for event, _ in log.warnings] == ["coordinator.history_failed"]

    zk_store.ensure_layout()
    second_store.epochs.acquire()
    with pytest.raises(FencedOut):
        recorder.decided(MarkBarrier(2, BarrierState.DONE, 0.5), epoch=old, log=Log())
    assert zk_store.history.versions() == []
