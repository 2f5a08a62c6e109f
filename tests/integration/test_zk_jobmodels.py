"""Job models on a real ZooKeeper: publish/read, chunks, retention, versions, corrupt data."""

from __future__ import annotations

import json
import threading
import time
import zlib

import pytest
import structlog.testing
from kazoo.client import KazooClient

from metadata.errors import CorruptDataError
from metadata.model import (
    BarrierState,
    ContainerModel,
    FrozenMap,
    JobModel,
    SystemStreamPartition,
    TaskModel,
)
from metadata.serde import dump_job_model
from metadata.zk import REQUEST_LIMIT, LeaderEpoch, NotFound, WriteConflict, ZkMetadataStore
from metadata.zk.chunks import split_blob

pytestmark = pytest.mark.zk


def job_model(version: int, tasks: int, processors: int = 3) -> JobModel:
    containers = {}
    for p in range(processors):
        owned = {}
        for i in range(p, tasks, processors):
            task = TaskModel(
                f"Partition {i}", frozenset({SystemStreamPartition("kafka", "events", i)}), i
            )
            owned[task.name] = task
        pid = f"p-{p}"
        containers[pid] = ContainerModel(pid, f"zone-{p % 2}/node-{p}", FrozenMap(owned))
    return JobModel(version, FrozenMap(containers), FrozenMap({"job.name": "clicks"}))


def publish(store: ZkMetadataStore, epoch: LeaderEpoch, model: JobModel) -> None:
    store.job_models.publish(
        model, epoch=epoch, participants=list(model.containers), grouper="host-affinity"
    )


def node_sizes(client: KazooClient, root: str) -> dict[str, int]:
    sizes = {}
    stack = [root]
    while stack:
        path = stack.pop()
        data, _ = client.get(path)
        sizes[path] = len(data or b"")
        stack += [f"{path}/{child}" for child in client.get_children(path)]
    return sizes


def test_publish_then_read_with_barrier(zk_store: ZkMetadataStore) -> None:
    epoch = zk_store.epochs.acquire()
    model = job_model(1, 12)

    publish(zk_store, epoch, model)

    assert zk_store.job_models.latest_version() == 1
    assert zk_store.job_models.read(1) == model
    assert zk_store.job_models.read_latest() == model
    document = zk_store.job_models.read_document(1)
    assert (document.run_id, document.grouper) == ("run-1", "host-affinity")
    assert zk_store.barriers.state(1) == BarrierState.NEW
    assert zk_store.barriers.expected(1) == {"p-0", "p-1", "p-2"}
    assert zk_store.barriers.participants(1) == set()


def test_no_job_model_yet(zk_store: ZkMetadataStore) -> None:
    assert zk_store.job_models.latest_version() is None
    assert zk_store.job_models.read_latest() is None
    with pytest.raises(NotFound):
        zk_store.job_models.read(1)


def test_versions_strictly_increase(zk_store: ZkMetadataStore) -> None:
    epoch = zk_store.epochs.acquire()
    publish(zk_store, epoch, job_model(2, 6))
    ops = zk_store.ops

    for stale in (2, 1):
        with pytest.raises(WriteConflict, match="not above the latest"):
            publish(zk_store, epoch, job_model(stale, 6, processors=2))

    assert zk_store.ops == ops  # refused before writing anything
    publish(zk_store, epoch, job_model(5, 6))
    assert zk_store.job_models.latest_version() == 5


def test_large_model_is_split_into_chunks_below_the_limit(zk_store: ZkMetadataStore) -> None:
    store = ZkMetadataStore(
        zk_store.client, zk_store.layout.folder, run_id="run-1", chunk_size=4096
    )
    epoch = store.epochs.acquire()
    model = job_model(1, 5000, processors=7)

    publish(store, epoch, model)

    chunks = store.client.get_children(f"{store.layout.folder}/jobModels/1")
    assert len(chunks) > 5
    assert all(name.startswith(f"e{epoch.epoch}-") for name in chunks)
    assert max(node_sizes(store.client, store.layout.folder).values()) <= 4096
    assert store.job_models.read(1) == model


