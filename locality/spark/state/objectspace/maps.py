""":class:`PersistedMap`: a ``str`` -> JSON map whose checkpoint writes the keys set or deleted."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, ClassVar

from locality.spark.state.objectspace.encoding import (
    JSON,
    CorruptCheckpointError,
    ObjectKind,
    json_list,
    json_problem,
)
from locality.spark.state.objectspace.objects import Owner, PersistedObject

__all__ = ["PersistedMap"]


class PersistedMap(PersistedObject, MutableMapping[str, JSON]):
    """A ``str`` -> JSON map; a checkpoint writes the keys set or deleted since the last one.

    All of ``MutableMapping`` (``update``, ``pop``, ``setdefault``...) goes through
    ``__setitem__`` / ``__delitem__`` and is tracked.
    """

    kind: ClassVar[ObjectKind] = "map"
    __slots__ = ("_changed", "_entries")

    def __init__(self, name: str, owner: Owner, entries: dict[str, JSON]) -> None:
        super().__init__(name, owner)
        self._entries = entries
        self._changed: set[str] = set()  # keys set or deleted since the checkpoint

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __getitem__(self, key: str) -> JSON:
        return self._entries[key]

    def __setitem__(self, key: str, value: JSON) -> None:
        owner = self._live()
        if not isinstance(key, str):
            raise TypeError(f"{self._where()}: keys must be str, got {key!r}")
        problem = json_problem(value)
        if problem is not None:
            raise TypeError(f"{self._where()}[{key!r}]{problem}")
        self._entries[key] = value
        if not self._new:
            self._changed.add(key)
        owner._dirty.add(self._name)

    def __delitem__(self, key: str) -> None:
        owner = self._live()
        del self._entries[key]
        if not self._new:
            self._changed.add(key)
        owner._dirty.add(self._name)

    def touch(self, key: str) -> None:
        """Mark entry ``key`` changed (after mutating its value in place)."""
        owner = self._live()
        if key not in self._entries:
            raise KeyError(key)
        if not self._new:
            self._changed.add(key)
        owner._dirty.add(self._name)

    def to_dict(self) -> dict[str, JSON]:
        """A shallow copy of the entries."""
        return dict(self._entries)

    def _data(self) -> JSON:
        return dict(self._entries)

    def _patch(self) -> dict[str, JSON]:
        entries = self._entries
        patch: dict[str, JSON] = {}
        assigned = {k: entries[k] for k in self._changed if k in entries}
        deleted = json_list(sorted(k for k in self._changed if k not in entries))
        if assigned:
            patch["set"] = assigned
        if deleted:
            patch["del"] = deleted
        return {"kind": "map", "patch": patch}

    def _clean(self) -> None:
        super()._clean()
        self._changed = set()

    def _tracking(self) -> dict[str, JSON]:
        return {"changed": json_list(sorted(self._changed))}

    def _restore_tracking(self, tracking: Mapping[str, Any], location: str) -> None:
        changed = tracking.get("changed")
        if not isinstance(changed, list) or not all(isinstance(k, str) for k in changed):
            raise CorruptCheckpointError(location, f"bad map tracking of {self._name!r}")
        self._changed = set(changed)

    def _apply_patch(self, patch: Mapping[str, Any], location: str) -> None:
        assigned = patch.get("set", {})
        deleted = patch.get("del", [])
        if not isinstance(assigned, dict) or not isinstance(deleted, list):
            raise CorruptCheckpointError(location, f"bad map patch of {self._name!r}")
        for key in deleted:
            if not isinstance(key, str):
                raise CorruptCheckpointError(location, f"bad deleted key {key!r} of {self._name!r}")
            self._entries.pop(key, None)
        self._entries.update(assigned)

    def __repr__(self) -> str:
        return f"PersistedMap({self._name!r}, {len(self._entries)} entries)"
