"""The on-disk format of a key group's chain: file names, base and delta documents.

``base-<seq:08d>.json`` holds the full state of a key group, ``delta-<seq:08d>.json`` the changes
since file ``seq - 1`` (see the package docstring, "On-disk format"). A file written by one
attempt of a committed batch is *tagged*: ``<kind>-<seq:08d>-<batch>-<tag>.json`` (the attempt's
token), so two attempts of one batch never write the same name, and a tagged delta names the file
it follows (``prev``): the chain is followed from the head a commit names, not found by listing.
This module names, builds, lists and reads (with every header field checked) those files; what
to write and how to replay them is the checkpointer's and the loader's. Imports :mod:`.encoding`
and :mod:`.storage`.
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
    "FileName",
    "FileReader",
    "base_document",
    "delta_document",
    "file_name",
    "garbage",
    "parse_name",
    "scan",
]

FILE_RE = re.compile(r"^(base|delta)-(\d{8,})\.json$")
_TAGGED_RE = re.compile(r"^(base|delta)-(\d{8,})-(\d+)-([0-9a-z]{1,64})\.json$")

FileKind = Literal["base", "delta"]


@dataclass(frozen=True)
class FileName:
    """A chain file's name, parsed: its kind and seq; a tagged one's batch and tag."""

    kind: FileKind
    seq: int
    batch: int | None = None
    tag: str | None = None


def file_name(kind: FileKind, seq: int, batch: int | None = None, tag: str | None = None) -> str:
    if tag is None:
        return f"{kind}-{seq:08d}.json"
    return f"{kind}-{seq:08d}-{batch}-{tag}.json"


def parse_name(name: str) -> FileName | None:
    """The parts of a chain file's name (None: not a chain file)."""
    match = _TAGGED_RE.match(name)
    if match is not None:
        kind: FileKind = "base" if match.group(1) == "base" else "delta"
        return FileName(kind, int(match.group(2)), int(match.group(3)), match.group(4))
    match = FILE_RE.match(name)
    if match is not None:
        return FileName("base" if match.group(1) == "base" else "delta", int(match.group(2)))
    return None


def garbage(names: list[str], keep: set[str], decided_upto: int) -> list[str]:
    """The tagged files among ``names`` that no commit needs: written for a batch at or before
    ``decided_upto`` (a batch the commit log has decided) and not on the chain ``keep`` of the
    commit decided last. Files of later batches may belong to an attempt still running."""
    found = []
    for name in names:
        parsed = parse_name(name)
        if parsed is None or parsed.batch is None or name in keep:
            continue
        if parsed.batch <= decided_upto:
            found.append(name)
    return sorted(found, reverse=True)


def delta_document(
    key_group: int,
    seq: int,
    base_seq: int | None,
    batch: int,
    objects: dict[str, JSON],
    prev: str | None = None,
) -> bytes:
    """A delta: the changes since file ``seq - 1`` (named ``prev`` when tagged) of the
    generation of base ``base_seq``."""
    document: dict[str, JSON] = {
        "type": "delta",
        "key_group": key_group,
        "seq": seq,
        "base": base_seq,
        "batch": batch,
        "objects": objects,
    }
    if prev is not None:
        document["prev"] = prev
    return dumps(document)


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
    """The key group's untagged bases and deltas by seq (other names, tagged ones too, ignored);
    two files with one seq are an error."""
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
