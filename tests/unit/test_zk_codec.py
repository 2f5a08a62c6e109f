"""Pure parts of the ZooKeeper store: chunked blobs, node names, the multiRead framing."""

from __future__ import annotations

import json
import os
import struct
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.exceptions import NoAuthError, NoNodeError

from metadata.errors import CorruptDataError
from metadata.zk.chunks import (
    Manifest,
    chunk_epoch,
    compress_view,
    decompress_view,
    join_blob,
    split_blob,
    view_index,
)
from metadata.zk.layout import (
    JobLayout,
    decode_name,
    encode_name,
    parse_int_name,
    processor_sequence,
)
from metadata.zk.multiread import MultiRead

PATH = "/affinity/job-1/jobModels/3"


def split(raw: bytes, chunk_size: int = 100) -> tuple[Manifest, dict[str, bytes | None]]:
    manifest, chunks = split_blob(raw, version=3, epoch=2, chunk_size=chunk_size)
    return manifest, dict(chunks)


@given(st.binary(max_size=5000), st.integers(min_value=1, max_value=700))
def test_split_and_join_round_trip(raw: bytes, chunk_size: int) -> None:
    manifest, chunks = split(raw, chunk_size)
    assert all(len(data or b"") <= chunk_size for data in chunks.values())
    assert Manifest.from_bytes(manifest.to_bytes(), PATH) == manifest
    assert join_blob(manifest, chunks, path=PATH) == raw


def test_chunk_names_carry_the_epoch() -> None:
    _, chunks = split(os.urandom(1000))
    assert list(chunks) == [f"e2-{i:05d}" for i in range(len(chunks))]
    assert {chunk_epoch(name) for name in chunks} == {2}
    assert chunk_epoch("../evil") is None


def test_missing_chunk_names_its_path() -> None:
    manifest, chunks = split(os.urandom(1000))
    chunks["e2-00003"] = None
    with pytest.raises(CorruptDataError) as error:
        join_blob(manifest, chunks, path=PATH)
    assert error.value.path == f"{PATH}/e2-00003"
    assert "missing chunk 4 of" in error.value.problem


def test_flipped_byte_is_a_checksum_mismatch() -> None:
    manifest, chunks = split(os.urandom(1000))
    data = bytearray(chunks["e2-00001"] or b"")
    data[0] ^= 1
    chunks["e2-00001"] = bytes(data)
    with pytest.raises(CorruptDataError, match="checksum mismatch") as error:
        join_blob(manifest, chunks, path=PATH)
    assert error.value.path == f"{PATH}/e2-00001"


def test_swapped_chunks_are_detected() -> None:
    manifest, chunks = split(os.urandom(1000), chunk_size=100)
    first, second = chunks["e2-00000"], chunks["e2-00001"]
    chunks["e2-00000"], chunks["e2-00001"] = second, first
    with pytest.raises(CorruptDataError):
        join_blob(manifest, chunks, path=PATH)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"{oops", "not valid JSON"),
        (b"[]", "not a JSON object"),
        (b'{"format": 2}', "unknown manifest format 2"),
        (b'{"format": 1, "encoding": "lz4"}', "unknown encoding"),
        (b'{"format": 1, "encoding": "zlib", "chunks": "x"}', "chunks should be list"),
        (
            b'{"format": 1, "encoding": "zlib", "chunks": [{"name": "../x", "size": 1}]}',
            "is not a chunk name",
        ),
    ],
)
def test_bad_manifests(data: bytes, problem: str) -> None:
    with pytest.raises(CorruptDataError) as error:
        Manifest.from_bytes(data, PATH)
    assert error.value.path == PATH
    assert problem in error.value.problem


@given(st.lists(st.binary(max_size=300), max_size=5))
def test_manifest_with_views_round_trips(views: list[bytes]) -> None:
    manifest, _ = split(b"payload")
    refs = [compress_view(raw, epoch=2, index=10 + i) for i, raw in enumerate(views)]
    with_views = replace(manifest, views=tuple(ref for ref, _ in refs))
    decoded = Manifest.from_bytes(with_views.to_bytes(), PATH)
    assert decoded == with_views
    assert ("views" in json.loads(with_views.to_bytes())) == bool(views)
    for (ref, data), raw in zip(refs, views, strict=True):
        assert decompress_view(ref, data, path=f"{PATH}/{ref.name}") == raw


def test_bad_views_are_named() -> None:
    manifest, _ = split(b"payload")
    document = json.loads(manifest.to_bytes())
    document["views"] = [{"name": "x", "size": 1, "crc32": 1}]
    with pytest.raises(CorruptDataError, match=r"views\[0\]\.name"):
        Manifest.from_bytes(json.dumps(document).encode(), PATH)
    ref, data = compress_view(b"{}", epoch=2, index=4)
    with pytest.raises(CorruptDataError, match="missing container view"):
        decompress_view(ref, None, path=PATH)
    with pytest.raises(CorruptDataError, match="checksum mismatch in container view"):
        decompress_view(ref, data[:-1] + b"x", path=PATH)


