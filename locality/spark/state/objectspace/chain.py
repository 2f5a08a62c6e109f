""":class:`Chain`: where a key group's chain of checkpoint files stands on storage.

It travels with the key group (extract, merge, a local copy): ``next_seq``, the current
generation (its base and deltas, and their sizes for the compaction policy), the files of the
previous generation still to delete (``superseded``) and the files past a loaded position
(``abandoned``). Imports only :mod:`.encoding`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from locality.spark.state.objectspace.encoding import (
    JSON,
    CorruptCheckpointError,
    int_field,
    json_list,
)

__all__ = ["Chain"]


@dataclass
class Chain:
    """Where a key group's chain stands on storage (travels with the key group)."""

    known: bool = False  # False: a new key group, storage must hold nothing for it yet
    next_seq: int = 0
    base_seq: int | None = None
    base_bytes: int = 0
    delta_bytes: int = 0
    delta_count: int = 0
    files: list[str] = field(default_factory=list)  # the current generation
    superseded: list[str] = field(default_factory=list)  # deleted after the next write
    abandoned: list[str] = field(default_factory=list)  # deleted before the next write

    def to_json(self) -> dict[str, JSON]:
        return {
            "known": self.known,
            "next_seq": self.next_seq,
            "base_seq": self.base_seq,
            "base_bytes": self.base_bytes,
            "delta_bytes": self.delta_bytes,
            "delta_count": self.delta_count,
            "files": json_list(self.files),
            "superseded": json_list(self.superseded),
            "abandoned": json_list(self.abandoned),
        }

    @classmethod
    def from_json(cls, document: object, location: str) -> Chain:
        if not isinstance(document, dict):
            raise CorruptCheckpointError(location, "bad chain position")
        lists = []
        for name in ("files", "superseded", "abandoned"):
            value = document.get(name)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise CorruptCheckpointError(location, f"bad chain field {name!r}")
            lists.append(list(value))
        base_seq = document.get("base_seq")
        if base_seq is not None:
            base_seq = int_field(document, "base_seq", location)
        return cls(
            known=bool(document.get("known")),
            next_seq=int_field(document, "next_seq", location),
            base_seq=base_seq,
            base_bytes=int_field(document, "base_bytes", location),
            delta_bytes=int_field(document, "delta_bytes", location),
            delta_count=int_field(document, "delta_count", location),
            files=lists[0],
            superseded=lists[1],
            abandoned=lists[2],
        )
