"""Task locality on a real ZooKeeper: differential writes, run ids (I7), awkward names, bad data."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from metadata.errors import CorruptDataError
from metadata.zk import SAFE_REQUEST_BYTES, ZkMetadataStore

pytestmark = pytest.mark.zk


def locality(tasks: int, locations: int = 10) -> dict[str, str]:
    return {f"Partition {i}": f"zone-{i % 3}/node-{i % locations}" for i in range(tasks)}


def test_empty_job_reads_no_locality(zk_store: ZkMetadataStore) -> None:
    assert zk_store.locality.read() == {}


def test_round_trip_of_awkward_task_names(zk_store: ZkMetadataStore) -> None:
    wanted = {
        "Partition 0": "zone-a/node-1",
        "SystemStreamPartition [kafka, events, 3]": "zone-b/node-2",
        "a/b/../c": "zone-a/node-1",
        ".": "x",
        "..": "y",
        "100% ünïcødé ✓": "zone-c/nödé 3",
        "%41": "literal percent",
    }
    assert zk_store.locality.write(wanted) == len(wanted)
    assert zk_store.locality.read() == wanted
    names = set(zk_store.client.get_children(f"{zk_store.layout.folder}/localityData"))
    assert "Partition%200" in names and "%2E" in names and "%2E%2E" in names


def test_rewrite_with_one_percent_changed_writes_one_percent(zk_store: ZkMetadataStore) -> None:
    tasks = 100_000
    before = locality(tasks)
    started = time.monotonic()
    full_ops = zk_store.locality.write(before)
    full_seconds = time.monotonic() - started
    transactions = zk_store.transactions

    changed = dict(before)
    for i in range(0, tasks, 100):  # 1% of the tasks move
        changed[f"Partition {i}"] = "zone-9/elsewhere"
    ops_before, reads_before, transactions_before = (
        zk_store.ops,
        zk_store.reads,
        zk_store.transactions,
    )
    one_percent_ops = zk_store.locality.write(changed)

    assert full_ops == tasks
    assert transactions > 1  # batched: 100,000 entries do not fit in one request
    assert one_percent_ops == tasks // 100
    # The store's own operation counter agrees (each transaction also bumps localityWrites) ...
    bumps = zk_store.transactions - transactions_before
    assert zk_store.ops - ops_before == tasks // 100 + bumps
    # ... and it read no entry: it knows what it wrote (the marker and localityWrites only).
    assert zk_store.reads - reads_before == 2
    assert zk_store.locality.write(changed) == 0  # nothing differs: nothing written
    assert zk_store.locality.read() == changed
    assert full_seconds < 60


def test_a_write_by_another_store_is_seen_before_skipping_an_entry(
    zk_store: ZkMetadataStore, zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> None:
    """A task moves to another processor and back: its first writer's memory of the entry is
    stale, so it reads again rather than skip the write."""
    other = ZkMetadataStore(zk_connect(zk_server.hosts), zk_store.layout.folder, run_id="run-1")
    assert zk_store.locality.write({"t1": "host-a", "t2": "host-a"}) == 2
    assert other.locality.write({"t1": "host-b"}) == 1
    assert zk_store.locality.write({"t1": "host-a", "t2": "host-a"}) == 1
    assert zk_store.locality.read() == {"t1": "host-a", "t2": "host-a"}
    assert other.locality.write({"t1": "host-b", "t2": "host-b"}) == 2
    assert zk_store.locality.write({"t2": "host-c"}) == 1
    assert other.locality.read() == {"t1": "host-b", "t2": "host-c"}


def test_a_locality_reset_is_seen_before_skipping_an_entry(
    zk_store: ZkMetadataStore, zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> None:
    other = ZkMetadataStore(zk_connect(zk_server.hosts), zk_store.layout.folder, run_id="run-1")
    assert zk_store.locality.write({"t1": "host-a"}) == 1
    other.locality.reset()
    assert zk_store.locality.write({"t1": "host-a"}) == 1
    assert other.locality.read() == {"t1": "host-a"}


def test_write_is_a_partial_update(zk_store: ZkMetadataStore) -> None:
    zk_store.locality.write({"t1": "a", "t2": "b"})
    assert zk_store.locality.write({"t2": "c", "t3": "d"}) == 2
    assert zk_store.locality.read() == {"t1": "a", "t2": "c", "t3": "d"}


def test_new_run_id_starts_empty(
    zk_store: ZkMetadataStore, zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> None:
    zk_store.locality.write({"t1": "host-a", "t2": "host-b"})
    next_run = ZkMetadataStore(zk_connect(zk_server.hosts), zk_store.layout.folder, run_id="run-2")

    assert next_run.locality.read() == {}
    ops = next_run.locality.write({"t3": "host-c"})

    assert ops == 2 + 1 + 1  # two old entries deleted, the run marked, one entry created
    assert next_run.locality.read() == {"t3": "host-c"}
    assert zk_store.locality.read() == {}  # the old run's view is gone too
    assert next_run.locality.write({"t3": "host-c"}) == 0


def test_each_transaction_stays_under_the_request_limit(zk_store: ZkMetadataStore) -> None:
    # Long names and values: about 2 KB per entry, so 2,000 entries are about 4 MB in all.
    wanted = {f"task-{i}-" + "n" * 900: "zone/" + "v" * 1000 + str(i) for i in range(2000)}
    assert zk_store.locality.write(wanted) == 2000
    assert zk_store.transactions >= 4 * 1_000_000 // SAFE_REQUEST_BYTES
    assert zk_store.locality.read() == wanted


def test_garbage_value_is_corrupt_data_and_is_not_overwritten(zk_store: ZkMetadataStore) -> None:
    zk_store.locality.write({"Partition 1": "host-a"})
    path = f"{zk_store.layout.folder}/localityData/Partition%201"
    zk_store.client.set(path, b"\xff\xfe\x00garbage")

    with pytest.raises(CorruptDataError) as error:
        zk_store.locality.read()

    assert error.value.path == path
    assert "UTF-8" in error.value.problem
    assert zk_store.client.get(path)[0] == b"\xff\xfe\x00garbage"


def test_garbage_node_name_is_corrupt_data(zk_store: ZkMetadataStore) -> None:
    path = f"{zk_store.layout.folder}/localityData/not encoded"
    zk_store.client.create(path, b"host-a")
    with pytest.raises(CorruptDataError) as error:
        zk_store.locality.read()
    assert error.value.path == path


def test_garbage_run_marker_is_corrupt_data(zk_store: ZkMetadataStore) -> None:
    marker = f"{zk_store.layout.folder}/localityData"
    zk_store.client.set(marker, b"[1, 2")
    with pytest.raises(CorruptDataError) as error:
        zk_store.locality.read()
    assert error.value.path == marker
    with pytest.raises(CorruptDataError):
        zk_store.locality.write({"t": "x"})
    assert zk_store.client.get(marker)[0] == b"[1, 2"


def test_bad_input_is_refused_before_writing(zk_store: ZkMetadataStore) -> None:
    ops = zk_store.ops
    with pytest.raises(ValueError):
        zk_store.locality.write({"t": ""})
    with pytest.raises(ValueError):
        zk_store.locality.write({"": "x"})
    with pytest.raises(ValueError):
        zk_store.locality.write({"t": "line\nbreak"})
    assert zk_store.ops == ops
