"""Digest ACLs and TLS on a real ZooKeeper: a client without credentials can neither read nor
change a protected job; a protected job does not run in a folder others created and can change
(squatting); TLS options reach kazoo."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog.testing
from kazoo.client import KazooClient
from kazoo.security import ACL, OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from coordinator.launchers.zookeeper import TlsFiles
from metadata.model import ContainerModel, FrozenMap, JobModel
from metadata.zk import PermissionDenied, StoreUnavailable, UnsafeAcl, ZkMetadataStore

pytestmark = pytest.mark.zk

AUTH = "affinity:s3cret"
AFFINITY = str(Path(sys.executable).with_name("affinity"))


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


# ---------------------------------------------------------------- a squatted job folder

JOB_ACL = make_digest_acl("affinity", "s3cret", all=True)


@pytest.mark.parametrize(
    ("acl", "shown"),
    [
        (OPEN_ACL_UNSAFE, "world:anyone=cdrwa"),
        (
            [JOB_ACL, make_acl("world", "anyone", read=True, create=True)],
            "digest:affinity=cdrwa, world:anyone=cr",
        ),
        ([make_acl("world", "anyone", read=True, delete=True)], "world:anyone=dr"),
    ],
    ids=["open", "ours-and-world-create", "world-delete"],
)
def test_a_protected_job_refuses_a_folder_others_can_change(
    zk_server: ZooKeeperServer,
    zk_connect: Callable[..., KazooClient],
    zk_job_folder: str,
    acl: list[ACL],
    shown: str,
) -> None:
    folder = f"{zk_job_folder}/clicks-1"
    squatter = zk_connect(zk_server.hosts)  # anonymous, before the job ever started
    squatter.ensure_path(zk_job_folder)
    squatter.create(folder, b"", acl=acl)
    store = ZkMetadataStore(
        zk_connect(zk_server.hosts, auth=AUTH), folder, run_id="run-1", auth=AUTH
    )
    with pytest.raises(UnsafeAcl) as error:
        store.ensure_layout()
    assert error.value.path == folder
    assert f"ACL found: {shown}" in error.value.problem
    assert "s3cret" not in str(error.value)
    assert squatter.get_children(folder) == []  # nothing written in it


def test_a_squatted_node_inside_the_folder_is_refused_too(
    zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient], zk_job_folder: str
) -> None:
    folder = f"{zk_job_folder}/clicks-1"
    squatter = zk_connect(zk_server.hosts)
    squatter.create(f"{folder}/jobModelVersion", b"", makepath=True)
    squatter.set_acls(folder, [JOB_ACL])  # the folder looks right, its child does not
    store = ZkMetadataStore(
        zk_connect(zk_server.hosts, auth=AUTH), folder, run_id="run-1", auth=AUTH
    )
    with pytest.raises(UnsafeAcl) as error:
        store.ensure_layout()
    assert error.value.path == f"{folder}/jobModelVersion"


def test_a_folder_others_may_only_read_and_an_open_root_are_accepted(
    zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient], zk_job_folder: str
) -> None:
    folder = f"{zk_job_folder}/clicks-1"
    anonymous = zk_connect(zk_server.hosts)
    anonymous.ensure_path(zk_job_folder)  # an open root (world: all), as an open job leaves it
    owner = zk_connect(zk_server.hosts, auth=AUTH)
    owner.create(folder, b"", acl=[JOB_ACL, make_acl("world", "anyone", read=True)])
    with structlog.testing.capture_logs() as logs:  # (the store binds its logger when made)
        store = ZkMetadataStore(owner, folder, run_id="run-1", auth=AUTH)
        store.ensure_layout()
        store.ensure_layout()  # and again, on a folder the job made itself
    assert store.job_models.latest_version() is None
    opened = {e["path"] for e in logs if e["event"] == "zk.ancestor_acl_open"}
    assert zk_job_folder in opened  # (other open ancestors, e.g. the tests' shared root, too)


def test_processor_and_coordinator_exit_1_naming_the_squatted_folder(
    zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient], tmp_path: Path
) -> None:
    root = f"/squat-{uuid.uuid4().hex[:8]}"
    zk_connect(zk_server.hosts).create(f"{root}/clicks-1", b"", makepath=True)
    config = tmp_path / "job.yaml"
    config.write_text(
        "job: {name: clicks, id: '1', run_id: r1}\n"
        f"zookeeper: {{connect: '{zk_server.hosts}', root: {root}}}\n"
        "inputs: [{system: kafka, stream: events, partitions: 2}]\n"
        "coordinator: {http_port: 0}\n"
    )
    env = {**os.environ, "AFFINITY_ZK_AUTH": AUTH}
    commands = [
        ["processor", "run", "--processor-id", "p-1", "--location", "h1"],
        ["coordinator", "run"],
    ]
    for command in commands:
        result = subprocess.run(
            [AFFINITY, *command, "--config", str(config)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        errors = [line for line in result.stderr.splitlines() if line.startswith("affinity:")]
        assert result.returncode == 1, result.stderr
        assert errors == [errors[0]] and f"{root}/clicks-1" in errors[0]
        assert "world:anyone=cdrwa" in errors[0] and "s3cret" not in result.stderr