@given(st.text(min_size=1), st.integers(min_value=1, max_value=1000))
def test_view_index_is_stable_and_in_range(processor_id: str, views: int) -> None:
    index = view_index(processor_id, views)
    assert 0 <= index < views
    assert index == view_index(processor_id, views)
    assert view_index("p-1", 7) == 3  # CRC-32, the same in every process and version


def test_manifest_claiming_another_size_is_corrupt() -> None:
    manifest, chunks = split(b"x" * 1000)
    document = json.loads(manifest.to_bytes())
    document["raw_size"] = 10
    lying = Manifest.from_bytes(json.dumps(document).encode(), PATH)
    with pytest.raises(CorruptDataError, match="raw_size"):
        join_blob(lying, chunks, path=PATH)


@given(st.text(min_size=1))
def test_node_names_round_trip(name: str) -> None:
    encoded = encode_name(name)
    assert "/" not in encoded and encoded not in (".", "..")
    assert encoded.isascii()
    assert decode_name(encoded, "/x") == name


@pytest.mark.parametrize("node_name", ["not encoded", "%zz", "a%2fb", "%FF", "%2e"])
def test_names_the_encoder_would_not_produce_are_corrupt(node_name: str) -> None:
    with pytest.raises(CorruptDataError) as error:
        decode_name(node_name, f"/x/{node_name}")
    assert error.value.path == f"/x/{node_name}"


def test_int_names_and_sequences() -> None:
    assert [parse_int_name(n) for n in ("0", "12", "012", "-1", "x", "")] == [
        0,
        12,
        None,
        None,
        None,
        None,
    ]
    assert processor_sequence("processor-0000000042") == 42
    assert processor_sequence("processor-42") is None
    assert processor_sequence("other-0000000042") is None


def test_layout_paths() -> None:
    layout = JobLayout("/affinity/clicks-1")
    assert layout.locality_entry("Partition 3") == "/affinity/clicks-1/localityData/Partition%203"
    assert layout.barrier_participant(4, "p/1") == (
        "/affinity/clicks-1/barriers/barrier_4/participants/p%2F1"
    )
    assert layout.job_model(7) == "/affinity/clicks-1/jobModels/7"
    with pytest.raises(ValueError):
        JobLayout("relative/path")
    with pytest.raises(ValueError):
        JobLayout("/trailing/")
    with pytest.raises(ValueError, match="reserved tree"):  # ZooKeeper's own (issue 28)
        JobLayout("/zookeeper/clicks-1")
    with pytest.raises(ValueError, match="segments"):
        JobLayout("/affinity//clicks-1")


def test_multiread_framing() -> None:
    request = MultiRead(["/a", "/b"]).serialize()
    # Two (getData header, path, watch flag) records and the closing header.
    assert request.startswith(struct.pack("!iBi", 4, 0, -1) + struct.pack("!i", 2) + b"/a\x00")
    assert request.endswith(struct.pack("!iBi", -1, 1, -1))

    stat = struct.pack("!qqqqiiiqiiq", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
    response = (
        struct.pack("!iBi", 4, 0, 0)
        + struct.pack("!i", 3)
        + b"loc"
        + stat
        + struct.pack("!iBi", -1, 0, -101)
        + struct.pack("!i", -101)
        + struct.pack("!iBi", -1, 0, -102)
        + struct.pack("!i", -102)
        + struct.pack("!iBi", -1, 1, -1)
    )
    found, missing, denied = MultiRead.deserialize(response, 0)
    assert found[0] == b"loc" and found[1].version == 5
    assert isinstance(missing, NoNodeError)
    assert isinstance(denied, NoAuthError)


def test_manifest_base_and_losing_round_trip() -> None:
    manifest, _ = split(b"payload")
    planned = replace(manifest, base=2, losing=("p-2",))
    decoded = Manifest.from_bytes(planned.to_bytes(), PATH)
    assert decoded == planned
    assert manifest.base is None and manifest.losing == ()  # no plan in the manifest
    document = json.loads(planned.to_bytes())
    document["losing"] = [1]
    with pytest.raises(CorruptDataError, match="losing"):
        Manifest.from_bytes(json.dumps(document).encode(), PATH)


def test_manifest_gaining_round_trips_and_is_none_when_not_said() -> None:
    manifest, _ = split(b"payload")
    said = replace(manifest, base=2, losing=("p-2",), gaining=("p-3",))
    assert Manifest.from_bytes(said.to_bytes(), PATH) == said
    silent = replace(manifest, base=2, losing=("p-2",))  # an older leader's manifest
    assert "gaining" not in json.loads(silent.to_bytes())
    assert Manifest.from_bytes(silent.to_bytes(), PATH).gaining is None
    document = json.loads(said.to_bytes())
    document["gaining"] = "p-3"
    with pytest.raises(CorruptDataError, match="gaining"):
        Manifest.from_bytes(json.dumps(document).encode(), PATH)
