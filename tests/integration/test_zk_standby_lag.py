"""Standby lag reports on a real ZooKeeper: differential, batched writes; removal; bad data."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import structlog.testing
from kazoo.client import KazooClient

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from metadata.errors import CorruptDataError
from metadata.zk import ZkMetadataStore

pytestmark = pytest.mark.zk


def test_only_changed_entries_are_written(zk_store: ZkMetadataStore) -> None:
    zk_store.ensure_layout()
    lag = zk_store.standby_lag
    before = zk_store.ops

    assert lag.write("p-2", {"Partition 0": 1200, "Partition 3": 0}) == 3  # folder + 2 creates
    assert lag.write("p-2", {"Partition 0": 1200, "Partition 3": 0}) == 0  # nothing changed
    assert lag.write("p-2", {"Partition 0": 40, "Partition 3": 0}) == 1  # one set
    assert lag.write("p-1", {"Partition 3": 7}) == 2  # the processor's folder, one create

    assert zk_store.ops - before == 6  # no write beyond the counted ones
    assert lag.read() == {"p-1": {"Partition 3": 7}, "p-2": {"Partition 0": 40, "Partition 3": 0}}
    assert lag.read(["p-2", "p-9"]) == {"p-2": {"Partition 0": 40, "Partition 3": 0}}
    entry = f"{zk_store.layout.folder}/standbyLag/p-2/Partition%200"
    assert zk_store.client.get(entry)[0] == b"40"


def test_many_entries_go_in_few_transactions(zk_store: ZkMetadataStore) -> None:
    zk_store.ensure_layout()
    lags = {f"Partition {n}": n for n in range(500)}
    transactions = zk_store.transactions
    assert zk_store.standby_lag.write("p-1", lags) == 501  # + the processor's folder
    assert zk_store.transactions - transactions <= 3
    assert zk_store.standby_lag.read(["p-1"]) == {"p-1": lags}


def test_remove_and_clear(zk_store: ZkMetadataStore) -> None:
    zk_store.ensure_layout()
    lag = zk_store.standby_lag
    lag.write("p-1", {"a": 1, "b": 2, "c": 3})
    assert lag.remove("p-1", ["a", "gone"]) == 1
    assert lag.read() == {"p-1": {"b": 2, "c": 3}}
    assert lag.clear("p-1") == 3  # two entries and the emptied folder
    assert lag.clear("p-1") == 0 and lag.clear("never-reported") == 0
    assert lag.read() == {}
    assert zk_store.client.get_children(f"{zk_store.layout.folder}/standbyLag") == []


def test_a_leader_read_costs_one_request_when_no_processor_reports(
    zk_store: ZkMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    zk_store.ensure_layout()
    listed: list[str] = []
    list_children = zk_store.client.get_children_async

    def counting(path: str, *args: object, **kwargs: object) -> object:
        listed.append(path)
        return list_children(path, *args, **kwargs)

    monkeypatch.setattr(zk_store.client, "get_children_async", counting)
    live = [f"p-{n}" for n in range(200)]
    assert zk_store.standby_lag.read(live) == {}
    assert listed == [f"{zk_store.layout.folder}/standbyLag"]  # not one listing per processor

    zk_store.standby_lag.write("p-7", {"a": 0})
    listed.clear()
    assert zk_store.standby_lag.read(live) == {"p-7": {"a": 0}}
    assert len(listed) == 2  # the folders, then p-7's entries


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3", None])
def test_a_bad_lag_is_refused_before_anything_is_written(
    zk_store: ZkMetadataStore, bad: object
) -> None:
    zk_store.ensure_layout()
    before = zk_store.ops
    with pytest.raises(ValueError, match="lag of 'a' must be an integer >= 0"):
        zk_store.standby_lag.write("p-1", {"b": 1, "a": bad})  # type: ignore[dict-item]
    assert zk_store.ops == before


def test_a_corrupt_entry_names_its_node_or_is_skipped(zk_store: ZkMetadataStore) -> None:
    zk_store.ensure_layout()
    zk_store.standby_lag.write("p-1", {"a": 1, "b": 2})
    path = f"{zk_store.layout.folder}/standbyLag/p-1/b"
    zk_store.client.set(path, b"-3")

    with pytest.raises(CorruptDataError) as raised:
        zk_store.standby_lag.read()
    assert raised.value.path == path
    skipped: list[CorruptDataError] = []
    assert zk_store.standby_lag.read(on_corrupt=skipped.append) == {"p-1": {"a": 1}}
    assert [e.path for e in skipped] == [path]


def test_a_write_racing_a_removal_is_retried(zk_store: ZkMetadataStore) -> None:
    zk_store.ensure_layout()
    lag = zk_store.standby_lag
    lag.write("p-1", {"a": 1})
    # The folder goes between the read and the commit of the first attempt.
    original = lag._commit
    calls = []

    def commit_after_removal(ops: list, what: str) -> int:  # type: ignore[type-arg]
        if not calls:
            zk_store.client.delete(f"{zk_store.layout.folder}/standbyLag/p-1", recursive=True)
        calls.append(what)
        return original(ops, what)

    lag._commit = commit_after_removal  # type: ignore[method-assign]
    with structlog.testing.capture_logs() as logs:
        assert lag.write("p-1", {"a": 2}) == 2  # the folder again, and the entry
    assert len(calls) == 2
    assert [e["event"] for e in logs].count("zk.standby_lag_write_conflict") == 1
    assert lag.read() == {"p-1": {"a": 2}}


def test_the_reports_go_with_the_writers_session(
    zk_store: ZkMetadataStore, zk_connect: Callable[..., KazooClient], zk_server: ZooKeeperServer
) -> None:
    zk_store.ensure_layout()
    client = zk_connect(zk_server.hosts)
    writer = ZkMetadataStore(client, zk_store.layout.folder, run_id=zk_store.run_id)
    writer.standby_lag.write("p-1", {"a": 3})
    assert zk_store.standby_lag.read() == {"p-1": {"a": 3}}
    client.stop()  # the session ends: its ephemeral entries go
    assert zk_store.standby_lag.read() == {}
