"""Digest ACLs and TLS on a real ZooKeeper: a client without credentials can neither read nor
change a protected job; TLS options reach kazoo."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from coordinator.demo.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from coordinator.demo.zookeeper import TlsFiles
from metadata.model import ContainerModel, FrozenMap, JobModel
from metadata.zk import PermissionDenied, StoreUnavailable, ZkMetadataStore

pytestmark = pytest.mark.zk

AUTH = "affinity:s3cret"


def model(version: int) -> JobModel:
    return JobModel(version, FrozenMap({"p-1": ContainerModel("p-1", "zone-a/node-1")}))


def tree(client: KazooClient, root: str) -> dict[str, bytes]:
    nodes = {}
    stack = [root]
    while stack:
        path = stack.pop()
        nodes[path] = client.get(path)[0]
        stack += [f"{path}/{child}" for child in client.get_children(path)]
    return nodes


@pytest.fixture
def protected(
    zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient], zk_job_folder: str
) -> Iterator[ZkMetadataStore]:
    """A job written by an authenticated client: a model, a barrier, locality, a processor."""
    client = zk_connect(zk_server.hosts, auth=AUTH)
    store = ZkMetadataStore(client, zk_job_folder + "/protected", run_id="run-1", auth=AUTH)
    store.ensure_layout()
    epoch = store.epochs.acquire()
    store.job_models.publish(model(1), epoch=epoch, participants=["p-1"])
    store.barriers.join(1, "p-1")
    store.locality.write({"Partition 0": "zone-a/node-1"})
    store.processors.register("p-1", "zone-a/node-1")
    yield store
    store.close()


def test_every_node_of_a_protected_job_has_the_digest_acl(protected: ZkMetadataStore) -> None:
    expected = make_digest_acl("affinity", "s3cret", all=True)
    paths = tree(protected.client, protected.layout.folder)
    assert len(paths) > 15
    for path in paths:
        acls, _ = protected.client.get_acls(path)
        assert acls == [expected], path


@pytest.mark.parametrize("credentials", ["", "affinity:wrong", "someone:s3cret"])
def test_client_without_the_credentials_cannot_read_or_change_the_job(
    protected: ZkMetadataStore,
    zk_server: ZooKeeperServer,
    zk_connect: Callable[..., KazooClient],
    credentials: str,
) -> None:
    before = tree(protected.client, protected.layout.folder)
    outsider = ZkMetadataStore(
        zk_connect(zk_server.hosts, auth=credentials),
        protected.layout.folder,
        run_id="run-1",
        auth=credentials,
    )
    attempts: list[Callable[[], object]] = [
        outsider.job_models.latest_version,
        outsider.job_models.read_latest,
        lambda: outsider.job_models.read(1),
        outsider.locality.read,
        outsider.processors.read,
        lambda: outsider.barriers.state(1),
        lambda: outsider.locality.write({"Partition 0": "evil"}),
        lambda: outsider.processors.register("p-evil", "evil"),
        lambda: outsider.barriers.join(1, "p-evil"),
        outsider.epochs.acquire,
        outsider.locality.reset,
    ]
    for attempt in attempts:
        with pytest.raises(PermissionDenied) as error:
            attempt()
        assert error.value.path.startswith(protected.layout.folder)
        assert "permission denied" in error.value.problem

    assert tree(protected.client, protected.layout.folder) == before
    assert protected.job_models.read_latest() == model(1)
    assert protected.locality.read() == {"Partition 0": "zone-a/node-1"}


def test_another_job_can_live_next_to_a_protected_one(
    protected: ZkMetadataStore, zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> None:
    sibling = protected.layout.folder.rsplit("/", 1)[0] + "/open-job"
    store = ZkMetadataStore(zk_connect(zk_server.hosts), sibling, run_id="run-1")
    store.ensure_layout()
    store.locality.write({"t": "x"})
    assert store.locality.read() == {"t": "x"}


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(Path(tmp_path_factory.mktemp("zk-tls")), tls=True)
    server.start()
    yield server
    server.stop()


def test_tls_connection_options_reach_kazoo(
    tls_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> None:
    assert tls_server.tls is not None
    client = zk_connect(
        tls_server.secure_hosts,
        use_ssl=True,
        ca=tls_server.tls.ca,
        certfile=tls_server.tls.certfile,
        keyfile=tls_server.tls.keyfile,
    )
    store = ZkMetadataStore(client, "/affinity/tls-job", run_id="run-1")
    store.ensure_layout()
    epoch = store.epochs.acquire()
    store.job_models.publish(model(1), epoch=epoch, participants=["p-1"])
    assert store.job_models.read_latest() == model(1)


def test_plain_client_on_the_tls_port_fails_clearly(
    tls_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> None:
    with pytest.raises(StoreUnavailable, match="could not connect"):
        zk_connect(tls_server.secure_hosts, connect_timeout_s=2.0)


def test_tls_client_without_a_trusted_certificate_fails(
    tls_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient], tmp_path: Path
) -> None:
    stranger = TlsFiles.create(tmp_path / "stranger")
    with pytest.raises(StoreUnavailable):
        zk_connect(
            tls_server.secure_hosts,
            use_ssl=True,
            ca=stranger.ca,
            certfile=stranger.certfile,
            keyfile=stranger.keyfile,
            connect_timeout_s=2.0,
        )
