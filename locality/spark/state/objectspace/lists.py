""":class:`PersistedList`: a list whose checkpoint writes the assigned slots and the new tail.

Tracking: ``low``, the smallest length the list had since the checkpoint, and the indices below
``low`` that were assigned; the patch is "truncate to ``low``, assign those, append the rest".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

from locality.spark.state.objectspace.encoding import (
    JSON,
    CorruptCheckpointError,
    ObjectKind,
    check_json,
    int_field,
    json_list,
)
from locality.spark.state.objectspace.objects import Owner, PersistedObject

__all__ = ["PersistedList"]


class PersistedList(PersistedObject):
    """A list of JSON values; a checkpoint writes the assigned slots and the changed tail."""

    kind: ClassVar[ObjectKind] = "list"
    __slots__ = ("_changed", "_items", "_low")

    def __init__(self, name: str, owner: Owner, items: list[JSON]) -> None:
        super().__init__(name, owner)
        self._items = items
        self._low = len(items)  # items[_low:] are rewritten at the next checkpoint
        self._changed: set[int] = set()  # assigned indices < _low

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[JSON]:
        return iter(self._items)

    def __getitem__(self, index: int) -> JSON:
        return self._items[index]

    def _index(self, index: int) -> int:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"{self._where()}: index must be an int, got {index!r}")
        size = len(self._items)
        position = index + size if index < 0 else index
        if not 0 <= position < size:
            raise IndexError(f"{self._where()}: index {index} out of range (length {size})")
        return position

    def _lower(self, low: int) -> None:
        if low < self._low:
            self._low = low
            if self._changed:
                self._changed = {i for i in self._changed if i < low}

    def __setitem__(self, index: int, value: JSON) -> None:
        self._live()
        position = self._index(index)
        check_json(value, f"{self._where()}[{position}]")
        self._items[position] = value
        if position < self._low and not self._new:
            self._changed.add(position)
        self._mark()

    def append(self, value: JSON) -> None:
        self._live()
        check_json(value, f"{self._where()}[{len(self._items)}]")
        self._items.append(value)
        self._mark()

    def extend(self, values: Iterable[JSON]) -> None:
        self._live()
        new = list(values)
        for offset, value in enumerate(new):
            check_json(value, f"{self._where()}[{len(self._items) + offset}]")
        self._items.extend(new)
        self._mark()

    def insert(self, index: int, value: JSON) -> None:
        self._live()
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"{self._where()}: index must be an int, got {index!r}")
        size = len(self._items)
        position = max(0, min(size, index + size if index < 0 else index))
        check_json(value, f"{self._where()}[{position}]")
        self._items.insert(position, value)
        self._lower(position)
        self._mark()

    def pop(self, index: int = -1) -> JSON:
        self._live()
        position = self._index(index)
        value = self._items.pop(position)
        self._lower(position)
        self._mark()
        return value

    def clear(self) -> None:
        self._live()
        self._items.clear()
        self._lower(0)
        self._mark()

    def touch(self, index: int) -> None:
        """Mark slot ``index`` changed (after mutating its value in place)."""
        self._live()
        position = self._index(index)
        if position < self._low and not self._new:
            self._changed.add(position)
        self._mark()

    def to_list(self) -> list[JSON]:
        """A shallow copy of the items."""
        return list(self._items)

    def _data(self) -> JSON:
        return list(self._items)

    def _patch(self) -> dict[str, JSON]:
        patch: dict[str, JSON] = {"from": self._low}
        if self._low < len(self._items):
            patch["tail"] = self._items[self._low :]
        if self._changed:
            patch["set"] = [[i, self._items[i]] for i in sorted(self._changed)]
        return {"kind": "list", "patch": patch}

    def _clean(self) -> None:
        super()._clean()
        self._low = len(self._items)
        self._changed = set()

    def _tracking(self) -> dict[str, JSON]:
        return {"low": self._low, "changed": json_list(sorted(self._changed))}

    def _restore_tracking(self, tracking: Mapping[str, Any], location: str) -> None:
        low = int_field(tracking, "low", location)
        changed = tracking.get("changed")
        if (
            low > len(self._items)
            or not isinstance(changed, list)
            or not all(isinstance(i, int) and 0 <= i < low for i in changed)
        ):
            raise CorruptCheckpointError(location, f"bad list tracking of {self._name!r}")
        self._low = low
        self._changed = set(changed)

    def _apply_patch(self, patch: Mapping[str, Any], location: str) -> None:
        low = int_field(patch, "from", location)
        tail = patch.get("tail", [])
        assigned = patch.get("set", [])
        if low > len(self._items) or not isinstance(tail, list) or not isinstance(assigned, list):
            raise CorruptCheckpointError(
                location, f"list patch of {self._name!r} does not fit its list"
            )
        del self._items[low:]
        for pair in assigned:
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or isinstance(pair[0], bool)
                or not isinstance(pair[0], int)
                or not 0 <= pair[0] < low
            ):
                raise CorruptCheckpointError(location, f"bad list slot {pair!r} of {self._name!r}")
            self._items[pair[0]] = pair[1]
        self._items.extend(tail)

    def __repr__(self) -> str:
        return f"PersistedList({self._name!r}, {self._items!r})"
