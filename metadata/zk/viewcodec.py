"""Container views of a job model: pure encoding and decoding (no I/O).

A container view is a compressed format-2 document holding only some of the model's containers
(:meth:`metadata.columns.ModelColumns.document`), so that a processor reads its own container
instead of the whole model. The containers are spread over the views by
:func:`~metadata.zk.chunks.view_index` of the processor id; a view is cut into as many chunks as
its compressed size needs (at most ``chunk_size`` bytes each), so it spans several nodes when one
processor's container is bigger than a node (1,000,000 tasks over 3 processors: about 5 MB each).

The manifest lists one-node views in ``views`` (what every reader knows) and, when some view
spans several nodes, every view in ``view_spans`` instead (see :mod:`metadata.zk.chunks`).
:func:`join_view` checks each chunk against its reference (size, CRC-32) and raises
:class:`~metadata.errors.CorruptDataError` naming the chunk's node.
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

import orjson

from metadata.columns import ModelColumns
from metadata.errors import CorruptDataError, JobModelFormatError
from metadata.model import ContainerModel
from metadata.serde import load_container
from metadata.zk.chunks import ChunkRef, Manifest, check_chunk, chunk_name, view_index

__all__ = [
    "VIEW_TARGET_BYTES",
    "ViewPart",
    "container_views",
    "cut_view",
    "decode_view",
    "join_view",
    "view_count",
    "with_views",
]

#: About how many compressed bytes one container view holds (the number of views is the whole
#: model's compressed size over this, at most one per container).
VIEW_TARGET_BYTES = 2 * 1024
#: With at most this many containers each big enough for a view of its own, the writer looks for
#: a number of views that gives every container its own (the hash may put two in one view).
_SPREAD_LIMIT = 64

#: One chunk of a view as read: its reference, its data (None: missing) and its node's path.
ViewPart = tuple[ChunkRef, bytes | None, str]


def view_count(processor_ids: Sequence[str], size: int, chunk_size: int) -> int:
    """How many views the containers of ``processor_ids`` go in, for a model of ``size``
    compressed bytes: about one per ``VIEW_TARGET_BYTES``, at most one per container. When
    every container gets one (few, large ones), the smallest count up to four times that whose
    hash puts the fewest containers together (a processor then reads only its own)."""
    target = min(VIEW_TARGET_BYTES, max(1, chunk_size // 4))
    count = min(len(processor_ids), max(1, math.ceil(size / target)))
    if count < len(processor_ids) or count > _SPREAD_LIMIT:
        return count
    hashes = [zlib.crc32(pid.encode("utf-8")) for pid in processor_ids]

    def crowding(views: int) -> int:
        return len(hashes) - len({h % views for h in hashes})

    return min(range(count, 4 * count + 1), key=lambda views: (crowding(views), views))


def cut_view(
    raw: bytes, *, epoch: int, first_index: int, chunk_size: int, level: int = 1
) -> list[tuple[ChunkRef, bytes]]:
    """One view's JSON compressed and cut into chunks of at most ``chunk_size`` bytes, named
    from chunk ``first_index`` on (at least one: zlib always writes a header)."""
    data = zlib.compress(raw, level)
    pieces = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)]
    return [
        (ChunkRef(chunk_name(epoch, first_index + i), len(piece), zlib.crc32(piece)), piece)
        for i, piece in enumerate(pieces)
    ]


def container_views(
    columns: ModelColumns, *, epoch: int, first_index: int, size: int, chunk_size: int
) -> list[list[tuple[ChunkRef, bytes]]]:
    """The container views of a job model (none if it has no containers), each as its chunks:
    ``columns`` is its format-2 encoding, ``size`` its compressed size; the chunks are named
    from chunk ``first_index`` on. Views are compressed faster (level 1, larger)."""
    pids = list(columns.blocks)
    if not pids:
        return []
    count = view_count(pids, size, chunk_size)
    groups: dict[int, list[str]] = defaultdict(list)
    for pid in pids:
        groups[view_index(pid, count)].append(pid)
    views = []
    index = first_index
    for view in range(count):
        raw = orjson.dumps(columns.document(groups.get(view, [])))
        chunks = cut_view(raw, epoch=epoch, first_index=index, chunk_size=chunk_size)
        index += len(chunks)
        views.append(chunks)
    return views


def with_views(manifest: Manifest, views: Sequence[Sequence[tuple[ChunkRef, bytes]]]) -> Manifest:
    """``manifest`` listing ``views``: as ``views`` when each fits one node (every reader knows
    them), else as ``view_spans``."""
    if not views:
        return manifest
    if all(len(chunks) == 1 for chunks in views):
        return replace(manifest, views=tuple(chunks[0][0] for chunks in views))
    spans = tuple(tuple(ref for ref, _ in chunks) for chunks in views)
    return replace(manifest, view_spans=spans)


def join_view(parts: Sequence[ViewPart]) -> bytes:
    """The JSON of a container view from its chunks, each checked against its reference."""
    total = len(parts)
    checked = []
    for i, (ref, data, path) in enumerate(parts):
        what = "container view" if total == 1 else f"container view chunk {i + 1} of {total}"
        checked.append(check_chunk(ref, data, path=path, what=what))
    try:
        decompressor = zlib.decompressobj()
        raw = decompressor.decompress(b"".join(checked))
    except zlib.error as exc:
        raise CorruptDataError(
            parts[0][2], f"cannot decompress the container view: {exc}"
        ) from None
    if not decompressor.eof:
        raise CorruptDataError(parts[0][2], f"the container view of {total} chunks is truncated")
    return raw


def decode_view(
    parts: Sequence[ViewPart], processor_id: str, *, version: int
) -> ContainerModel | None:
    """``processor_id``'s container in the container view made of ``parts`` (its chunks in
    order) of job model ``version`` (None: the model has none)."""
    if not parts:
        raise ValueError("a container view has at least one chunk")
    raw = join_view(parts)
    try:
        held, container = load_container(raw, processor_id)
    except JobModelFormatError as exc:
        raise CorruptDataError(parts[0][2], f"container view: {exc}") from None
    if held != version:
        raise CorruptDataError(parts[0][2], f"holds job model version {held}")
    return container
