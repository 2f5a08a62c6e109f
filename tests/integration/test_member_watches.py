"""The member group's watches across a dropped connection, on a real ZooKeeper server.

kazoo forgets every watch when its connection drops (it fires each with a ``NONE`` event); the
group re-reads the version pointer and the barrier's state once the same session is back, and so
re-arms both watches. Without that, a processor whose connection dropped for a moment (not long
enough to fence) would never hear of a later version, nor of its barrier's decision.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from polling import model, wait_for

from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.member.group import MemberGroup
from metadata.model import (
    BarrierState,
)
from metadata.zk import LeaderEpoch, ZkMetadataStore

pytestmark = [pytest.mark.zk, pytest.mark.slow]

FOLDER = "/affinity-test/member-watches"


@pytest.fixture
def leader(
    zk_private_server: EmbeddedZooKeeper, zk_connect: Callable[..., KazooClient]
) -> tuple[ZkMetadataStore, LeaderEpoch]:
    client = zk_connect(zk_private_server.hosts, session_timeout_s=20.0)
    store = ZkMetadataStore(client, FOLDER, run_id="run-1", retry_deadline_s=30.0)
    store.ensure_layout()
    return store, store.epochs.acquire()


@pytest.fixture
def member(
    zk_private_server: EmbeddedZooKeeper, zk_connect: Callable[..., KazooClient]
) -> Iterator[MemberGroup]:
    client = zk_connect(zk_private_server.hosts, session_timeout_s=20.0)
    store = ZkMetadataStore(client, FOLDER, run_id="run-1", retry_deadline_s=30.0)
    group = MemberGroup(
        client, store, on_start=lambda *a: None, on_stop=lambda *a: None, fence_after_s=60.0
    )
    group.add("p-1", "loc-p-1")
    stop = threading.Event()
    thread = threading.Thread(target=group.run, args=(stop,), daemon=True)
    thread.start()
    yield group
    stop.set()
    thread.join(10)


def running_version(group: MemberGroup) -> int | None:
    return group.running().get("p-1", (None, {}))[0]


def test_a_member_whose_connection_dropped_follows_later_versions_and_decisions(
    zk_private_server: EmbeddedZooKeeper,
    leader: tuple[ZkMetadataStore, LeaderEpoch],
    member: MemberGroup,
) -> None:
    store, epoch = leader
    wait_for(lambda: store.processors.locality() == {"p-1": "loc-p-1"})
    store.job_models.publish(model(1, {"p-1": [0, 1]}), epoch=epoch, participants=["p-1"])
    wait_for(lambda: store.barriers.participants(1) == {"p-1"})
    # The connection drops while the member waits for barrier 1's decision, and comes back
    # (a restarted server: the same sessions, with fresh timeouts).
    zk_private_server.kill()
    time.sleep(1.0)
    zk_private_server.start()
    wait_for(lambda: store.client.connected and member.client.connected)
    store.barriers.set_state(1, BarrierState.DONE, epoch=epoch)
    wait_for(lambda: running_version(member) == 1)  # heard the decision: its watch re-armed

    zk_private_server.kill()  # dropped again, while nothing is pending
    time.sleep(1.0)
    zk_private_server.start()
    wait_for(lambda: store.client.connected and member.client.connected)
    v2 = model(2, {"p-1": [0, 1, 2]})
    store.job_models.publish(v2, epoch=epoch, participants=["p-1"], base=1, losing=[])
    wait_for(lambda: store.barriers.participants(2) == {"p-1"})  # heard of version 2
    store.barriers.set_state(2, BarrierState.DONE, epoch=epoch)
    wait_for(lambda: running_version(member) == 2)
    assert set(member.running()["p-1"][1]) == {"Partition 0", "Partition 1", "Partition 2"}


def test_members_of_one_group_share_the_watches_and_all_start(
    zk_private_server: EmbeddedZooKeeper,
    zk_connect: Callable[..., KazooClient],
    leader: tuple[ZkMetadataStore, LeaderEpoch],
) -> None:
    """A Spark driver's group: the first member to join watches the barrier for all of them."""
    store, epoch = leader
    client = zk_connect(zk_private_server.hosts, session_timeout_s=20.0)
    group = MemberGroup(
        client,
        ZkMetadataStore(client, FOLDER, run_id="run-1"),
        on_start=lambda *a: None,
        on_stop=lambda *a: None,
    )
    for pid in ("p-1", "p-2", "p-3"):
        group.add(pid, f"loc-{pid}")
    stop = threading.Event()
    thread = threading.Thread(target=group.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(store.processors.locality()) == 3)
        everyone = ["p-1", "p-2", "p-3"]
        v1 = model(1, {"p-1": [0], "p-2": [1], "p-3": [2]})
        store.job_models.publish(v1, epoch=epoch, participants=everyone)
        wait_for(lambda: store.barriers.participants(1) == set(everyone))
        store.barriers.set_state(1, BarrierState.DONE, epoch=epoch)
        wait_for(lambda: all(version == 1 for version, _ in group.running().values()))
        v2 = model(2, {"p-1": [0, 2], "p-2": [1], "p-3": []})  # p-3 loses, p-1 gains
        store.job_models.publish(
            v2, epoch=epoch, participants=everyone, base=1, losing=["p-3"], gaining=["p-1"]
        )
        wait_for(lambda: store.barriers.participants(2) == set(everyone))
        store.barriers.set_state(2, BarrierState.DONE, epoch=epoch)
        wait_for(lambda: all(version == 2 for version, _ in group.running().values()))
        running = {pid: set(tasks) for pid, (_, tasks) in group.running().items()}
        assert running == {
            "p-1": {"Partition 0", "Partition 2"},
            "p-2": {"Partition 1"},
            "p-3": set(),
        }
    finally:
        stop.set()
        thread.join(10)
