"""The processor client against a real ZooKeeper, with the test as the leader: who joins early.

A processor that keeps every task it runs (the manifest says so against the version it runs)
joins the barrier before reading its tasks; one that loses a task reads first, stops it, then
joins. Either way nothing new starts before DONE. One that neither loses nor gains (the manifest
names who gains) reads no container at all, and writes the locality of new tasks only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import structlog.testing
from kazoo.client import KazooClient
from polling import wait_for

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from coordinator.member.processor import ProcessorClient
from coordinator.protocol.rules import gaining_processors, losing_processors
from metadata.model import ContainerModel, FrozenMap, JobModel, SystemStreamPartition, TaskModel
from metadata.zk import LeaderEpoch, Watch, ZkMetadataStore
from metadata.zk.chunks import view_index

pytestmark = pytest.mark.zk


def task(i: int) -> TaskModel:
    return TaskModel(f"Partition {i}", frozenset({SystemStreamPartition("kafka", "events", i)}))


def model(version: int, assignment: Mapping[str, list[int]]) -> JobModel:
    return JobModel(
        version,
        FrozenMap(
            {
                pid: ContainerModel(
                    pid, f"loc-{pid}", FrozenMap({task(i).name: task(i) for i in ids})
                )
                for pid, ids in assignment.items()
            }
        ),
    )


class Recorder:
    """What one processor did, in order: ("read", v), ("join", v), ("stop", names), ("start", v)."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, object]] = []
        self.lock = threading.Lock()

    def add(self, step: str, detail: object) -> None:
        with self.lock:
            self.steps.append((step, detail))

    def order(self, version: int) -> list[str]:
        with self.lock:
            return [step for step, detail in self.steps if detail == version]


