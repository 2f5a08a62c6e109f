"""Persisted objects: the common part of every kind, and :class:`PersistedValue`.

An object belongs to one key group (``owner``); every mutation marks its name in the owner's
dirty set and records, in the object, what changed since the last checkpoint (see the package
docstring, "Dirty tracking"). Lists and maps live in :mod:`.lists` and :mod:`.maps`.

Imports only :mod:`.encoding`: an object sees its key group through :class:`Owner` (what it
reads of a :class:`~.keygroup.KeyGroup`), so the key group imports the object kinds and none of
them imports it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from locality.spark.state.objectspace.encoding import (
    JSON,
    CorruptCheckpointError,
    ObjectKind,
    ObjectSpaceError,
    check_json,
)

__all__ = ["Owner", "PersistedObject", "PersistedValue"]


class Owner(Protocol):
    """What a persisted object reads of the key group it belongs to: its number and its dirty
    set (the names changed since the last checkpoint)."""

    _dirty: set[str]

    @property
    def key_group(self) -> int: ...


class PersistedObject:
    """Common part: the name, the owning key group (None once deleted), and the "new" flag
    (created or replaced since the last checkpoint: written in full)."""

    kind: ClassVar[ObjectKind]
    __slots__ = ("_name", "_new", "_owner")

    def __init__(self, name: str, owner: Owner) -> None:
        self._name = name
        self._owner: Owner | None = owner
        self._new = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def key_group(self) -> int:
        return self._live().key_group

    @property
    def is_dirty(self) -> bool:
        """Changed since the last checkpoint of its key group."""
        owner = self._live()
        return self._name in owner._dirty

    def _live(self) -> Owner:
        owner = self._owner
        if owner is None:
            raise ObjectSpaceError(
                f"persisted {self.kind} {self._name!r} was deleted (or its key group dropped)"
            )
        return owner

    def _mark(self) -> None:
        self._live()._dirty.add(self._name)

    def _where(self) -> str:
        owner = self._owner
        group = "?" if owner is None else str(owner.key_group)
        return f"persisted {self.kind} {self._name!r} of key group {group}"

    # -- persistence (overridden) --
    def _data(self) -> JSON:
        raise NotImplementedError

    def _full(self) -> dict[str, JSON]:
        return {"kind": self.kind, "data": self._data()}

    def _patch(self) -> dict[str, JSON]:
        return self._full()

    def _clean(self) -> None:
        self._new = False

    def _tracking(self) -> dict[str, JSON]:
        return {}

    def _restore_tracking(self, tracking: Mapping[str, Any], location: str) -> None:
        pass

    def _apply_patch(self, patch: Mapping[str, Any], location: str) -> None:
        raise CorruptCheckpointError(location, f"a {self.kind} has no patch")


class PersistedValue(PersistedObject):
    """One JSON value; any ``set`` rewrites it whole at the next checkpoint."""

    kind: ClassVar[ObjectKind] = "value"
    __slots__ = ("_value",)

    def __init__(self, name: str, owner: Owner, value: JSON) -> None:
        super().__init__(name, owner)
        self._value = value

    def get(self) -> JSON:
        return self._value

    def set(self, value: JSON) -> None:
        self._live()
        check_json(value, self._where())
        self._value = value
        self._mark()

    def touch(self) -> None:
        """Mark the value changed (after mutating it in place)."""
        self._mark()

    def _data(self) -> JSON:
        return self._value

    def __repr__(self) -> str:
        return f"PersistedValue({self._name!r}, {self._value!r})"
