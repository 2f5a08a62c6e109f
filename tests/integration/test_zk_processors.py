"""Processor registrations on a real ZooKeeper: register, duplicates, expiry, watch, bad data."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable

import pytest
import structlog.testing
from kazoo.client import KazooClient
from polling import wait_for

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from coordinator.member.executors import ExecutorRegistrar
from locality.spark import SparkExecutor
from metadata.zk import ZkMetadataStore

pytestmark = pytest.mark.zk


def test_register_and_read_processor_locality(zk_store: ZkMetadataStore) -> None:
    node = zk_store.processors.register("p-1", "zone-a/node-1", host="node-1", executor="3")
    zk_store.processors.register("p-2", "zone-b/node-2")

    live, duplicates = zk_store.processors.read()

    assert node.startswith(f"{zk_store.layout.folder}/processors/processor-")
    assert [r.processor_id for r in live] == ["p-1", "p-2"]
    assert live[0].node == node and live[0].host == "node-1" and live[0].data["executor"] == "3"
    assert live[0].sequence < live[1].sequence
    assert duplicates == []
    assert zk_store.processors.locality() == {"p-1": "zone-a/node-1", "p-2": "zone-b/node-2"}
    stored = json.loads(zk_store.client.get(node)[0])
    assert stored["processor_id"] == "p-1" and stored["location_id"] == "zone-a/node-1"
    assert zk_store.client.exists(node).ephemeralOwner == zk_store.client.client_id[0]


def test_a_registration_carries_its_capacity(zk_store: ZkMetadataStore) -> None:
    zk_store.processors.register("p-1", "zone-a/node-1", capacity=4)
    zk_store.processors.register("p-2", "zone-b/node-2")

    live, _ = zk_store.processors.read()

    assert [(r.processor_id, r.capacity) for r in live] == [("p-1", 4), ("p-2", 1)]
    assert zk_store.processors.members() == (
        {"p-1": "zone-a/node-1", "p-2": "zone-b/node-2"},
        {"p-1": 4, "p-2": 1},
    )
    for bad in (0, -1, True, "4", 1.5):
        with pytest.raises(ValueError, match="capacity should be an integer >= 1"):
            zk_store.processors.register("p-3", "zone-c/node-3", capacity=bad)


def test_duplicate_processor_id_older_registration_wins(
    zk_store: ZkMetadataStore, zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> None:
    other = ZkMetadataStore(zk_connect(zk_server.hosts), zk_store.layout.folder, run_id="run-1")
    older = zk_store.processors.register("p-1", "zone-a/node-1")
    newer = other.processors.register("p-1", "zone-b/node-9")

    live, duplicates = zk_store.processors.read()

    assert [(r.processor_id, r.node) for r in live] == [("p-1", older)]
    assert [(r.processor_id, r.node, r.location_id) for r in duplicates] == [
        ("p-1", newer, "zone-b/node-9")
    ]
    assert zk_store.processors.locality() == {"p-1": "zone-a/node-1"}


def test_expired_session_removes_registration_and_watch_sees_it(
    zk_store: ZkMetadataStore, zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> None:
    processor_client = zk_connect(zk_server.hosts)
    processor = ZkMetadataStore(processor_client, zk_store.layout.folder, run_id="run-1")
    processor.processors.register("p-dies", "zone-a/node-1")
    zk_store.processors.register("p-stays", "zone-b/node-2")
    seen: list[list[str]] = []
    changed = threading.Event()

    def on_change(children: list[str]) -> None:
        seen.append(children)
        changed.set()

    zk_store.processors.watch(on_change)
    assert len(seen[0]) == 2
    changed.clear()

    zk_server.expire_session(processor_client)

    assert changed.wait(10)
    wait_for(lambda: len(seen[-1]) == 1)
    assert zk_store.processors.locality() == {"p-stays": "zone-b/node-2"}
    # The expired client got a new session and can register again.
    processor.processors.register("p-dies", "zone-a/node-1")
    assert set(zk_store.processors.locality()) == {"p-dies", "p-stays"}


def test_unregister_and_stopped_watch(zk_store: ZkMetadataStore) -> None:
    calls: list[list[str]] = []
    watch = zk_store.processors.watch(calls.append)
    node = zk_store.processors.register("p-1", "loc")
    wait_for(lambda: len(calls) == 2)
    watch.stop()

    zk_store.processors.unregister(node)
    zk_store.processors.unregister(node)  # already gone: no error
    time.sleep(0.3)

    assert zk_store.processors.read() == ([], [])
    assert len(calls) == 2


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"{not json", "not valid JSON"),
        (json.dumps({"processor_id": "p-9"}).encode(), "location id"),
        (
            json.dumps({"processor_id": "p-9", "location_id": "/".join(["z"] * 600)}).encode(),
            "location id must be at most 1024 characters",
        ),
        (
            json.dumps({"processor_id": "p-9", "location_id": "/".join(["z"] * 17)}).encode(),
            "at most 16 '/'-separated segments",
        ),
        (
            json.dumps({"processor_id": "p-\x1b[2J", "location_id": "zone-a"}).encode(),
            "processor id must be printable",
        ),
        (
            json.dumps({"processor_id": "p-9", "location_id": "zone-e\nfake"}).encode(),
            "location id must be printable",
        ),
        (
            json.dumps({"processor_id": "p" * 254, "location_id": "zone-a"}).encode(),
            "processor id must be at most 253 characters",
        ),
        (b"[1, 2]", "not a JSON object"),
        (
            json.dumps({"processor_id": "p-9", "location_id": "x", "capacity": 0}).encode(),
            "capacity should be an integer >= 1",
        ),
        (
            json.dumps({"processor_id": "p-9", "location_id": "x", "capacity": "4"}).encode(),
            "capacity should be an integer >= 1",
        ),
    ],
)
def test_a_malformed_registration_is_skipped_logged_with_its_node_and_listed(
    zk_store: ZkMetadataStore, data: bytes, problem: str
) -> None:
    zk_store.processors.register("p-1", "zone-a/node-1")
    path = zk_store.client.create(
        f"{zk_store.layout.folder}/processors/processor-", data, ephemeral=True, sequence=True
    )
    zk_store.processors.register("p-2", "zone-b/node-2")

    with structlog.testing.capture_logs() as logs:
        live, duplicates = zk_store.processors.read()
        assert zk_store.processors.locality() == {"p-1": "zone-a/node-1", "p-2": "zone-b/node-2"}

    assert [r.processor_id for r in live] == ["p-1", "p-2"] and duplicates == []
    assert zk_store.processors.skipped == (path,)
    skipped = [e for e in logs if e["event"] == "zk.bad_registration_skipped"]
    assert len(skipped) == 1  # once, not at every read
    assert skipped[0]["node"] == path and problem in skipped[0]["problem"]
    assert zk_store.client.get(path)[0] == data  # the reader overwrote nothing

    zk_store.client.delete(path)
    zk_store.processors.read()
    assert zk_store.processors.skipped == ()


@pytest.mark.parametrize(
    ("processor_id", "location_id", "problem"),
    [
        ("p-\x1b]0;title\x07", "zone-a", "processor id must be printable"),
        ("p-1", "zone-e\nfake", "location id must be printable"),
        ("p-1", "zone-\x07", "location id must be printable"),
        ("p-1", "/".join(["z"] * 17), "at most 16 '/'-separated segments"),
        ("p-1", "/".join(["z"] * 600), "at most 1024 characters"),
        ("p-1", "zone-a/", "empty segment"),
        ("p-1", "x" * 1025, "at most 1024 characters"),
        ("", "zone-a", "processor id must be a non-empty string"),
    ],
)
def test_a_registration_breaking_the_id_rule_is_refused(
    zk_store: ZkMetadataStore, processor_id: str, location_id: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        zk_store.processors.register(processor_id, location_id)
    assert zk_store.processors.read() == ([], [])


def test_a_read_reads_only_the_registrations_new_since_the_last(zk_store: ZkMetadataStore) -> None:
    nodes = [zk_store.processors.register(f"p-{i}", f"zone-a/node-{i}") for i in range(3)]
    reads = zk_store.reads
    assert len(zk_store.processors.locality()) == 3
    assert zk_store.reads - reads == 1 + 3  # the listing, then each node
    zk_store.processors.unregister(nodes[0])  # a death: nothing new to read
    reads = zk_store.reads
    assert zk_store.processors.locality() == {"p-1": "zone-a/node-1", "p-2": "zone-a/node-2"}
    assert zk_store.reads - reads == 1  # the listing only
    zk_store.processors.register("p-3", "zone-b/node-3")  # one newcomer: one read
    reads = zk_store.reads
    assert set(zk_store.processors.locality()) == {"p-1", "p-2", "p-3"}
    assert zk_store.reads - reads == 1 + 1


def test_an_executor_at_a_location_breaking_the_id_rule_is_not_registered(
    zk_store: ZkMetadataStore,
) -> None:
    executors = [SparkExecutor("1", "host-1"), SparkExecutor("2", "host-2")]
    locations = {"1": "zone-a/host-1", "2": "zone-e\nfake"}
    registrar = ExecutorRegistrar(
        zk_store, lambda: executors, "app", location_of=lambda e: locations[e.executor_id]
    )
    try:
        step = registrar.sync()
        assert step.added == (registrar.processor_id("1"),)
        assert zk_store.processors.locality() == {registrar.processor_id("1"): "zone-a/host-1"}
    finally:
        registrar.close()