@pytest.fixture
def processors(
    zk_store: ZkMetadataStore, zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> Iterator[Callable[[str], tuple[ProcessorClient, Recorder]]]:
    stops: list[threading.Event] = []
    threads: list[threading.Thread] = []

    def start(pid: str) -> tuple[ProcessorClient, Recorder]:
        store = ZkMetadataStore(zk_connect(zk_server.hosts), zk_store.layout.folder, run_id="run-1")
        recorder = Recorder()
        read_container, join_barrier = store.job_models.read_container, store.barriers.join
        join_and_watch = store.barriers.join_and_watch

        def reading(version: int, processor_id: str, **kwargs: Any) -> ContainerModel | None:
            recorder.add("read", version)
            return read_container(version, processor_id, **kwargs)

        def joining(version: int, processor_id: str) -> None:
            recorder.add("join", version)
            join_barrier(version, processor_id)

        def joining_and_watching(version: int, processor_id: str, *args: Any, **kw: Any) -> Watch:
            recorder.add("join", version)  # (a join sent with the barrier's first read)
            return join_and_watch(version, processor_id, *args, **kw)

        store.job_models.read_container = reading  # type: ignore[method-assign]
        store.barriers.join = joining  # type: ignore[method-assign]
        store.barriers.join_and_watch = joining_and_watching  # type: ignore[method-assign]
        client = ProcessorClient(
            store.client,
            store,
            pid,
            f"loc-{pid}",
            on_start=lambda v, tasks: recorder.add("start", v),
            on_stop=lambda v, tasks: recorder.add("stop", sorted(tasks)),
        )
        stop = threading.Event()
        thread = threading.Thread(target=client.run, args=(stop,), daemon=True)
        thread.start()
        stops.append(stop)
        threads.append(thread)
        return client, recorder

    yield start
    for stop in stops:
        stop.set()
    for thread in threads:
        thread.join(10)


def publish_and_complete(
    store: ZkMetadataStore, epoch: LeaderEpoch, new: JobModel, previous: JobModel | None
) -> None:
    store.job_models.publish(
        new,
        epoch=epoch,
        participants=list(new.containers),
        base=previous.version if previous else None,
        losing=losing_processors(previous, new) if previous else (),
    )
    wait_for(lambda: store.barriers.participants(new.version) == set(new.containers))
    store.barriers.set_state(new.version, "DONE", epoch=epoch)


def test_keepers_join_before_reading_and_losers_stop_first(
    zk_store: ZkMetadataStore, processors: Callable[[str], tuple[ProcessorClient, Recorder]]
) -> None:
    keeper, keeper_log = processors("p-1")
    loser, loser_log = processors("p-2")
    wait_for(lambda: len(zk_store.processors.locality()) == 2)
    epoch = zk_store.epochs.acquire()
    v1 = model(1, {"p-1": [0, 1], "p-2": [2, 3]})
    publish_and_complete(zk_store, epoch, v1, None)
    wait_for(lambda: keeper.running_version == 1 and loser.running_version == 1)
    # With no model in force the manifest promises nothing: both read first.
    assert keeper_log.order(1) == ["read", "join", "start"]
    assert loser_log.order(1) == ["read", "join", "start"]

    v2 = model(2, {"p-1": [0, 1, 3], "p-2": [2]})  # p-1 keeps all and gains 3; p-2 loses 3
    zk_store.job_models.publish(
        v2, epoch=epoch, participants=["p-1", "p-2"], base=1, losing=losing_processors(v1, v2)
    )
    manifest = zk_store.job_models.read_manifest(2)
    assert (manifest.base, manifest.losing) == (1, ("p-2",))
    wait_for(lambda: zk_store.barriers.participants(2) == {"p-1", "p-2"})
    time.sleep(0.2)
    assert keeper.running_version == 1 and loser.running_version == 1  # nothing before DONE
    assert "Partition 3" not in keeper.running
    zk_store.barriers.set_state(2, "DONE", epoch=epoch)
    wait_for(lambda: keeper.running_version == 2 and loser.running_version == 2)

    assert keeper_log.order(2) == ["join", "read", "start"]  # early: nothing to stop
    assert loser_log.order(2) == ["read", "join"]  # nothing new to start
    stop_index = loser_log.steps.index(("stop", ["Partition 3"]))
    assert stop_index < loser_log.steps.index(("join", 2))  # stopped before joining
    assert set(keeper.running) == {"Partition 0", "Partition 1", "Partition 3"}
    assert set(loser.running) == {"Partition 2"}


def test_an_unchanged_processor_reads_no_container_and_writes_no_locality(
    zk_store: ZkMetadataStore, processors: Callable[[str], tuple[ProcessorClient, Recorder]]
) -> None:
    keeper, keeper_log = processors("p-1")
    gainer, gainer_log = processors("p-2")
    wait_for(lambda: len(zk_store.processors.locality()) == 2)
    epoch = zk_store.epochs.acquire()
    v1 = model(1, {"p-1": [0, 1], "p-2": [2]})
    publish_and_complete(zk_store, epoch, v1, None)
    wait_for(lambda: keeper.running_version == 1 and gainer.running_version == 1)
    wait_for(lambda: len(zk_store.locality.read()) == 3)  # every task's, after the first DONE
    time.sleep(0.2)
    keeper_ops = keeper.group.store.ops, keeper.group.store.reads

    v2 = model(2, {"p-1": [0, 1], "p-2": [2, 3]})  # p-2 gains 3 (a dead one's); p-1 keeps all
    zk_store.job_models.publish(
        v2,
        epoch=epoch,
        participants=["p-1", "p-2"],
        base=1,
        losing=losing_processors(v1, v2),
        gaining=gaining_processors(v1, v2),
    )
    assert zk_store.job_models.read_manifest(2).gaining == ("p-2",)
    wait_for(lambda: zk_store.barriers.participants(2) == {"p-1", "p-2"})
    zk_store.barriers.set_state(2, "DONE", epoch=epoch)
    wait_for(lambda: keeper.running_version == 2 and gainer.running_version == 2)
    wait_for(lambda: zk_store.locality.read().get("Partition 3") == "loc-p-2")
    time.sleep(0.2)

    assert keeper_log.order(2) == ["join"]  # no container read, nothing new to start
    assert gainer_log.order(2) == ["join", "read", "start"]
    assert set(keeper.running) == {"Partition 0", "Partition 1"}
    assert set(gainer.running) == {"Partition 2", "Partition 3"}
    # The keeper's one write is its join; its reads: the version pointer (re-arming its watch),
    # the manifest and the barrier's state (sent with the join, and once decided); no container,
    # no locality.
    assert keeper.group.store.ops - keeper_ops[0] == 1
    assert keeper.group.store.reads - keeper_ops[1] == 4


def test_a_processor_behind_the_base_reads_first(
    zk_store: ZkMetadataStore, processors: Callable[[str], tuple[ProcessorClient, Recorder]]
) -> None:
    first, first_log = processors("p-1")
    wait_for(lambda: len(zk_store.processors.locality()) == 1)
    epoch = zk_store.epochs.acquire()
    v1 = model(1, {"p-1": [0, 1]})
    publish_and_complete(zk_store, epoch, v1, None)
    wait_for(lambda: first.running_version == 1)
    v2 = model(2, {"p-1": [0, 1, 2]})
    # Planned against a version this processor does not run (say, a newer leader's view).
    zk_store.job_models.publish(v2, epoch=epoch, participants=["p-1"], base=0, losing=())
    assert zk_store.job_models.read_manifest(2).base == 0
    wait_for(lambda: zk_store.barriers.participants(2) == {"p-1"})
    zk_store.barriers.set_state(2, "DONE", epoch=epoch)
    wait_for(lambda: first.running_version == 2)

    assert first_log.order(2) == ["read", "join", "start"]


def test_a_restarted_processor_meeting_a_corrupt_view_reads_the_whole_model(
    zk_store: ZkMetadataStore, processors: Callable[[str], tuple[ProcessorClient, Recorder]]
) -> None:
    epoch = zk_store.epochs.acquire()
    v1 = model(1, {"p-1": [0, 1, 2], "p-2": [3, 4, 5]})
    zk_store.job_models.publish(v1, epoch=epoch, participants=["p-1", "p-2"])
    manifest = zk_store.job_models.read_manifest(1)
    ref = manifest.views[view_index("p-1", len(manifest.views))]
    view = f"{zk_store.layout.job_model(1)}/{ref.name}"
    zk_store.client.set(view, b"\x00 not a view")

    with structlog.testing.capture_logs() as logs:
        first, _ = processors("p-1")  # (re)started while version 1 is the latest
        second, _ = processors("p-2")
        wait_for(lambda: zk_store.barriers.participants(1) == {"p-1", "p-2"})
        zk_store.barriers.set_state(1, "DONE", epoch=epoch)
        wait_for(lambda: first.running_version == 1 and second.running_version == 1)

    assert set(first.running) == {"Partition 0", "Partition 1", "Partition 2"}
    assert set(second.running) == {"Partition 3", "Partition 4", "Partition 5"}
    reported = [e for e in logs if e["event"] == "zk.container_view_corrupt"]
    assert reported and {e["node"] for e in reported} == {view}
    assert not [e for e in logs if e["event"] == "member.store_error"]  # no retry loop
