"""Crashes and limits on a real ZooKeeper: kill -9 mid-write, bounded retries, oversized writes."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from coordinator.launchers.processes import free_port
from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from metadata.errors import MetadataError
from metadata.model import ContainerModel, FrozenMap, JobModel, SystemStreamPartition, TaskModel
from metadata.serde import dump_job_model
from metadata.zk import NodeTooLarge, StoreUnavailable, ZkMetadataStore
from metadata.zk.chunks import split_blob
from metadata.zk.connection import EagerConnection
from metadata.zk.handler import PollingHandler

pytestmark = pytest.mark.zk


def job_model(version: int, tasks: int) -> JobModel:
    containers = {}
    for p in range(4):
        owned = {
            f"Partition {i}": TaskModel(
                f"Partition {i}", frozenset({SystemStreamPartition("kafka", "events", i)}), i
            )
            for i in range(p, tasks, 4)
        }
        containers[f"p-{p}"] = ContainerModel(f"p-{p}", f"node-{p}", FrozenMap(owned))
    return JobModel(version, FrozenMap(containers))


def test_server_killed_mid_publish_shows_no_half_model_and_the_client_carries_on(
    zk_private_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient], zk_job_folder: str
) -> None:
    # kazoo waits session_timeout / len(hosts) for a server's answer to a connect request.
    # ZooKeeper 3.8.0 accepts connections before it has loaded its data, and a connection that
    # arrives in that window is never answered (a NullPointerException in the server): a client
    # alone on one address would wait its whole session timeout there and lose the session.
    # Listing the address four times makes such an attempt give up after a quarter of it.
    hosts = ",".join([zk_private_server.hosts] * 4)
    client = zk_connect(hosts, session_timeout_s=30.0)
    store = ZkMetadataStore(
        client, zk_job_folder, run_id="run-1", chunk_size=512, retry_deadline_s=60.0
    )
    store.ensure_layout()
    node = store.processors.register("p-0", "node-0")
    epoch = store.epochs.acquire()
    first, second = job_model(1, 40), job_model(2, 30_000)
    store.job_models.publish(first, epoch=epoch, participants=list(first.containers))

    # A reader on its own session checks every model it can see while the writer is busy.
    reader = ZkMetadataStore(
        zk_connect(hosts, session_timeout_s=30.0),
        zk_job_folder,
        run_id="run-1",
        retry_deadline_s=60.0,
    )
    seen: list[int] = []
    reader_errors: list[BaseException] = []
    stop = threading.Event()

    def read_continuously() -> None:
        while not stop.is_set():
            try:
                model = reader.job_models.read_latest()
            except StoreUnavailable:
                continue
            except BaseException as exc:  # recorded and asserted on below
                reader_errors.append(exc)
                return
            assert model is not None
            assert model in (first, second), "a reader saw a model that was never published"
            seen.append(model.version)

    publish_errors: list[BaseException] = []

    def publish_second() -> None:
        try:
            store.job_models.publish(second, epoch=epoch, participants=list(second.containers))
        except BaseException as exc:  # recorded and asserted on below
            publish_errors.append(exc)

    reading = threading.Thread(target=read_continuously)
    writing = threading.Thread(target=publish_second)
    reading.start()
    writing.start()
    folder = f"{zk_job_folder}/jobModels/2"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # kill the server once some chunks are written
        if client.exists(folder) and len(client.get_children(folder)) >= 5:
            break
        time.sleep(0.002)
    chunks_before_crash = len(client.get_children(folder))
    zk_private_server.kill()
    time.sleep(0.5)
    zk_private_server.start()
    writing.join(120)
    time.sleep(0.2)
    stop.set()
    reading.join(60)

    _, all_chunks = split_blob(
        dump_job_model(second, run_id="run-1"), version=2, epoch=1, chunk_size=512
    )
    # The crash came in the middle of the write.
    assert 5 <= chunks_before_crash < len(all_chunks), (chunks_before_crash, len(all_chunks))
    assert not writing.is_alive() and not reading.is_alive()
    assert publish_errors == []
    assert reader_errors == []
    assert seen and set(seen) <= {1, 2} and seen == sorted(seen)
    assert store.job_models.read_latest() == second
    assert reader.job_models.read_latest() == second
    # Same session after the restart: the registration survived, the client works on.
    assert client.exists(node) is not None
    assert store.processors.locality() == {"p-0": "node-0"}
    store.locality.write({"Partition 1": "node-1"})
    assert reader.locality.read() == {"Partition 1": "node-1"}


def test_retries_are_bounded_when_the_server_is_gone(
    zk_private_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient], zk_job_folder: str
) -> None:
    client = zk_connect(",".join([zk_private_server.hosts] * 4))  # see the test above
    store = ZkMetadataStore(client, zk_job_folder, run_id="run-1", retry_deadline_s=2.0)
    store.ensure_layout()
    zk_private_server.stop()

    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as error:
        store.locality.read()
    elapsed = time.monotonic() - started

    assert 1.5 <= elapsed < 6
    assert "did not answer" in error.value.problem
    with pytest.raises(StoreUnavailable):
        store.locality.write({"t": "x"})

    zk_private_server.start()  # the client is usable again once the server is back
    patient = ZkMetadataStore(client, zk_job_folder, run_id="run-1", retry_deadline_s=30.0)
    patient.locality.write({"t": "x"})
    assert store.locality.read() == {"t": "x"}


def test_oversized_writes_are_refused_before_sending(zk_store: ZkMetadataStore) -> None:
    ops = zk_store.ops
    started = time.monotonic()
    with pytest.raises(NodeTooLarge) as error:
        zk_store.processors.register("p-1", "loc", blob="x" * 1_100_000)
    with pytest.raises(ValueError, match="location id must be at most 1024 characters"):
        zk_store.locality.write({"t": "y" * 1_048_576})  # the id rule refuses it, unsent
    with pytest.raises(ValueError):
        ZkMetadataStore(zk_store.client, zk_store.layout.folder, run_id="r", chunk_size=1_048_576)

    assert time.monotonic() - started < 2  # no retry loop
    assert error.value.path.startswith(f"{zk_store.layout.folder}/processors/")
    assert zk_store.ops == ops
    assert zk_store.processors.read() == ([], [])
    assert zk_store.client.connected


def test_connecting_to_nothing_fails_within_the_timeout(
    zk_connect: Callable[..., KazooClient],
) -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="could not connect") as error:
        zk_connect(f"127.0.0.1:{free_port()}", connect_timeout_s=1.0)
    assert time.monotonic() - started < 5
    assert isinstance(error.value, MetadataError)


def test_clients_wait_with_poll_and_ride_out_a_restart(
    zk_private_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> None:
    client = zk_connect(zk_private_server.hosts, session_timeout_s=30.0)
    assert isinstance(client.handler, PollingHandler)
    assert isinstance(client._connection, EagerConnection)  # reads first, polls on EAGAIN
    client.create("/polled", b"1")
    zk_private_server.restart(hard=True, down_s=0.5)
    deadline = time.monotonic() + 20
    while True:
        try:
            assert client.get("/polled")[0] == b"1"  # same session, after reconnecting
            break
        except KazooException:  # not connected again yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_time_budget_bounds_a_block_of_calls_on_a_frozen_server(
    zk_private_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient], zk_job_folder: str
) -> None:
    """SIGSTOP: the server neither answers nor closes its sockets. Each call alone waits out its
    retry deadline; in a ``within`` block the calls together end by the budget, and the calls
    after it is spent fail at once."""
    client = zk_connect(zk_private_server.hosts)
    store = ZkMetadataStore(client, zk_job_folder, run_id="run-1", retry_deadline_s=30.0)
    store.ensure_layout()
    assert zk_private_server.pid is not None
    os.kill(zk_private_server.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with store.within(3.0):
            with pytest.raises(StoreUnavailable):
                store.locality.write({"t": "x"})
            first = time.monotonic() - started
            with pytest.raises(StoreUnavailable):
                store.batches.read()
        elapsed = time.monotonic() - started
    finally:
        os.kill(zk_private_server.pid, signal.SIGCONT)
    assert 2.5 <= first < 4.5 and elapsed < 4.5
    store.locality.write({"t": "y"})  # no budget once the block ended: it waits for the server
    assert store.locality.read() == {"t": "y"}