def test_retention_removes_old_versions_and_barriers(zk_store: ZkMetadataStore) -> None:
    store = ZkMetadataStore(zk_store.client, zk_store.layout.folder, run_id="run-1", retention=3)
    epoch = store.epochs.acquire()
    for version in range(1, 7):
        publish(store, epoch, job_model(version, 9))

    folder = store.layout.folder
    assert sorted(store.client.get_children(f"{folder}/jobModels"), key=int) == ["4", "5", "6"]
    assert sorted(store.client.get_children(f"{folder}/barriers")) == [
        "barrier_4",
        "barrier_5",
        "barrier_6",
    ]
    assert store.job_models.read(4) == job_model(4, 9)
    with pytest.raises(NotFound):
        store.job_models.read(3)


def test_remove_below_deletes_older_models_with_their_chunks_and_barriers(
    zk_store: ZkMetadataStore,
) -> None:
    store = ZkMetadataStore(
        zk_store.client, zk_store.layout.folder, run_id="run-1", retention=10, chunk_size=2048
    )
    epoch = store.epochs.acquire()
    for version in range(1, 6):
        publish(store, epoch, job_model(version, 600))
    assert store.job_models.versions() == [1, 2, 3, 4, 5]
    assert store.barriers.versions() == [1, 2, 3, 4, 5]
    folder = store.layout.folder
    expected = sum(
        len(node_sizes(store.client, f"{folder}/{kind}")) for kind in ("jobModels/1", "jobModels/2")
    ) + sum(len(node_sizes(store.client, f"{folder}/barriers/barrier_{v}")) for v in (1, 2))

    deleted = store.job_models.remove_below(3, epoch=epoch)

    assert deleted == expected
    assert store.job_models.versions() == [3, 4, 5]
    assert store.barriers.versions() == [3, 4, 5]
    assert store.job_models.read(3) == job_model(3, 600)
    assert store.job_models.remove_below(3, epoch=epoch) == 0  # nothing left below 3


def test_default_retention_is_ten(zk_store: ZkMetadataStore) -> None:
    epoch = zk_store.epochs.acquire()
    for version in range(1, 13):
        publish(zk_store, epoch, job_model(version, 3))
    kept = zk_store.client.get_children(f"{zk_store.layout.folder}/jobModels")
    assert sorted(int(v) for v in kept) == list(range(3, 13))


def test_watch_version_sees_each_publish(zk_store: ZkMetadataStore) -> None:
    seen: list[int | None] = []
    arrived = threading.Event()

    def on_version(version: int | None) -> None:
        seen.append(version)
        if version == 2:
            arrived.set()

    zk_store.job_models.watch_version(on_version)
    epoch = zk_store.epochs.acquire()
    publish(zk_store, epoch, job_model(1, 3))
    publish(zk_store, epoch, job_model(2, 3))

    assert arrived.wait(10)
    assert seen[0] is None and seen[-1] == 2


# ---------------------------------------------------------------- corrupt data


@pytest.fixture
def published(zk_store: ZkMetadataStore) -> ZkMetadataStore:
    """A store whose version 1 is a multi-chunk model."""
    store = ZkMetadataStore(
        zk_store.client, zk_store.layout.folder, run_id="run-1", chunk_size=2048
    )
    publish(store, store.epochs.acquire(), job_model(1, 2000))
    return store


def chunk_paths(store: ZkMetadataStore) -> list[str]:
    """The paths of version 1's chunks (not its container views)."""
    folder = f"{store.layout.folder}/jobModels/1"
    manifest = json.loads(store.client.get(folder)[0])
    return [f"{folder}/{chunk['name']}" for chunk in manifest["chunks"]]


def test_bad_manifest_json(published: ZkMetadataStore) -> None:
    path = f"{published.layout.folder}/jobModels/1"
    published.client.set(path, b"{not json")
    with pytest.raises(CorruptDataError) as error:
        published.job_models.read_latest()
    assert error.value.path == path
    assert "not valid JSON" in error.value.problem
    assert published.client.get(path)[0] == b"{not json"


def test_bad_checksum(published: ZkMetadataStore) -> None:
    path = chunk_paths(published)[1]
    data = bytearray(published.client.get(path)[0])
    data[10] ^= 0xFF
    published.client.set(path, bytes(data))
    with pytest.raises(CorruptDataError) as error:
        published.job_models.read(1)
    assert error.value.path == path
    assert "checksum mismatch" in error.value.problem
    assert published.client.get(path)[0] == bytes(data)


