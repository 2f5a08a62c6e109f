"""Compressed, chunked, checksummed blobs: how a job model of any size fits in ZooKeeper nodes.

Pure logic, no I/O. :func:`split_blob` compresses a payload (zlib) and cuts it into chunks of at
most ``chunk_size`` bytes; the :class:`Manifest` lists every chunk with its size and CRC-32 and the
SHA-256 of the whole compressed payload. :func:`join_blob` checks all of it and raises
:class:`~metadata.errors.CorruptDataError` naming the chunk (or manifest) path and the problem.

Manifest (the data of ``jobModels/<version>``), format 1::

    {"format": 1, "version": 7, "epoch": 3, "encoding": "zlib",
     "raw_size": 162562815, "size": 11668510, "sha256": "<hex>",
     "chunks": [{"name": "e3-00000", "size": 900000, "crc32": 123}, ...],
     "views": [{"name": "e3-00013", "size": 30211, "crc32": 456}, ...],
     "base": 6, "losing": ["p-4"], "gaining": ["p-2"]}

``views`` (optional; absent = none) are *container views*: the containers of the model spread over
``len(views)`` small nodes by :func:`view_index` of the processor id, each node a compressed job
model holding only its containers (:mod:`metadata.zk.viewcodec`). A processor reads the one view
node that holds its own container instead of the whole model (see
:mod:`metadata.zk.recipe.views`). Readers that do not know views ignore the field.
``view_spans`` (optional, instead of ``views``) is the same when a view does not fit in one node:
view i is the compressed stream cut into the chunks ``view_spans[i]`` (in order), e.g.
``"view_spans": [[{"name": "e3-00016", ...}, {"name": "e3-00017", ...}], [...]]``. A reader
that knows neither field reads the whole model.

``base`` and ``losing`` (optional, together): the version the model was planned against (the one in
force) and the processors that lose a task against it (or are not in the model). A processor
that runs ``base`` and is not in ``losing`` has nothing to stop, so it may join the barrier before
reading its own container (the early-join rule, ``coordinator.protocol.rules.keeps_everything``).
``gaining`` (optional, with ``base``): the processors given a task against ``base``; a processor
that runs ``base`` and is in neither list has the same container, so it reads none
(``coordinator.protocol.rules.container_unchanged``). Absent: not said (everyone reads).

Chunk names carry the writer's leader epoch, so two leaders (one of them deposed) never write the
same chunk node.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from metadata.errors import CorruptDataError, JobModelFormatError
from metadata.serde import JobModelDocument, load_job_model_document

__all__ = [
    "MANIFEST_FORMAT",
    "ChunkRef",
    "Manifest",
    "check_chunk",
    "chunk_epoch",
    "compress_view",
    "decode_document",
    "decompress_view",
    "join_blob",
    "split_blob",
    "view_index",
]

MANIFEST_FORMAT = 1
ENCODING = "zlib"
_CHUNK_NAME = re.compile(r"^e(\d+)-(\d{5,})$")


def chunk_name(epoch: int, index: int) -> str:
    return f"e{epoch}-{index:05d}"


def view_index(processor_id: str, views: int) -> int:
    """Which of ``views`` container views holds ``processor_id``'s container (stable: CRC-32)."""
    if views < 1:
        raise ValueError(f"views must be >= 1, got {views}")
    return zlib.crc32(processor_id.encode("utf-8")) % views


