"""Shared fixtures. ZooKeeper: one real server per test session, a fresh job folder per test.

- ``zk_server``: a private ZooKeeper (``coordinator.launchers.zookeeper.EmbeddedZooKeeper``,
  Debian's package) on a free loopback port, for the session.
  Tests must not stop or kill it; a test that needs to crash a server uses ``zk_private_server``.
- ``zk_private_server``: a server of the test's own (about 1 s to start), free to kill/restart.
- ``zk_client``: a started KazooClient (``metadata.zk.connect``) on ``zk_server``.
- ``zk_job_folder``: a job folder no other test uses.
- ``zk_store``: a ``ZkMetadataStore`` on that folder, layout created, run id ``run-1``.
- ``zk_ensemble``: a 3-server ensemble on loopback (``coordinator.launchers.ensemble``) for the
  session. Tests may kill, restart, freeze and thaw its servers: the fixture puts it back (every
  server running, none frozen, one leader) after each test.
- ``zk_lagging_ensemble``: a 3-server ensemble whose server 2 reaches the others through
  pausable links (``partition()`` / ``heal()``: a lagging follower), ``syncLimit`` 10 s, for
  the session. Tests heal it before they end.

Kafka: one real broker per test session (``coordinator.launchers.kafka.KafkaBroker``, KRaft, jars
from Maven Central by ``make kafka``).

- ``kafka_broker``: the session's broker, running. A test may kill, stop or restart it (it
  keeps its data); the fixture starts it again after the test if it is down.
- ``kafka_topic``: ``kafka_topic(partitions, config=None)`` creates a topic no other test uses and
  returns its name.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from coordinator.launchers.ensemble import ZooKeeperEnsemble
from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from metadata.zk import ZkMetadataStore, connect


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedZooKeeper]:
    server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_private_server(tmp_path: Path) -> Iterator[EmbeddedZooKeeper]:
    server = EmbeddedZooKeeper(tmp_path / "zookeeper")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_connect() -> Iterator[Callable[..., KazooClient]]:
    """``zk_connect(hosts, **kwargs)``: metadata.zk.connect, closed at the end of the test."""
    clients: list[KazooClient] = []

    def make(hosts: str, **kwargs: Any) -> KazooClient:
        kwargs.setdefault("session_timeout_s", 6.0)
        client = connect(hosts, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


@pytest.fixture
def zk_client(zk_server: EmbeddedZooKeeper, zk_connect: Callable[..., KazooClient]) -> KazooClient:
    return zk_connect(zk_server.hosts)


@pytest.fixture
def zk_job_folder(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:60]
    return f"/affinity-test/{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def zk_store(zk_client: KazooClient, zk_job_folder: str) -> Iterator[ZkMetadataStore]:
    store = ZkMetadataStore(zk_client, zk_job_folder, run_id="run-1", retry_deadline_s=10.0)
    store.ensure_layout()
    yield store
    store.close()


@pytest.fixture(scope="session")
def _zk_ensemble_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("ensemble"))
    ensemble.start()
    try:
        yield ensemble
    finally:
        ensemble.stop()


@pytest.fixture
def zk_ensemble(_zk_ensemble_session: ZooKeeperEnsemble) -> Iterator[ZooKeeperEnsemble]:
    ensemble = _zk_ensemble_session
    ensemble.wait_quorum()
    yield ensemble
    for index, server in enumerate(ensemble.servers):  # put back what the test broke
        ensemble.thaw(index)
        if not server.running:
            ensemble.start_server(index, wait=False)
    ensemble.wait_quorum(60)


@pytest.fixture(scope="session")
def zk_lagging_ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("lagging"), lagging=2, sync_limit=20)
    ensemble.start()
    try:
        ensemble.make_follower(2)
        yield ensemble
    finally:
        ensemble.stop()


@pytest.fixture(scope="session")
def _kafka_session_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def kafka_broker(_kafka_session_broker: KafkaBroker) -> Iterator[KafkaBroker]:
    broker = _kafka_session_broker
    if not broker.running:
        broker.start()
    yield broker
    if not broker.running:  # put back what the test broke
        broker.start()


@pytest.fixture
def kafka_topic(kafka_broker: KafkaBroker, request: pytest.FixtureRequest) -> Callable[..., str]:
    made: list[str] = []

    def create(partitions: int, config: dict[str, str] | None = None) -> str:
        base = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:60]
        name = f"{base}-{len(made)}-{uuid.uuid4().hex[:6]}"
        kafka_broker.create_topic(name, partitions, config=config)
        made.append(name)
        return name

    return create
