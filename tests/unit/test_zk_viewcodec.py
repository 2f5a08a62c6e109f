"""metadata.zk.viewcodec: container views that span several chunks when a container is big."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_serde import job_models

from metadata.columns import ModelColumns
from metadata.errors import CorruptDataError
from metadata.model import ContainerModel, FrozenMap, JobModel, SystemStreamPartition, TaskModel
from metadata.zk.chunks import ChunkRef, Manifest, chunk_name, split_blob, view_index
from metadata.zk.viewcodec import (
    ViewPart,
    container_views,
    cut_view,
    decode_view,
    join_view,
    view_count,
    with_views,
)

PATH = "/affinity/job-1/jobModels/7"


def parts_of(chunks: list[tuple[ChunkRef, bytes]]) -> list[ViewPart]:
    return [(ref, data, f"{PATH}/{ref.name}") for ref, data in chunks]


@settings(max_examples=200)
@given(st.binary(max_size=5000), st.integers(1, 700), st.integers(0, 50))
def test_a_view_cut_into_chunks_joins_back(raw: bytes, chunk_size: int, first: int) -> None:
    chunks = cut_view(raw, epoch=3, first_index=first, chunk_size=chunk_size)
    assert chunks and all(len(data) <= chunk_size for _, data in chunks)
    assert [ref.name for ref, _ in chunks] == [chunk_name(3, first + i) for i in range(len(chunks))]
    assert join_view(parts_of(chunks)) == raw


@settings(max_examples=100)
@given(job_models(max_containers=5), st.integers(40, 4000), st.integers(0, 20_000))
def test_every_processor_finds_its_container_in_its_view(
    model: JobModel, chunk_size: int, size: int
) -> None:
    columns = ModelColumns(model, run_id="r1")
    views = container_views(columns, epoch=2, first_index=9, size=size, chunk_size=chunk_size)
    manifest, _ = split_blob(b"{}", version=model.version, epoch=2, chunk_size=chunk_size)
    manifest = with_views(manifest, views)
    decoded = Manifest.from_bytes(manifest.to_bytes(), PATH)
    assert decoded == manifest
    if not model.containers:
        assert not views and not decoded.view_of("p-1")
        return
    data = {ref.name: chunk for chunks in views for ref, chunk in chunks}
    names = [ref.name for chunks in views for ref, _ in chunks]
    assert len(set(names)) == len(names)  # every chunk a node of its own
    for pid, container in model.containers.items():
        refs = decoded.view_of(pid)
        parts = [(ref, data[ref.name], f"{PATH}/{ref.name}") for ref in refs]
        assert decode_view(parts, pid, version=model.version) == container
    one_node = all(len(chunks) == 1 for chunks in views)
    assert bool(decoded.views) == one_node and bool(decoded.view_spans) != one_node


def big_model(processors: int, tasks: int) -> JobModel:
    containers = {}
    for p in range(processors):
        pid = f"p-{p + 1}"
        mine = {
            f"Partition {i}": TaskModel(
                f"Partition {i}", frozenset({SystemStreamPartition("kafka", "events", i)}), i
            )
            for i in range(p, tasks, processors)
        }
        containers[pid] = ContainerModel(pid, f"zone-{p}", FrozenMap(mine))
    return JobModel(7, FrozenMap(containers))


def test_a_container_bigger_than_a_node_spans_chunks_holding_it_alone() -> None:
    model = big_model(3, 6000)
    columns = ModelColumns(model)
    views = container_views(columns, epoch=1, first_index=0, size=60_000, chunk_size=2048)
    manifest = with_views(split_blob(b"{}", version=7, epoch=1, chunk_size=2048)[0], views)
    assert not manifest.views and manifest.view_spans
    # "p-1" and "p-2" share a view out of 3 (CRC-32); the writer picks a count that parts them.
    assert view_index("p-1", 3) == view_index("p-2", 3)
    assert len({view_index(pid, len(views)) for pid in model.containers}) == 3
    data = {ref.name: chunk for chunks in views for ref, chunk in chunks}
    for pid in model.containers:
        refs = manifest.view_of(pid)
        assert len(refs) > 2
        raw = zlib.decompress(b"".join(data[ref.name] for ref in refs))
        assert raw.count(b'"processor_id"') == 1  # its own container only


def test_view_count_keeps_many_small_containers_on_few_views() -> None:
    pids = [f"p-{i}" for i in range(1000)]
    assert view_count(pids, 20_000, 900_000) == 10
    three = ["p-1", "p-2", "p-3"]
    assert view_count(three, 500, 900_000) == 1  # a small model: one view
    assert view_count(three, 10_000_000, 900_000) == 5  # one each, fewest views that part them


@pytest.mark.parametrize("damage", ["missing", "flipped", "another chunk's data"])
def test_a_bad_view_chunk_is_named(damage: str) -> None:
    raw = bytes(range(256)) * 40 + b"tail"
    chunks = cut_view(raw, epoch=1, first_index=4, chunk_size=1000, level=0)
    assert len(chunks) > 3
    parts = parts_of(chunks)
    ref, data, path = parts[2]
    assert data is not None
    if damage == "missing":
        parts[2] = (ref, None, path)
        problem = "missing container view chunk 3 of"
    elif damage == "flipped":
        parts[2] = (ref, data[:-1] + bytes([data[-1] ^ 1]), path)
        problem = "checksum mismatch in container view chunk 3 of"
    else:
        parts[2] = (ref, parts[3][1], path)
        problem = "checksum mismatch in container view chunk 3 of"
    with pytest.raises(CorruptDataError, match=problem) as error:
        join_view(parts)
    assert error.value.path == path


def test_a_view_whose_chunks_pass_their_checks_but_are_cut_short_is_an_error() -> None:
    chunks = cut_view(b"x" * 5000, epoch=1, first_index=0, chunk_size=4)
    parts = parts_of(chunks[:-1])
    with pytest.raises(CorruptDataError, match="truncated") as error:
        join_view(parts)
    assert error.value.path == parts[0][2]


def test_a_view_of_another_version_is_an_error() -> None:
    model = big_model(2, 20)
    views = container_views(ModelColumns(model), epoch=1, first_index=0, size=100, chunk_size=64)
    parts = parts_of(views[0])
    with pytest.raises(CorruptDataError, match="holds job model version 7"):
        decode_view(parts, "p-1", version=8)


def test_bad_view_spans_in_a_manifest_are_named() -> None:
    manifest, _ = split_blob(b"{}", version=7, epoch=1, chunk_size=100)
    document = manifest.to_bytes().decode()[:-1] + ',"view_spans":[[]]}'
    with pytest.raises(CorruptDataError, match=r"view_spans\[0\] should be a non-empty list"):
        Manifest.from_bytes(document.encode(), PATH)
    document = manifest.to_bytes().decode()[:-1] + ',"view_spans":[[{"name":"x"}]]}'
    with pytest.raises(CorruptDataError, match=r"view_spans\[0\]\[0\]\.name"):
        Manifest.from_bytes(document.encode(), PATH)