def chunk_epoch(name: str) -> int | None:
    """The epoch in a chunk name (``e3-00001`` -> 3), or None if ``name`` is not a chunk name."""
    match = _CHUNK_NAME.match(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """One chunk as the manifest lists it."""

    name: str
    size: int
    crc32: int


@dataclass(frozen=True, slots=True)
class Manifest:
    """What a committed job-model version consists of (see the module docstring)."""

    version: int
    epoch: int
    raw_size: int
    size: int
    sha256: str
    chunks: tuple[ChunkRef, ...]
    encoding: str = ENCODING
    format: int = MANIFEST_FORMAT
    views: tuple[ChunkRef, ...] = ()
    view_spans: tuple[tuple[ChunkRef, ...], ...] = ()
    base: int | None = None
    losing: tuple[str, ...] = ()
    gaining: tuple[str, ...] | None = None  # None: not said

    def to_bytes(self) -> bytes:
        document = {
            "format": self.format,
            "version": self.version,
            "epoch": self.epoch,
            "encoding": self.encoding,
            "raw_size": self.raw_size,
            "size": self.size,
            "sha256": self.sha256,
            "chunks": _ref_list(self.chunks),
        }
        if self.views:
            document["views"] = _ref_list(self.views)
        if self.view_spans:
            document["view_spans"] = [_ref_list(span) for span in self.view_spans]
        if self.base is not None:
            document["base"] = self.base
            document["losing"] = list(self.losing)
            if self.gaining is not None:
                document["gaining"] = list(self.gaining)
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, path: str) -> Manifest:
        """Decode a manifest; anything unusable raises CorruptDataError naming ``path``."""
        try:
            document = orjson.loads(data)  # (every processor reads one per rebalance)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptDataError(path, f"manifest is not valid JSON: {exc}") from None
        if not isinstance(document, dict):
            raise CorruptDataError(path, "manifest is not a JSON object")
        fmt = _field(document, "format", int, path)
        if fmt != MANIFEST_FORMAT:
            raise CorruptDataError(
                path, f"unknown manifest format {fmt} (this reader knows {MANIFEST_FORMAT})"
            )
        encoding = _field(document, "encoding", str, path)
        if encoding != ENCODING:
            raise CorruptDataError(path, f"unknown encoding {encoding!r} (expected {ENCODING!r})")
        chunks = _chunk_refs(_field(document, "chunks", list, path), path, "chunks")
        views = (
            _chunk_refs(_field(document, "views", list, path), path, "views")
            if "views" in document
            else ()
        )
        spans = _view_spans(document, path) if "view_spans" in document else ()
        base: int | None = None
        losing: tuple[str, ...] = ()
        gaining: tuple[str, ...] | None = None
        if "base" in document:
            base = _field(document, "base", int, path)
            losing = _processor_ids(document, "losing", path)
            gaining = _processor_ids(document, "gaining", path) if "gaining" in document else None
        return cls(
            version=_field(document, "version", int, path),
            epoch=_field(document, "epoch", int, path),
            raw_size=_field(document, "raw_size", int, path),
            size=_field(document, "size", int, path),
            sha256=_field(document, "sha256", str, path),
            chunks=tuple(chunks),
            encoding=encoding,
            format=fmt,
            views=views,
            view_spans=spans,
            base=base,
            losing=losing,
            gaining=gaining,
        )

    def view_of(self, processor_id: str) -> tuple[ChunkRef, ...]:
        """The chunks of the container view holding ``processor_id``'s container, in order
        (one for a one-node view; none if the model has no views)."""
        if self.view_spans:
            return self.view_spans[view_index(processor_id, len(self.view_spans))]
        if self.views:
            return (self.views[view_index(processor_id, len(self.views))],)
        return ()


def _ref_list(refs: tuple[ChunkRef, ...]) -> list[dict[str, Any]]:
    return [{"name": c.name, "size": c.size, "crc32": c.crc32} for c in refs]


def _view_spans(document: Mapping[str, Any], path: str) -> tuple[tuple[ChunkRef, ...], ...]:
    spans = []
    for i, raw in enumerate(_field(document, "view_spans", list, path)):
        if not isinstance(raw, list) or not raw:
            raise CorruptDataError(path, f"view_spans[{i}] should be a non-empty list of chunks")
        spans.append(_chunk_refs(raw, path, f"view_spans[{i}]"))
    return tuple(spans)


def _chunk_refs(raw_refs: list[Any], path: str, field: str) -> tuple[ChunkRef, ...]:
    refs = []
    for i, raw in enumerate(raw_refs):
        if type(raw) is dict:  # the fast path: a well-formed reference, checked at once
            name, size, crc = raw.get("name"), raw.get("size"), raw.get("crc32")
            if isinstance(name, str) and type(size) is int and type(crc) is int:  # noqa: SIM102
                if _CHUNK_NAME.match(name):
                    refs.append(ChunkRef(name, int(size), int(crc)))
                    continue
        if not isinstance(raw, dict):
            raise CorruptDataError(path, f"{field}[{i}] is not an object")
        name = _field(raw, "name", str, path, f"{field}[{i}].")
        if chunk_epoch(name) is None:
            raise CorruptDataError(path, f"{field}[{i}].name {name!r} is not a chunk name")
        refs.append(
            ChunkRef(
                name,
                _field(raw, "size", int, path, f"{field}[{i}]."),
                _field(raw, "crc32", int, path, f"{field}[{i}]."),
            )
        )
    return tuple(refs)


