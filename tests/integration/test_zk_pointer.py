"""The version pointer as a processor follows it, on a real ZooKeeper: a watch left by the read,
and the next version's manifest read in the same round trip."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from zkrequests import requests_sent

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from metadata.model import ContainerModel, FrozenMap, JobModel
from metadata.zk import ZkMetadataStore

pytestmark = pytest.mark.zk


def publish(store: ZkMetadataStore, version: int) -> None:
    epoch = store.epochs.current() or store.epochs.acquire()
    model = JobModel(version, FrozenMap({"p-1": ContainerModel("p-1", "loc")}))
    store.job_models.publish(model, epoch=epoch, participants=["p-1"], base=version - 1)


def test_the_guessed_manifest_comes_with_the_pointer_and_is_read_once(
    zk_store: ZkMetadataStore,
    zk_server: ZooKeeperServer,
    zk_connect: Callable[..., KazooClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    publish(zk_store, 1)
    publish(zk_store, 2)
    processor = ZkMetadataStore(zk_connect(zk_server.hosts), zk_store.layout.folder, run_id="run-1")
    sent = requests_sent(processor.client, monkeypatch)
    changed = threading.Event()

    assert processor.job_models.latest_version(watch=lambda _e: changed.set(), guess=2) == 2
    assert sent == ["GetData", "GetData"]  # the pointer and the manifest of 2, together
    head = processor.job_models.read_manifest_head(2)
    assert (head.version, head.base) == (2, 1)
    assert len(sent) == 2  # the manifest came with the pointer
    processor.job_models.read_manifest_head(2)
    assert len(sent) == 3  # kept for one read only

    publish(zk_store, 3)
    assert changed.wait(10)  # the read left a watch on the pointer
    assert processor.job_models.latest_version(guess=3) == 3
    assert processor.job_models.read_manifest_head(3).version == 3
    assert len(sent) == 5


def test_a_wrong_guess_costs_nothing_but_its_read(
    zk_store: ZkMetadataStore,
    zk_server: ZooKeeperServer,
    zk_connect: Callable[..., KazooClient],
) -> None:
    publish(zk_store, 1)
    publish(zk_store, 2)
    processor = ZkMetadataStore(zk_connect(zk_server.hosts), zk_store.layout.folder, run_id="run-1")
    assert processor.job_models.latest_version(guess=7) == 2  # no version 7
    assert processor.job_models.read_manifest_head(2).version == 2
    assert processor.job_models.latest_version(guess=1) == 2  # version 1, not the latest
    assert processor.job_models.read_manifest_head(2).version == 2  # not 1's manifest