def test_missing_chunk(published: ZkMetadataStore) -> None:
    path = chunk_paths(published)[-1]
    published.client.delete(path)
    with pytest.raises(CorruptDataError) as error:
        published.job_models.read(1)
    assert error.value.path == path
    assert "missing chunk" in error.value.problem


def test_unknown_manifest_format(published: ZkMetadataStore) -> None:
    path = f"{published.layout.folder}/jobModels/1"
    manifest = json.loads(published.client.get(path)[0])
    manifest["format"] = 99
    published.client.set(path, json.dumps(manifest).encode())
    with pytest.raises(CorruptDataError, match="unknown manifest format 99") as error:
        published.job_models.read(1)
    assert error.value.path == path


def write_payload(store: ZkMetadataStore, payload: bytes) -> str:
    """Store ``payload`` as version 1 with a valid manifest and valid checksums."""
    folder = f"{store.layout.folder}/jobModels/1"
    for name in store.client.get_children(folder):  # its chunks and container views
        store.client.delete(f"{folder}/{name}")
    manifest, chunks = split_blob(payload, version=1, epoch=1, chunk_size=2048)
    for name, data in chunks:
        store.client.create(f"{folder}/{name}", data)
    store.client.set(folder, manifest.to_bytes())
    return folder


def test_unknown_job_model_format(published: ZkMetadataStore) -> None:
    document = json.loads(dump_job_model(job_model(1, 3)))
    document["format"] = 3
    path = write_payload(published, json.dumps(document).encode())
    with pytest.raises(CorruptDataError, match="unsupported format 3") as error:
        published.job_models.read(1)
    assert error.value.path == path


def test_the_store_writes_format_2_and_still_reads_format_1(published: ZkMetadataStore) -> None:
    manifest = published.job_models.read_manifest(1)
    folder = f"{published.layout.folder}/jobModels/1"
    chunks = {ref.name: published.client.get(f"{folder}/{ref.name}")[0] for ref in manifest.chunks}
    stored = json.loads(zlib.decompress(b"".join(chunks[ref.name] for ref in manifest.chunks)))
    assert stored["format"] == 2
    model = job_model(1, 2000)
    write_payload(published, dump_job_model(model))  # as a leader of an earlier release wrote it
    assert published.job_models.read(1) == model
    assert published.job_models.read_container(1, "p-1") == model.containers["p-1"]


def test_job_model_that_is_not_json(published: ZkMetadataStore) -> None:
    path = write_payload(published, b"\x00 this is not JSON")
    with pytest.raises(CorruptDataError, match="not valid JSON") as error:
        published.job_models.read(1)
    assert error.value.path == path


def test_manifest_of_another_version(published: ZkMetadataStore) -> None:
    path = write_payload(published, dump_job_model(job_model(7, 3)))
    with pytest.raises(CorruptDataError, match="holds job model version 7"):
        published.job_models.read(1)
    assert published.client.exists(path)


def test_garbage_version_pointer(published: ZkMetadataStore) -> None:
    path = f"{published.layout.folder}/jobModelVersion"
    published.client.set(path, b"seven")
    with pytest.raises(CorruptDataError) as error:
        published.job_models.latest_version()
    assert error.value.path == path


def test_uncommitted_version_is_not_found(published: ZkMetadataStore) -> None:
    # What a leader that died between writing chunks and committing leaves behind.
    folder = f"{published.layout.folder}/jobModels/2"
    published.client.create(folder, b"")
    published.client.create(f"{folder}/e1-00000", zlib.compress(b"{}"))
    with pytest.raises(NotFound, match="not committed"):
        published.job_models.read(2)
    assert published.job_models.latest_version() == 1
    # The next publish of version 2 replaces the abandoned attempt.
    publish(published, published.epochs.acquire(), job_model(2, 30))
    assert published.job_models.read(2) == job_model(2, 30)