def _processor_ids(document: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    raw = _field(document, key, list, path)
    if not all(isinstance(pid, str) for pid in raw):
        raise CorruptDataError(path, f"manifest field {key} should list processor ids")
    return tuple(raw)


def _field(obj: Mapping[str, Any], key: str, kind: type, path: str, prefix: str = "") -> Any:
    value = obj.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CorruptDataError(
            path, f"manifest field {prefix}{key} should be {kind.__name__}, got {value!r:.60}"
        )
    return value


def compress_view(raw: bytes, *, epoch: int, index: int, level: int = 6) -> tuple[ChunkRef, bytes]:
    """One container view (a small job-model JSON) compressed into one chunk named for
    ``index``; pair of its reference (for the manifest's ``views``) and its data."""
    data = zlib.compress(raw, level)
    name = chunk_name(epoch, index)
    return ChunkRef(name, len(data), zlib.crc32(data)), data


def check_chunk(ref: ChunkRef, data: bytes | None, *, path: str, what: str) -> bytes:
    """``data`` if it matches ``ref`` (size and CRC-32); else CorruptDataError naming ``path``."""
    if data is None:
        raise CorruptDataError(path, f"missing {what}")
    if len(data) != ref.size or zlib.crc32(data) != ref.crc32:
        raise CorruptDataError(
            path,
            f"checksum mismatch in {what} (size {len(data)}, crc32 {zlib.crc32(data)}; "
            f"manifest says size {ref.size}, crc32 {ref.crc32})",
        )
    return data


def decompress_view(ref: ChunkRef, data: bytes | None, *, path: str) -> bytes:
    """The JSON of a container view, checked against its reference."""
    checked = check_chunk(ref, data, path=path, what="container view")
    try:
        return zlib.decompress(checked)
    except zlib.error as exc:
        raise CorruptDataError(path, f"cannot decompress the container view: {exc}") from None


def split_blob(
    raw: bytes, *, version: int, epoch: int, chunk_size: int, level: int = 6
) -> tuple[Manifest, list[tuple[str, bytes]]]:
    """Compress ``raw`` and cut it into chunks of at most ``chunk_size`` bytes."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    compressed = zlib.compress(raw, level)
    pieces = [compressed[i : i + chunk_size] for i in range(0, len(compressed), chunk_size)]
    chunks = [(chunk_name(epoch, i), piece) for i, piece in enumerate(pieces)]
    manifest = Manifest(
        version=version,
        epoch=epoch,
        raw_size=len(raw),
        size=len(compressed),
        sha256=hashlib.sha256(compressed).hexdigest(),
        chunks=tuple(ChunkRef(name, len(data), zlib.crc32(data)) for name, data in chunks),
    )
    return manifest, chunks


def join_blob(manifest: Manifest, chunks: Mapping[str, bytes | None], *, path: str) -> bytes:
    """Check every chunk against ``manifest`` and return the decompressed payload.

    ``chunks`` maps chunk name -> data (None: the node is missing); ``path`` is the manifest's
    path (chunk ``c`` lives at ``path/c``).
    """
    parts = []
    total = len(manifest.chunks)
    for index, ref in enumerate(manifest.chunks):
        what = f"chunk {index + 1} of {total}"
        parts.append(check_chunk(ref, chunks.get(ref.name), path=f"{path}/{ref.name}", what=what))
    compressed = b"".join(parts)
    if (
        len(compressed) != manifest.size
        or hashlib.sha256(compressed).hexdigest() != manifest.sha256
    ):
        raise CorruptDataError(
            path, "checksum mismatch: the chunks do not add up to the manifest's SHA-256"
        )
    decompressor = zlib.decompressobj()
    try:
        raw = decompressor.decompress(compressed, manifest.raw_size + 1)
    except zlib.error as exc:
        raise CorruptDataError(path, f"cannot decompress the job model: {exc}") from None
    if len(raw) != manifest.raw_size or not decompressor.eof:
        raise CorruptDataError(
            path, f"decompressed size differs from the manifest's raw_size {manifest.raw_size}"
        )
    return raw


def decode_document(
    manifest: Manifest, chunks: Mapping[str, bytes | None], *, path: str
) -> JobModelDocument:
    """The job-model document stored as ``chunks`` (name -> data, None: missing) under the
    manifest at ``path``: checked (:func:`join_blob`), decoded, and of the manifest's version."""
    raw = join_blob(manifest, chunks, path=path)
    try:
        document = load_job_model_document(raw)
    except JobModelFormatError as exc:
        raise CorruptDataError(path, f"job model: {exc}") from None
    if document.model.version != manifest.version:
        raise CorruptDataError(path, f"holds job model version {document.model.version}")
    return document
