"""The on-disk format of a key group's chain: file names, base and delta documents.

``base-<seq:08d>.json`` holds the full state of a key group, ``delta-<seq:08d>.json`` the changes
since file ``seq - 1`` (see the package docstring, "On-disk format"). This module names, builds,
lists and reads (with every header field checked) those files; what to write and how to replay
them is the checkpointer's and the loader's. Imports :mod:`.encoding` and :mod:`.storage`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from locality.spark.state.objectspace.encoding import (
    JSON,
    CorruptCheckpointError,
    dumps,
    int_field,
    parse,
)
from locality.spark.state.objectspace.storage import CheckpointStorage

__all__ = [
    "FILE_RE",
    "FileKind",
    "FileReader",
    "base_document",
    "delta_document",
    "file_name",
    "scan",
]

FILE_RE = re.compile(r"^(base|delta)-(\d{8,})\.json$")

FileKind = Literal["base", "delta"]


def file_name(kind: FileKind, seq: int) -> str:
    return f"{kind}-{seq:08d}.json"


def delta_document(
    key_group: int, seq: int, base_seq: int | None, batch: int, objects: dict[str, JSON]
) -> bytes:
    """A delta: the changes since file ``seq - 1`` of the generation of base ``base_seq``."""
    return dumps(
        {
            "type": "delta",
            "key_group": key_group,
            "seq": seq,
            "base": base_seq,
            "batch": batch,
            "objects": objects,
        }
    )


def base_document(
    key_group: int, seq: int, batch: int, max_parallelism: int, objects: dict[str, JSON]
) -> bytes:
    """A base: the whole key group at ``batch``."""
    return dumps(
        {
            "type": "base",
            "key_group": key_group,
            "seq": seq,
            "batch": batch,
            "max_parallelism": max_parallelism,
            "objects": objects,
        }
    )


def scan(storage: CheckpointStorage, group: int) -> tuple[dict[int, str], dict[int, str]]:
    """The key group's bases and deltas by seq (other names ignored); two files with one seq
    are an error."""
    bases: dict[int, str] = {}
    deltas: dict[int, str] = {}
    for name in storage.list_files(group):
        match = FILE_RE.match(name)
        if match is None:
            continue
        seq = int(match.group(2))
        if seq in bases or seq in deltas:
            raise CorruptCheckpointError(
                storage.describe(group, name), f"a second file with sequence number {seq}"
            )
        (bases if match.group(1) == "base" else deltas)[seq] = name
    return bases, deltas


@dataclass
class FileReader:
    """Reads one key group's files, checking their headers, and counts what it read."""

    storage: CheckpointStorage
    key_group: int
    bytes_read: int = 0
    files_read: int = 0

    def read(self, name: str, kind: FileKind, seq: int) -> tuple[dict[str, Any], int, str]:
        """(the document, its size, its location); its type, key group and seq checked."""
        group_id = self.key_group
        location = self.storage.describe(group_id, name)
        data = self.storage.read_file(group_id, name)
        self.bytes_read += len(data)
        self.files_read += 1
        document = parse(data, location)
        if document.get("type") != kind:
            raise CorruptCheckpointError(location, f"field 'type' is not {kind!r}")
        if int_field(document, "key_group", location) != group_id:
            raise CorruptCheckpointError(
                location, f"belongs to key group {document['key_group']}, not {group_id}"
            )
        if int_field(document, "seq", location) != seq:
            raise CorruptCheckpointError(location, f"its seq {document['seq']} is not {seq}")
        return document, len(data), location
