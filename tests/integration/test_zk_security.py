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
    epoch = store.acquire_epoch()
    store.publish_job_model(model(1), epoch=epoch, participants=["p-1"])
    store.join_barrier(1, "p-1")
    store.write_task_locality({"Partition 0": "zone-a/node-1"})
    store.register_processor("p-1", "zone-a/node-1")
    yield store
    store.close()


def test_every_node_of_a_protected_job_has_the_digest_acl(protected: ZkMetadataStore) -> None:
    expected = make_digest_acl("affinity", "s3cret", all=True)
    paths = tree(protected.client, protected.job_folder)
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
    before = tree(protected.client, protected.job_folder)
    outsider = ZkMetadataStore(
        zk_connect(zk_server.hosts, auth=credentials),
        protected.job_folder,
        run_id="run-1",
        auth=credentials,
    )
    attempts: list[Callable[[], object]] = [
        outsider.read_latest_version,
        outsider.read_latest_job_model,
        lambda: outsider.read_job_model(1),
        outsider.read_task_locality,
        outsider.read_processors,
        lambda: outsider.barrier_state(1),
        lambda: outsider.write_task_locality({"Partition 0": "evil"}),
        lambda: outsider.register_processor("p-evil", "evil"),
        lambda: outsider.join_barrier(1, "p-evil"),
        outsider.acquire_epoch,
        outsider.reset_task_locality,
    ]
    for attempt in attempts:
        with pytest.raises(PermissionDenied) as error:
            attempt()
        assert error.value.path.startswith(protected.job_folder)
        assert "permission denied" in error.value.problem

    assert tree(protected.client, protected.job_folder) == before
    assert protected.read_latest_job_model() == model(1)
    assert protected.read_task_locality() == {"Partition 0": "zone-a/node-1"}


def test_another_job_can_live_next_to_a_protected_one(
    protected: ZkMetadataStore, zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> None:
    sibling = protected.job_folder.rsplit("/", 1)[0] + "/open-job"
    store = ZkMetadataStore(zk_connect(zk_server.hosts), sibling, run_id="run-1")
    store.ensure_layout()
    store.write_task_locality({"t": "x"})
    assert store.read_task_locality() == {"t": "x"}


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
    epoch = store.acquire_epoch()
    store.publish_job_model(model(1), epoch=epoch, participants=["p-1"])
    assert store.read_latest_job_model() == model(1)


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