@pytest.mark.slow
def test_one_million_tasks_round_trip_below_the_node_limit(zk_store: ZkMetadataStore) -> None:
    model = job_model(1, 1_000_000, processors=100)
    epoch = zk_store.epochs.acquire()

    started = time.monotonic()
    publish(zk_store, epoch, model)
    published_s = time.monotonic() - started
    read_back = zk_store.job_models.read(1)
    total_s = time.monotonic() - started

    assert read_back == model
    sizes = node_sizes(zk_store.client, f"{zk_store.layout.folder}/jobModels")
    assert max(sizes.values()) < REQUEST_LIMIT
    assert len(sizes) > 10  # the manifest, the version folder and its chunks
    print(f"1M tasks: publish {published_s:.1f}s, publish+read {total_s:.1f}s, {len(sizes)} nodes")


# ---------------------------------------------------------------- container views


def manifest_of(store: ZkMetadataStore, version: int) -> dict[str, object]:
    data, _ = store.client.get(f"{store.layout.folder}/jobModels/{version}")
    document = json.loads(data)
    assert isinstance(document, dict)
    return document


def test_each_processor_reads_its_container_from_one_small_view(zk_store: ZkMetadataStore) -> None:
    store = ZkMetadataStore(zk_store.client, zk_store.layout.folder, run_id="run-1")
    model = job_model(1, 10_000, processors=100)
    publish(store, store.epochs.acquire(), model)
    manifest = manifest_of(store, 1)
    views = manifest["views"]
    assert isinstance(views, list) and 10 < len(views) <= 100

    reader = ZkMetadataStore(zk_store.client, zk_store.layout.folder, run_id="run-1")
    for pid, container in model.containers.items():
        before = reader.reads
        assert reader.job_models.read_container(1, pid) == container
        assert reader.reads - before == 2  # the manifest and one view
    assert reader.job_models.read_container(1, "p-unknown") is None
    # A view is a small part of the whole model.
    whole = manifest["size"]
    assert isinstance(whole, int)
    assert max(view["size"] for view in views) < whole / 5
    assert store.job_models.read(1) == model  # the whole model is still there, unchanged


def test_a_model_published_without_views_is_read_whole(zk_store: ZkMetadataStore) -> None:
    epoch = zk_store.epochs.acquire()
    model = job_model(1, 300, processors=5)
    publish(zk_store, epoch, model)
    path = f"{zk_store.layout.folder}/jobModels/1"
    document = manifest_of(zk_store, 1)
    del document["views"]  # as an older coordinator wrote it
    zk_store.client.set(path, json.dumps(document, separators=(",", ":")).encode())

    for pid, container in model.containers.items():
        assert zk_store.job_models.read_container(1, pid) == container
    assert zk_store.job_models.read_container(1, "p-unknown") is None


@pytest.mark.parametrize("damage", ["garbage", "deleted"])
def test_a_corrupt_view_is_named_and_its_readers_fall_back_to_the_whole_model(
    zk_store: ZkMetadataStore, damage: str
) -> None:
    model = job_model(1, 300, processors=5)
    publish(zk_store, zk_store.epochs.acquire(), model)
    views = manifest_of(zk_store, 1)["views"]
    assert isinstance(views, list)
    view_path = f"{zk_store.layout.folder}/jobModels/1/{views[0]['name']}"
    if damage == "garbage":
        zk_store.client.set(view_path, b"not zlib at all")
    else:
        zk_store.client.delete(view_path)

    with structlog.testing.capture_logs() as logs:
        for pid, container in model.containers.items():
            assert zk_store.job_models.read_container(1, pid) == container
    reported = [e for e in logs if e["event"] == "zk.container_view_corrupt"]
    assert reported and {e["node"] for e in reported} == {view_path}
    assert all(e["version"] == 1 and e["fallback"] == "the whole model" for e in reported)
    assert zk_store.job_models.read(1) == model


def test_a_corrupt_view_of_a_corrupt_model_is_an_error_naming_a_node(
    zk_store: ZkMetadataStore,
) -> None:
    model = job_model(1, 300, processors=5)
    publish(zk_store, zk_store.epochs.acquire(), model)
    folder = f"{zk_store.layout.folder}/jobModels/1"
    for name in zk_store.client.get_children(folder):
        zk_store.client.set(f"{folder}/{name}", b"garbage")
    with pytest.raises(CorruptDataError) as error:
        zk_store.job_models.read_container(1, "p-0")
    assert error.value.path.startswith(folder)
