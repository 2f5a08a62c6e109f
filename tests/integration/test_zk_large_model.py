"""A processor's session survives decoding a large job model (issue 16: a processor lost its 4 s
session while decoding a 160 MB format-1 model).

The processor reads and decodes on its member group's own thread, never on kazoo's: what could
still starve kazoo's thread (its pings) is one long call holding the GIL. Here a real ZooKeeper, a
processor with a 4 s session (the probe's), and a 300,000-task model of one container, whose view
spans several chunks (the container is the whole model), so the processor reads and decodes all
of it (format 2) before it joins the barrier: its session stays connected throughout, and no
thread waits long for the GIL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from coordinator.member.processor import ProcessorClient
from metadata.model import ContainerModel, FrozenMap, JobModel, SystemStreamPartition, TaskModel
from metadata.zk import ZkMetadataStore

pytestmark = pytest.mark.zk

TASKS = 300_000
SESSION_S = 4.0


def large_model(version: int, pid: str) -> JobModel:
    tasks = {
        f"Partition {i}": TaskModel(
            f"Partition {i}", frozenset({SystemStreamPartition("kafka", "events", i)}), i
        )
        for i in range(TASKS)
    }
    return JobModel(version, FrozenMap({pid: ContainerModel(pid, "zone-a/node-1", tasks)}))


class GilWatch:
    """The longest a thread that wakes every 5 ms had to wait to run again (GIL hold + load)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            time.sleep(0.005)
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            last = now

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(5)
        return self.longest


def test_session_survives_decoding_a_large_model(
    zk_store: ZkMetadataStore, zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> None:
    leader = ZkMetadataStore(
        zk_store.client, zk_store.layout.folder, run_id="run-1", chunk_size=100_000
    )
    model = large_model(1, "p-1")
    leader.job_models.publish(model, epoch=leader.epochs.acquire(), participants=["p-1"])
    assert len(leader.job_models.read_manifest(1).view_spans[0]) > 1  # it reads every task
    del model
    client = zk_connect(zk_server.hosts, session_timeout_s=SESSION_S)
    states: list[str] = []
    client.add_listener(states.append)
    store = ZkMetadataStore(client, zk_store.layout.folder, run_id="run-1")
    read: list[int] = []
    read_container = store.job_models.read_container

    def reading(version: int, processor_id: str, **kwargs: Any) -> ContainerModel | None:
        container = read_container(version, processor_id, **kwargs)
        read.append(0 if container is None else len(container.tasks))
        return container

    store.job_models.read_container = reading  # type: ignore[method-assign]
    processor = ProcessorClient(
        client, store, "p-1", "zone-a/node-1", on_start=lambda v, t: None, on_stop=lambda v, t: None
    )
    stop = threading.Event()
    thread = threading.Thread(target=processor.run, args=(stop,), daemon=True)
    watch = GilWatch()
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while leader.barriers.participants(1) != {"p-1"} and time.monotonic() < deadline:
            time.sleep(0.05)
        longest = watch.stop()
    finally:
        stop.set()
        thread.join(30)
    assert read == [TASKS]  # read and decoded whole, once
    assert leader.barriers.participants(1) == {"p-1"}  # joined with the session it registered
    assert states == []  # never SUSPENDED, never LOST: the session held throughout
    assert longest < SESSION_S / 2, f"a thread waited {longest:.2f} s to run"
