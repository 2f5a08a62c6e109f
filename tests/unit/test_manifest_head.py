"""A manifest's head: what a processor decides on, decoded without the chunk and view lists."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metadata.errors import CorruptDataError
from metadata.zk.chunks import ChunkRef, Manifest, split_blob
from metadata.zk.recipe.manifests import ManifestHead

PATH = "/job/jobModels/3"
pids = st.lists(st.text(min_size=1, max_size=8), max_size=5, unique=True).map(sorted).map(tuple)


def manifest(**fields: object) -> Manifest:
    whole, _ = split_blob(b"x" * 5000, version=3, epoch=2, chunk_size=1000)
    views = tuple(ChunkRef(f"e2-{i:05d}", 10, i) for i in range(10, 60))
    return replace(whole, views=views, **fields)  # type: ignore[arg-type]


@given(base=st.none() | st.integers(0, 2), losing=pids, gaining=st.none() | pids)
def test_the_head_says_what_the_whole_manifest_says(
    base: int | None, losing: tuple[str, ...], gaining: tuple[str, ...] | None
) -> None:
    whole = manifest(base=base, losing=losing, gaining=gaining)
    head = ManifestHead.from_bytes(whole.to_bytes(), PATH, 3)
    decoded = Manifest.from_bytes(whole.to_bytes(), PATH)
    said = (decoded.version, decoded.base, decoded.losing, decoded.gaining)
    assert (head.version, head.base, head.losing, head.gaining) == said
    assert head.manifest() == decoded


def bad(document: dict[str, object]) -> bytes:
    return json.dumps(document).encode()


GOOD = json.loads(manifest(base=2, losing=("p-1",), gaining=("p-2",)).to_bytes())


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "not a JSON object"),
        (bad({**GOOD, "format": 9}), "unknown manifest format 9"),
        (bad({**GOOD, "version": 4}), "describes version 4"),
        (bad({**GOOD, "version": "3"}), "version should be int"),
        (bad({**GOOD, "base": True}), "base should be int"),
        (bad({**GOOD, "losing": "p-1"}), "losing should list processor ids"),
        (bad({**GOOD, "gaining": [1]}), "gaining should list processor ids"),
    ],
)
def test_a_bad_head_is_corrupt_naming_the_path(data: bytes, problem: str) -> None:
    with pytest.raises(CorruptDataError, match=problem) as caught:
        ManifestHead.from_bytes(data, PATH, 3)
    assert PATH in str(caught.value)


def test_the_rest_is_checked_when_the_whole_manifest_is_asked_for() -> None:
    data = bad({**GOOD, "views": [{"name": "not a chunk", "size": 1, "crc32": 2}]})
    head = ManifestHead.from_bytes(data, PATH, 3)  # a survivor reads no view: fine
    assert head.losing == ("p-1",)
    with pytest.raises(CorruptDataError, match="not a chunk name"):
        head.manifest()
