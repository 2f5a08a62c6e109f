"""Container views spanning several chunk nodes, on a real ZooKeeper (issue 16).

A container bigger than one node (here: the node-size limit lowered to 2 KB, the stores's
``chunk_size``) is stored as a view cut into chunks; its processor reads the manifest and those
chunks only, never the whole model, and gets the same container as in the whole model. A missing
or corrupt view chunk is named and the reader falls back to the whole model (the last good job
model stays in force when that is bad too); a manifest written by an older release (one-node
views, or none) still reads.
"""

from __future__ import annotations

import json

import pytest
import structlog.testing

from metadata.errors import CorruptDataError
from metadata.model import ContainerModel, FrozenMap, JobModel, SystemStreamPartition, TaskModel
from metadata.zk import ZkMetadataStore

pytestmark = pytest.mark.zk

CHUNK = 2048
PROCESSORS = ("p-1", "p-2", "p-3")


def job_model(version: int, tasks: int) -> JobModel:
    containers = {}
    for p, pid in enumerate(PROCESSORS):
        owned = {
            f"Partition {i}": TaskModel(
                f"Partition {i}", frozenset({SystemStreamPartition("kafka", "events", i)}), i
            )
            for i in range(p, tasks, len(PROCESSORS))
        }
        containers[pid] = ContainerModel(pid, f"zone-{p}/node-{p}", FrozenMap(owned))
    return JobModel(version, FrozenMap(containers))


@pytest.fixture
def small_nodes(zk_store: ZkMetadataStore) -> ZkMetadataStore:
    """A store (the leader's) whose nodes hold at most 2 KB, with version 1 of 6,000 tasks."""
    store = ZkMetadataStore(
        zk_store.client, zk_store.layout.folder, run_id="run-1", chunk_size=CHUNK
    )
    model = job_model(1, 6000)
    store.job_models.publish(model, epoch=store.epochs.acquire(), participants=PROCESSORS)
    return store


def reader(store: ZkMetadataStore) -> ZkMetadataStore:
    return ZkMetadataStore(store.client, store.layout.folder, run_id="run-1")


def test_a_container_bigger_than_a_node_is_read_from_its_own_chunks_only(
    small_nodes: ZkMetadataStore,
) -> None:
    manifest = small_nodes.job_models.read_manifest(1)
    assert not manifest.views and len(manifest.view_spans) >= len(PROCESSORS)
    whole = small_nodes.job_models.read(1)
    folder = small_nodes.layout.job_model(1)
    for name in small_nodes.client.get_children(folder):
        assert len(small_nodes.client.get(f"{folder}/{name}")[0]) <= CHUNK
    model_chunks = {ref.name for ref in manifest.chunks}
    spans = {pid: manifest.view_of(pid) for pid in PROCESSORS}
    assert len({refs for refs in spans.values()}) == len(PROCESSORS)  # one view each

    for pid in PROCESSORS:
        refs = spans[pid]
        assert len(refs) > 1 and not {ref.name for ref in refs} & model_chunks
        store = reader(small_nodes)
        before = store.reads
        assert store.job_models.read_container(1, pid) == whole.containers[pid]
        # the manifest and the view's chunks; the whole model has three times as many
        assert store.reads - before == 1 + len(refs)
        assert 2 * len(refs) < len(model_chunks)
    assert reader(small_nodes).job_models.read_container(1, "p-unknown") is None


@pytest.mark.parametrize("damage", ["garbage", "deleted"])
def test_a_bad_view_chunk_is_named_and_its_reader_falls_back_to_the_whole_model(
    small_nodes: ZkMetadataStore, damage: str
) -> None:
    refs = small_nodes.job_models.read_manifest(1).view_of("p-2")
    bad = f"{small_nodes.layout.job_model(1)}/{refs[1].name}"
    if damage == "garbage":
        small_nodes.client.set(bad, b"not zlib at all")
    else:
        small_nodes.client.delete(bad)
    whole = small_nodes.job_models.read(1)

    with structlog.testing.capture_logs() as logs:
        for pid in PROCESSORS:
            assert reader(small_nodes).job_models.read_container(1, pid) == whole.containers[pid]
    reported = [e for e in logs if e["event"] == "zk.container_view_corrupt"]
    assert [(e["node"], e["processor_id"]) for e in reported] == [(bad, "p-2")]
    problem = "missing" if damage == "deleted" else "checksum mismatch in"
    assert reported[0]["problem"].startswith(f"{problem} container view chunk 2 of {len(refs)}")


def test_a_bad_view_of_a_bad_model_is_an_error_naming_a_node(small_nodes: ZkMetadataStore) -> None:
    manifest = small_nodes.job_models.read_manifest(1)
    folder = small_nodes.layout.job_model(1)
    last_view_chunk = manifest.view_of("p-1")[-1].name
    small_nodes.client.delete(f"{folder}/{last_view_chunk}")
    small_nodes.client.delete(f"{folder}/{manifest.chunks[0].name}")
    with pytest.raises(CorruptDataError) as error:
        reader(small_nodes).job_models.read_container(1, "p-1")
    assert error.value.path == f"{folder}/{manifest.chunks[0].name}"
    assert "missing chunk 1 of" in error.value.problem


def test_a_model_an_older_release_wrote_without_views_is_read_whole(
    small_nodes: ZkMetadataStore,
) -> None:
    """An older writer left out views too big for a node (and an older reader, not knowing
    ``view_spans``, reads the whole model the same way)."""
    path = small_nodes.layout.job_model(1)
    document = json.loads(small_nodes.client.get(path)[0])
    del document["view_spans"]
    small_nodes.client.set(path, json.dumps(document, separators=(",", ":")).encode())
    whole = small_nodes.job_models.read(1)
    store = reader(small_nodes)
    for pid in PROCESSORS:
        before = store.reads
        assert store.job_models.read_container(1, pid) == whole.containers[pid]
        assert store.reads - before == 2 + len(document["chunks"])  # the manifest twice


def test_small_models_keep_one_node_views(zk_store: ZkMetadataStore) -> None:
    """What every release reads: a model whose views fit a node lists them in ``views``."""
    model = job_model(1, 60)
    zk_store.job_models.publish(model, epoch=zk_store.epochs.acquire(), participants=PROCESSORS)
    manifest = zk_store.job_models.read_manifest(1)
    assert manifest.views and not manifest.view_spans
    raw = json.loads(zk_store.client.get(zk_store.layout.job_model(1))[0])
    assert "view_spans" not in raw
    for pid in PROCESSORS:
        before = zk_store.reads
        assert zk_store.job_models.read_container(1, pid) == model.containers[pid]
        assert zk_store.reads - before == 2
