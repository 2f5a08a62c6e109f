"""Differential checkpoints of a task's state: a persisted object space, keyed by key group.

Theory of operation
===================

The state of one task is an :class:`ObjectSpace`: a set of **key groups** (ints in
``[0, max_parallelism)``, Flink's atomic unit of keyed state; a key's group is
:func:`groupers.keygroups.key_group`), and in each key group a few **named persisted objects**
(Nuqleon's operator local storage): a :class:`PersistedValue` (one JSON value), a
:class:`PersistedList` (a list of JSON values) or a :class:`PersistedMap` (``str`` -> JSON
value). JSON values are ``None``, ``bool``, ``int``, finite ``float``, ``str``, ``list`` and
``dict`` with ``str`` keys; anything else is refused when it is stored, with the place named.

Dirty tracking
--------------
Every mutation records, in the object, what it changed since the last checkpoint of its key
group, and the name of the object in its key group's dirty set:

- a value: replaced (the whole value is written);
- a map: the set of keys set or deleted (each is written as its new value or as a deletion);
- a list: ``low``, the smallest length the list had since the checkpoint (``pop``, ``insert``
  and ``clear`` lower it; ``append`` and ``extend`` do not), and the indices below ``low``
  that were assigned. The delta is "truncate to ``low``, assign those indices, append
  ``items[low:]``", so appending ``k`` items writes ``k`` items, however long the list;
- an object created (or replaced: deleted and created again) since the checkpoint is written in
  full, an object deleted is written as a deletion (``null``).

Stored values are not copied: a value must not be mutated in place after it was stored (store
a new one, or call ``touch`` to mark it changed). A key group with an empty dirty set is
**clean**: a checkpoint writes nothing for it.

On-disk format (:class:`CheckpointStorage`; :class:`DirectoryStorage` is the filesystem one)
------------------------------------------------------------------------------------------
Checkpoints are keyed by **key group, not by task instance** (Heron's storage proposal): each
key group has its own folder and its own chain of files, numbered by a per-key-group sequence
number ``seq`` (0, 1, 2, ... for every file written, whatever its kind)::

    <root>/kg-<group:05d>/base-<seq:08d>.json     the full state of the key group
    <root>/kg-<group:05d>/delta-<seq:08d>.json    the changes since file seq - 1

All files are compact JSON objects (keys sorted)::

    base:  {"type": "base", "key_group": g, "seq": s, "batch": b, "max_parallelism": m,
            "objects": {name: FULL, ...}}
    delta: {"type": "delta", "key_group": g, "seq": s, "base": <seq of its base>, "batch": b,
            "objects": {name: FULL | PATCH | null, ...}}
    FULL:  {"kind": "value", "data": v} | {"kind": "list", "data": [...]}
           | {"kind": "map", "data": {...}}
    PATCH: {"kind": "map", "patch": {"set": {k: v, ...}, "del": [k, ...]}}
           | {"kind": "list", "patch": {"from": low, "tail": [...], "set": [[i, v], ...]}}

(empty ``set``/``del``/``tail`` members are left out). ``batch`` is the batch (or input offset)
the checkpoint covers; it strictly increases along a key group's chain. A *generation* is a
base and the deltas that follow it (``base`` = the base's seq, consecutive seqs).

Checkpoint (:meth:`ObjectSpace.checkpoint`)
-------------------------------------------
For each key group, in order: if it is dirty, write **one** file, then mark it clean:

- a delta holding only the dirty objects (a map's changed entries, a list's changed range...);
- or, when the compaction policy says so (or the key group has no base yet), a new base holding
  the whole key group instead of the delta.

A file is **created** atomically and never overwritten (:meth:`DirectoryStorage.create_file`
writes a temporary ``.<name>.*.tmp`` file, fsyncs it and publishes it with ``link``, which fails
if the name exists; a second writer of the same key group therefore fails instead of silently
forking the chain, and if it wrote the other kind of file for the same seq, loaders refuse the
key group: two files with one seq). A torn write leaves only a temporary file, which loaders
ignore (and nothing deletes: a crash can leave a few behind).

Compaction policy (:class:`CompactionPolicy`)
---------------------------------------------
Let ``B`` be the size of the current base and ``C`` the bytes of its deltas *including the one
about to be written*. The checkpoint writes a new base instead of that delta when
``C > delta_ratio * B`` (default ``delta_ratio = 1``: "the deltas outgrew the base"), or, if
``max_deltas`` is set, when the generation would hold more than ``max_deltas`` deltas.

Amortized cost, size rule alone. Call the bytes a pure delta would have written the *changes*
(:attr:`CheckpointReport.delta_bytes`). A generation ends when its changes ``C`` exceed
``r * B`` (``r = delta_ratio``); the new base is at most ``B + C`` (the state grew at most by what
the deltas wrote), so the generation wrote at most ``C + B + C < (2 + 1/r) * C``: the total bytes
written are at most ``(2 + 1/r)`` times the changes, plus the first base (3x for ``r = 1``), and a
load reads at most ``(1 + r) * B``. ``max_deltas`` bounds the number of files a load replays, at
the price of ``B / max_deltas`` amortized bytes per checkpoint of a changing key group (not
proportional to the changes when ``B`` is large: it is off by default).

Deletion: the files of a generation are deleted (base first, then its deltas in order) only at
the key group's *first checkpoint after* the one that superseded them, so the state before a
compaction stays loadable (``upto_batch``) until the next batch is checkpointed.

Load (:meth:`ObjectSpace.load`) and crash safety
------------------------------------------------
A load lists and reads the folders of the requested key groups only. Per key group: take the
newest base (with ``upto_batch``: the newest whose batch is ``<= upto_batch``), replay the deltas
with consecutive seqs after it (with ``upto_batch``: while their batch is ``<= upto_batch``).
Files of older generations are stale (deleted at the next checkpoint of the key group); files
past the loaded position are *abandoned* (a checkpoint that was not committed): the next
checkpoint of the space deletes them (newest first) before it writes anything for that key
group, dirty or not (until then, a load without ``upto_batch`` still sees them as the newest
state). A missing delta inside a chain, a delta of another base, a batch that does
not increase, a wrong key group or ``max_parallelism``, or unparseable JSON is an error naming
the file (:class:`CorruptCheckpointError`).

A key group's state on storage therefore only ever moves from one complete checkpoint to the
next: a crash in the middle of :meth:`ObjectSpace.checkpoint` leaves each key group either at
the new batch (its file was published) or at its previous checkpoint (it was not), never in
between; :attr:`LoadReport.batches` says which, per key group. A key group that was clean at
a checkpoint keeps the batch of its last write (its state at the later batch is the same). A
caller that commits batches (like the pipeline's driver) loads with
``upto_batch=<committed batch>`` (-1: none yet) and gets every key group exactly at the
committed batch, even if a later, uncommitted checkpoint was half written.

Rescaling
---------
A key group's chain does not depend on which task wrote it, so whoever owns a key group next
just continues its chain. After a split (8 -> 16 tasks) a task owns a subset of its parent's key
groups: load them (reading nothing else), or take them from a local copy with
:meth:`ObjectSpace.extract` (and :meth:`ObjectSpace.drop` the rest). After a merge (16 -> 8) a
task owns the union of two: :meth:`ObjectSpace.merge`. Dirty tracking and chain positions travel
with the key groups. :meth:`ObjectSpace.to_bytes` / :meth:`ObjectSpace.from_bytes` serialize a
whole space (state, dirty tracking and chain positions), e.g. for a local copy.

One writer per key group (the coordinator's job); an object space is not thread-safe.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, TypeAlias, TypeVar

from groupers.keygroups import key_group as _key_group_of_key
from groupers.keys import Key

__all__ = [
    "JSON",
    "CheckpointReport",
    "CheckpointStorage",
    "CompactionPolicy",
    "CorruptCheckpointError",
    "DirectoryStorage",
    "KeyGroup",
    "LoadReport",
    "MemoryStorage",
    "ObjectKind",
    "ObjectSpace",
    "ObjectSpaceError",
    "PersistedList",
    "PersistedMap",
    "PersistedValue",
]

#: A JSON value as the object space stores it.
JSON: TypeAlias = "bool | int | float | str | list[JSON] | dict[str, JSON] | None"

ObjectKind = Literal["value", "list", "map"]

_FILE_RE = re.compile(r"^(base|delta)-(\d{8,})\.json$")
_SNAPSHOT_TYPE = "affinity-objectspace"
_SNAPSHOT_VERSION = 1


class ObjectSpaceError(ValueError):
    """Wrong use of an object space, or a state that cannot be loaded."""


class CorruptCheckpointError(ObjectSpaceError):
    """A checkpoint file (or serialized space) that cannot be read; ``location`` names it."""

    def __init__(self, location: str, problem: str) -> None:
        super().__init__(f"{location}: {problem}")
        self.location = location
        self.problem = problem


# --------------------------------------------------------------------------------------------
# JSON values and encoding


def _json_problem(value: object) -> str | None:
    """None if ``value`` is a JSON value, else where (a suffix like ``[3]['a']``) and why."""
    if value is None or isinstance(value, str | int):  # bool is an int
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f": {value!r} is not JSON (not finite)"
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = _json_problem(item)
            if problem is not None:
                return f"[{index}]{problem}"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f": dict key {key!r} is not a str"
            problem = _json_problem(item)
            if problem is not None:
                return f"[{key!r}]{problem}"
        return None
    return (
        f": a {type(value).__name__} is not a JSON value "
        "(None, bool, int, finite float, str, list, dict with str keys)"
    )


def _check_json(value: object, where: str) -> None:
    problem = _json_problem(value)
    if problem is not None:
        raise TypeError(f"{where}{problem}")


def _dumps(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False).encode(
        "ascii"
    )


def _parse(data: bytes, location: str) -> dict[str, Any]:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptCheckpointError(location, f"not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise CorruptCheckpointError(location, "not a JSON object")
    return document


def _int_field(document: Mapping[str, Any], name: str, location: str, minimum: int = 0) -> int:
    value = document.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CorruptCheckpointError(
            location, f"field {name!r} must be an integer >= {minimum}, got {value!r}"
        )
    return value


def _json_list(items: Iterable[JSON]) -> list[JSON]:
    out: list[JSON] = []
    out.extend(items)
    return out


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"an object name must be a non-empty str, got {name!r}")
    return name


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _check_batch(batch: object) -> int:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
        raise ValueError(f"batch must be an integer >= 0, got {batch!r}")
    return batch


# --------------------------------------------------------------------------------------------
# Persisted objects


class _PersistedObject:
    """Common part: the name, the owning key group (None once deleted), and the "new" flag
    (created or replaced since the last checkpoint: written in full)."""

    kind: ClassVar[ObjectKind]
    __slots__ = ("_name", "_new", "_owner")

    def __init__(self, name: str, owner: KeyGroup) -> None:
        self._name = name
        self._owner: KeyGroup | None = owner
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

    def _live(self) -> KeyGroup:
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


class PersistedValue(_PersistedObject):
    """One JSON value; any ``set`` rewrites it whole at the next checkpoint."""

    kind: ClassVar[ObjectKind] = "value"
    __slots__ = ("_value",)

    def __init__(self, name: str, owner: KeyGroup, value: JSON) -> None:
        super().__init__(name, owner)
        self._value = value

    def get(self) -> JSON:
        return self._value

    def set(self, value: JSON) -> None:
        self._live()
        _check_json(value, self._where())
        self._value = value
        self._mark()

    def touch(self) -> None:
        """Mark the value changed (after mutating it in place)."""
        self._mark()

    def _data(self) -> JSON:
        return self._value

    def __repr__(self) -> str:
        return f"PersistedValue({self._name!r}, {self._value!r})"


class PersistedList(_PersistedObject):
    """A list of JSON values; a checkpoint writes the assigned slots and the changed tail."""

    kind: ClassVar[ObjectKind] = "list"
    __slots__ = ("_changed", "_items", "_low")

    def __init__(self, name: str, owner: KeyGroup, items: list[JSON]) -> None:
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
        _check_json(value, f"{self._where()}[{position}]")
        self._items[position] = value
        if position < self._low and not self._new:
            self._changed.add(position)
        self._mark()

    def append(self, value: JSON) -> None:
        self._live()
        _check_json(value, f"{self._where()}[{len(self._items)}]")
        self._items.append(value)
        self._mark()

    def extend(self, values: Iterable[JSON]) -> None:
        self._live()
        new = list(values)
        for offset, value in enumerate(new):
            _check_json(value, f"{self._where()}[{len(self._items) + offset}]")
        self._items.extend(new)
        self._mark()

    def insert(self, index: int, value: JSON) -> None:
        self._live()
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"{self._where()}: index must be an int, got {index!r}")
        size = len(self._items)
        position = max(0, min(size, index + size if index < 0 else index))
        _check_json(value, f"{self._where()}[{position}]")
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
        return {"low": self._low, "changed": _json_list(sorted(self._changed))}

    def _restore_tracking(self, tracking: Mapping[str, Any], location: str) -> None:
        low = _int_field(tracking, "low", location)
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
        low = _int_field(patch, "from", location)
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


class PersistedMap(_PersistedObject, MutableMapping[str, JSON]):
    """A ``str`` -> JSON map; a checkpoint writes the keys set or deleted since the last one.

    All of ``MutableMapping`` (``update``, ``pop``, ``setdefault``...) goes through
    ``__setitem__`` / ``__delitem__`` and is tracked.
    """

    kind: ClassVar[ObjectKind] = "map"
    __slots__ = ("_changed", "_entries")

    def __init__(self, name: str, owner: KeyGroup, entries: dict[str, JSON]) -> None:
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
        problem = _json_problem(value)
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
        deleted = _json_list(sorted(k for k in self._changed if k not in entries))
        if assigned:
            patch["set"] = assigned
        if deleted:
            patch["del"] = deleted
        return {"kind": "map", "patch": patch}

    def _clean(self) -> None:
        super()._clean()
        self._changed = set()

    def _tracking(self) -> dict[str, JSON]:
        return {"changed": _json_list(sorted(self._changed))}

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


_KINDS: dict[str, type[_PersistedObject]] = {
    "value": PersistedValue,
    "list": PersistedList,
    "map": PersistedMap,
}
_O = TypeVar("_O", bound=_PersistedObject)


def _decode_object(name: str, document: object, owner: KeyGroup, location: str) -> _PersistedObject:
    if not isinstance(document, dict) or "data" not in document:
        raise CorruptCheckpointError(location, f"object {name!r} is not a full object")
    kind, data = document.get("kind"), document["data"]
    if kind == "value":
        return PersistedValue(name, owner, data)
    if kind == "list" and isinstance(data, list):
        return PersistedList(name, owner, data)
    if kind == "map" and isinstance(data, dict):
        return PersistedMap(name, owner, data)
    raise CorruptCheckpointError(location, f"object {name!r}: bad kind {kind!r} or data")


# --------------------------------------------------------------------------------------------
# Key groups


@dataclass
class _Chain:
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
            "files": _json_list(self.files),
            "superseded": _json_list(self.superseded),
            "abandoned": _json_list(self.abandoned),
        }

    @classmethod
    def from_json(cls, document: object, location: str) -> _Chain:
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
            base_seq = _int_field(document, "base_seq", location)
        return cls(
            known=bool(document.get("known")),
            next_seq=_int_field(document, "next_seq", location),
            base_seq=base_seq,
            base_bytes=_int_field(document, "base_bytes", location),
            delta_bytes=_int_field(document, "delta_bytes", location),
            delta_count=_int_field(document, "delta_count", location),
            files=lists[0],
            superseded=lists[1],
            abandoned=lists[2],
        )


class KeyGroup:
    """The named persisted objects of one key group, with its dirty set and chain position."""

    __slots__ = ("_batch", "_chain", "_dirty", "_dropped", "_key_group", "_objects")

    def __init__(self, key_group: int) -> None:
        self._key_group = key_group
        self._objects: dict[str, _PersistedObject] = {}
        self._dirty: set[str] = set()  # names changed since the last checkpoint
        self._dropped: set[str] = set()  # checkpointed names deleted since then
        self._batch = -1  # the batch of the last checkpoint written for it (-1: none)
        self._chain = _Chain()

    @property
    def key_group(self) -> int:
        return self._key_group

    @property
    def batch(self) -> int:
        """The batch of the key group's last checkpoint (-1: none)."""
        return self._batch

    @property
    def is_dirty(self) -> bool:
        return bool(self._dirty)

    def names(self) -> list[str]:
        return sorted(self._objects)

    def __contains__(self, name: object) -> bool:
        return name in self._objects

    def __len__(self) -> int:
        return len(self._objects)

    def kind(self, name: str) -> ObjectKind:
        return self._get(name).kind

    def _get(self, name: str) -> _PersistedObject:
        try:
            return self._objects[name]
        except KeyError:
            raise KeyError(f"key group {self._key_group} has no object {name!r}") from None

    def _add(self, obj: _O) -> _O:
        if obj.name in self._objects:
            raise ObjectSpaceError(
                f"key group {self._key_group} already has a {self._objects[obj.name].kind} "
                f"named {obj.name!r}"
            )
        obj._new = True
        self._objects[obj.name] = obj
        self._dirty.add(obj.name)
        return obj

    def create_value(self, name: str, initial: JSON = None) -> PersistedValue:
        _check_json(initial, f"persisted value {name!r} of key group {self._key_group}")
        return self._add(PersistedValue(_check_name(name), self, initial))

    def create_list(self, name: str, items: Iterable[JSON] = ()) -> PersistedList:
        values = list(items)
        _check_json(values, f"persisted list {name!r} of key group {self._key_group}")
        return self._add(PersistedList(_check_name(name), self, values))

    def create_map(self, name: str, entries: Mapping[str, JSON] | None = None) -> PersistedMap:
        values = dict(entries or {})
        _check_json(values, f"persisted map {name!r} of key group {self._key_group}")
        return self._add(PersistedMap(_check_name(name), self, values))

    def _typed(self, name: str, cls: type[_O], create: bool) -> _O | None:
        obj = self._objects.get(name)
        if obj is None:
            if create:
                return None
            raise KeyError(f"key group {self._key_group} has no object {name!r}")
        if not isinstance(obj, cls):
            raise ObjectSpaceError(
                f"object {name!r} of key group {self._key_group} is a {obj.kind}, not a {cls.kind}"
            )
        return obj

    def get_value(self, name: str, *, create: bool = False) -> PersistedValue:
        """The value ``name``; with ``create``, a new one (``None``) if there is none."""
        found = self._typed(name, PersistedValue, create)
        return found if found is not None else self.create_value(name)

    def get_list(self, name: str, *, create: bool = False) -> PersistedList:
        found = self._typed(name, PersistedList, create)
        return found if found is not None else self.create_list(name)

    def get_map(self, name: str, *, create: bool = False) -> PersistedMap:
        found = self._typed(name, PersistedMap, create)
        return found if found is not None else self.create_map(name)

    def delete(self, name: str) -> None:
        """Delete object ``name`` (its handles stop working)."""
        obj = self._get(name)
        del self._objects[name]
        if not obj._new:
            self._dropped.add(name)
        obj._owner = None
        self._dirty.add(name)

    def snapshot(self) -> dict[str, dict[str, JSON]]:
        """``{name: {"kind": ..., "data": ...}}`` (containers copied, values shared)."""
        return {name: self._objects[name]._full() for name in sorted(self._objects)}

    # -- checkpoint support --
    def _delta_objects(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {}
        for name in sorted(self._dirty):
            obj = self._objects.get(name)
            if obj is None:
                if name in self._dropped:
                    out[name] = None
            elif obj._new:
                out[name] = obj._full()
            else:
                out[name] = obj._patch()
        return out

    def _full_objects(self) -> dict[str, JSON]:
        return {name: self._objects[name]._full() for name in sorted(self._objects)}

    def _written(self, batch: int) -> None:
        for name in self._dirty:
            obj = self._objects.get(name)
            if obj is not None:
                obj._clean()
        self._dirty = set()
        self._dropped = set()
        self._batch = batch

    def _detach(self) -> None:
        for obj in self._objects.values():
            obj._owner = None

    # -- load support --
    def _apply(self, objects: object, location: str, *, delta: bool) -> None:
        if not isinstance(objects, dict):
            raise CorruptCheckpointError(location, "field 'objects' must be a JSON object")
        for name, document in objects.items():
            if document is None and delta:
                self._objects.pop(name, None)
            elif isinstance(document, dict) and "patch" in document and delta:
                obj = self._objects.get(name)
                patch = document["patch"]
                if obj is None or obj.kind != document.get("kind") or not isinstance(patch, dict):
                    raise CorruptCheckpointError(
                        location, f"patch of {document.get('kind')!r} {name!r} has no such object"
                    )
                obj._apply_patch(patch, location)
            else:
                self._objects[name] = _decode_object(name, document, self, location)

    # -- serialization --
    def _to_json(self) -> dict[str, JSON]:
        objects: dict[str, JSON] = {}
        for name, obj in sorted(self._objects.items()):
            document = obj._full()
            document["new"] = obj._new
            document["tracking"] = obj._tracking()
            objects[name] = document
        return {
            "key_group": self._key_group,
            "batch": self._batch,
            "objects": objects,
            "dirty": _json_list(sorted(self._dirty)),
            "dropped": _json_list(sorted(self._dropped)),
            "chain": self._chain.to_json(),
        }

    @classmethod
    def _from_json(cls, document: object, max_parallelism: int, location: str) -> KeyGroup:
        if not isinstance(document, dict):
            raise CorruptCheckpointError(location, "a key group is not a JSON object")
        group_id = _int_field(document, "key_group", location)
        if group_id >= max_parallelism:
            raise CorruptCheckpointError(
                location, f"key group {group_id} is out of range [0, {max_parallelism})"
            )
        group = cls(group_id)
        where = f"{location} (key group {group_id})"
        group._batch = _int_field(document, "batch", where, minimum=-1)
        objects = document.get("objects")
        if not isinstance(objects, dict):
            raise CorruptCheckpointError(where, "field 'objects' must be a JSON object")
        for name, obj_doc in objects.items():
            obj = _decode_object(name, obj_doc, group, where)
            obj._new = bool(obj_doc.get("new"))
            tracking = obj_doc.get("tracking", {})
            if not isinstance(tracking, dict):
                raise CorruptCheckpointError(where, f"bad tracking of {name!r}")
            obj._restore_tracking(tracking, where)
            group._objects[name] = obj
        for attr in ("dirty", "dropped"):
            names = document.get(attr)
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise CorruptCheckpointError(where, f"field {attr!r} must be a list of names")
            setattr(group, f"_{attr}", set(names))
        group._chain = _Chain.from_json(document.get("chain"), where)
        return group

    def __repr__(self) -> str:
        return (
            f"KeyGroup({self._key_group}, objects={self.names()}, batch={self._batch}, "
            f"dirty={sorted(self._dirty)})"
        )


# --------------------------------------------------------------------------------------------
# Storage


class CheckpointStorage(Protocol):
    """Where checkpoint files live: a flat namespace of files per key group.

    ``create_file`` must be atomic (a reader sees the whole file or no file, also after a
    crash) and must refuse to overwrite (``FileExistsError``).
    """

    def list_files(self, key_group: int) -> list[str]:
        """The names of the key group's files (no temporary files); [] if none."""
        ...

    def read_file(self, key_group: int, name: str) -> bytes: ...

    def create_file(self, key_group: int, name: str, data: bytes) -> None: ...

    def delete_file(self, key_group: int, name: str) -> None:
        """Delete the file if it exists."""
        ...

    def describe(self, key_group: int, name: str) -> str:
        """Where the file is, for error messages (a path)."""
        ...


class DirectoryStorage:
    """Checkpoint files under ``root``: ``<root>/kg-<group:05d>/<name>``.

    ``create_file`` writes ``.<name>.*.tmp`` in the same folder, fsyncs it (``fsync=True``),
    publishes it with ``os.link`` (atomic; fails if the name exists, so nothing is ever
    overwritten), removes the temporary name and fsyncs the folder. On a filesystem without
    hard links it falls back to ``os.replace`` after checking the name is free.
    """

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root)
        self.fsync = fsync

    def folder(self, key_group: int) -> Path:
        return self.root / f"kg-{key_group:05d}"

    def list_files(self, key_group: int) -> list[str]:
        try:
            entries = os.listdir(self.folder(key_group))
        except FileNotFoundError:
            return []
        return sorted(name for name in entries if not name.startswith("."))

    def read_file(self, key_group: int, name: str) -> bytes:
        return (self.folder(key_group) / name).read_bytes()

    def _sync_dir(self, path: Path) -> None:
        if not self.fsync:
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def create_file(self, key_group: int, name: str, data: bytes) -> None:
        folder = self.folder(key_group)
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            self._sync_dir(folder.parent)
        target = folder / name
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                if self.fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
            try:
                os.link(tmp, target)
            except FileExistsError:
                raise FileExistsError(f"{target} already exists (not overwritten)") from None
            except OSError:  # no hard links here
                if target.exists():
                    raise FileExistsError(f"{target} already exists (not overwritten)") from None
                os.replace(tmp, target)
        finally:
            Path(tmp).unlink(missing_ok=True)
        self._sync_dir(folder)

    def delete_file(self, key_group: int, name: str) -> None:
        folder = self.folder(key_group)
        (folder / name).unlink(missing_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self._sync_dir(folder)

    def describe(self, key_group: int, name: str) -> str:
        return str(self.folder(key_group) / name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DirectoryStorage) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"DirectoryStorage({str(self.root)!r})"


class MemoryStorage:
    """Checkpoint files in a dict (tests, and a model of :class:`DirectoryStorage`)."""

    def __init__(self) -> None:
        self.files: dict[tuple[int, str], bytes] = {}

    def list_files(self, key_group: int) -> list[str]:
        return sorted(name for group, name in self.files if group == key_group)

    def read_file(self, key_group: int, name: str) -> bytes:
        try:
            return self.files[key_group, name]
        except KeyError:
            raise FileNotFoundError(self.describe(key_group, name)) from None

    def create_file(self, key_group: int, name: str, data: bytes) -> None:
        if (key_group, name) in self.files:
            raise FileExistsError(f"{self.describe(key_group, name)} already exists")
        self.files[key_group, name] = bytes(data)

    def delete_file(self, key_group: int, name: str) -> None:
        self.files.pop((key_group, name), None)

    def describe(self, key_group: int, name: str) -> str:
        return f"memory:kg-{key_group:05d}/{name}"


# --------------------------------------------------------------------------------------------
# Policy and reports


@dataclass(frozen=True)
class CompactionPolicy:
    """When a checkpoint writes a new base instead of a delta (see the module docstring).

    ``delta_ratio``: compact when the generation's delta bytes, with the new delta, exceed
    ``delta_ratio`` times its base (bytes written <= (2 + 1/delta_ratio) x changes, a load reads
    <= (1 + delta_ratio) x the base). ``max_deltas``: also compact when the generation would
    hold more deltas than this (bounds the files a load replays; None: no bound).
    """

    delta_ratio: float = 1.0
    max_deltas: int | None = None

    def __post_init__(self) -> None:
        ratio = self.delta_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio > 0:
            raise ValueError(f"delta_ratio must be a number > 0, got {ratio!r}")
        if not math.isfinite(ratio):
            raise ValueError(f"delta_ratio must be finite, got {ratio!r}")
        if self.max_deltas is not None:
            _positive_int(self.max_deltas, "max_deltas")

    def should_compact(self, *, base_bytes: int, delta_bytes: int, delta_count: int) -> bool:
        """``delta_bytes`` / ``delta_count``: the generation's, including the next delta."""
        if delta_bytes > self.delta_ratio * base_bytes:
            return True
        return self.max_deltas is not None and delta_count > self.max_deltas


@dataclass(frozen=True)
class CheckpointReport:
    """What one :meth:`ObjectSpace.checkpoint` did.

    ``bytes_written``: the sizes of the files written (deltas and bases). ``delta_bytes``: what
    deltas alone would have written (the changes; compaction keeps ``bytes_written`` amortized
    within ``(2 + 1/delta_ratio)`` of it). ``compacted``: key groups that wrote a base.
    """

    batch: int
    bytes_written: int
    files_written: int
    key_groups_written: tuple[int, ...]
    compacted: tuple[int, ...]
    delta_bytes: int
    files_deleted: int


@dataclass(frozen=True)
class LoadReport:
    """What one :meth:`ObjectSpace.load` read; ``batches``: key group -> the batch its state is
    at (-1: no checkpoint)."""

    bytes_read: int
    files_read: int
    batches: Mapping[int, int]


# --------------------------------------------------------------------------------------------
# Loading one key group


def _scan(storage: CheckpointStorage, group: int) -> tuple[dict[int, str], dict[int, str]]:
    bases: dict[int, str] = {}
    deltas: dict[int, str] = {}
    for name in storage.list_files(group):
        match = _FILE_RE.match(name)
        if match is None:
            continue
        seq = int(match.group(2))
        if seq in bases or seq in deltas:
            raise CorruptCheckpointError(
                storage.describe(group, name), f"a second file with sequence number {seq}"
            )
        (bases if match.group(1) == "base" else deltas)[seq] = name
    return bases, deltas


def _load_group(
    storage: CheckpointStorage, group_id: int, max_parallelism: int, upto: int | None
) -> tuple[KeyGroup, int, int]:
    """(the key group, bytes read, files read)."""
    bases, deltas = _scan(storage, group_id)
    read_bytes = 0
    read_files = 0

    def read(name: str, kind: str, seq: int) -> tuple[dict[str, Any], int, str]:
        nonlocal read_bytes, read_files
        location = storage.describe(group_id, name)
        data = storage.read_file(group_id, name)
        read_bytes += len(data)
        read_files += 1
        document = _parse(data, location)
        if document.get("type") != kind:
            raise CorruptCheckpointError(location, f"field 'type' is not {kind!r}")
        if _int_field(document, "key_group", location) != group_id:
            raise CorruptCheckpointError(
                location, f"belongs to key group {document['key_group']}, not {group_id}"
            )
        if _int_field(document, "seq", location) != seq:
            raise CorruptCheckpointError(location, f"its seq {document['seq']} is not {seq}")
        return document, len(data), location

    group = KeyGroup(group_id)
    chain = group._chain
    chain.known = True
    every = {**bases, **deltas}
    base_seq: int | None = None
    for seq in sorted(bases, reverse=True):
        document, size, location = read(bases[seq], "base", seq)
        batch = _int_field(document, "batch", location)
        if _int_field(document, "max_parallelism", location, minimum=1) != max_parallelism:
            raise CorruptCheckpointError(
                location,
                f"written with max_parallelism {document['max_parallelism']}, "
                f"not {max_parallelism}",
            )
        if upto is not None and batch > upto:
            continue
        group._apply(document.get("objects"), location, delta=False)
        group._batch = batch
        base_seq = seq
        chain.base_seq, chain.base_bytes, chain.files = seq, size, [bases[seq]]
        break
    if base_seq is None:
        if not every:
            return group, read_bytes, read_files
        oldest = min(every)
        if oldest != 0 or 0 not in bases:
            where = storage.describe(group_id, every[oldest])
            if not bases:
                raise CorruptCheckpointError(where, f"key group {group_id} has deltas but no base")
            raise ObjectSpaceError(
                f"key group {group_id} has no checkpoint at or before batch {upto}: its oldest "
                f"file is {where} (older checkpoints were deleted)"
            )
        # every checkpoint of the key group is past ``upto``: it was empty then
        chain.abandoned = [every[s] for s in sorted(every, reverse=True)]
        return group, read_bytes, read_files

    seq = base_seq + 1
    while seq in deltas:
        document, size, location = read(deltas[seq], "delta", seq)
        batch = _int_field(document, "batch", location)
        if document.get("base") != base_seq:
            raise CorruptCheckpointError(
                location, f"extends base {document.get('base')!r}, not base {base_seq}"
            )
        if batch <= group._batch:
            raise CorruptCheckpointError(
                location, f"its batch {batch} does not follow batch {group._batch}"
            )
        if upto is not None and batch > upto:
            break
        group._apply(document.get("objects"), location, delta=True)
        group._batch = batch
        chain.delta_bytes += size
        chain.delta_count += 1
        chain.files.append(deltas[seq])
        seq += 1
    later = sorted(s for s in every if s >= seq)
    if later and seq not in every:
        raise CorruptCheckpointError(
            storage.describe(group_id, every[later[0]]),
            f"key group {group_id}: file seq {seq} is missing before it (chain broken)",
        )
    for obj in group._objects.values():  # the replayed state is the checkpointed state
        obj._clean()
    chain.next_seq = seq
    chain.abandoned = [every[s] for s in reversed(later)]
    chain.superseded = [every[s] for s in sorted(every) if s < base_seq]
    return group, read_bytes, read_files


# --------------------------------------------------------------------------------------------
# The object space


class ObjectSpace:
    """One task's state: key groups of persisted objects, checkpointed differentially.

    ``ObjectSpace(max_parallelism, key_groups, storage=...)`` starts *new* (empty) key groups:
    their first checkpoint fails if the storage already holds files for them (load those with
    :meth:`load` instead).
    """

    def __init__(
        self,
        max_parallelism: int,
        key_groups: Iterable[int] = (),
        *,
        storage: CheckpointStorage | None = None,
        policy: CompactionPolicy | None = None,
    ) -> None:
        self._max_parallelism = _positive_int(max_parallelism, "max_parallelism")
        self._storage = storage
        self._policy = policy if policy is not None else CompactionPolicy()
        self._groups: dict[int, KeyGroup] = {}
        for group in self._check_groups(key_groups):
            if group in self._groups:
                raise ObjectSpaceError(f"key group {group} is listed twice")
            self._groups[group] = KeyGroup(group)

    # -- basics --
    @property
    def max_parallelism(self) -> int:
        return self._max_parallelism

    @property
    def storage(self) -> CheckpointStorage | None:
        return self._storage

    @property
    def policy(self) -> CompactionPolicy:
        return self._policy

    @property
    def key_groups(self) -> tuple[int, ...]:
        return tuple(sorted(self._groups))

    def __contains__(self, key_group: object) -> bool:
        return key_group in self._groups

    def __len__(self) -> int:
        return len(self._groups)

    def _check_group(self, group: object) -> int:
        if isinstance(group, bool) or not isinstance(group, int):
            raise TypeError(f"a key group must be an int, got {group!r}")
        if not 0 <= group < self._max_parallelism:
            raise ValueError(
                f"key group {group} is out of range [0, {self._max_parallelism}) "
                f"(max_parallelism {self._max_parallelism})"
            )
        return group

    def _check_groups(self, groups: Iterable[int]) -> list[int]:
        return [self._check_group(g) for g in groups]

    def group(self, key_group: int) -> KeyGroup:
        """The key group ``key_group`` (it must be one of this space's)."""
        self._check_group(key_group)
        try:
            return self._groups[key_group]
        except KeyError:
            raise ObjectSpaceError(
                f"key group {key_group} is not in this object space ({_ranges_text(self._groups)})"
            ) from None

    def key_group_of(self, key: Key) -> int:
        """``key``'s key group (:func:`groupers.keygroups.key_group`)."""
        return _key_group_of_key(key, self._max_parallelism)

    def group_for_key(self, key: Key) -> KeyGroup:
        return self.group(self.key_group_of(key))

    def batches(self) -> dict[int, int]:
        """Key group -> the batch of its last checkpoint (-1: none)."""
        return {g: self._groups[g].batch for g in sorted(self._groups)}

    def dirty_key_groups(self) -> list[int]:
        return sorted(g for g, group in self._groups.items() if group._dirty)

    def snapshot(self) -> dict[int, dict[str, dict[str, JSON]]]:
        """Key group -> :meth:`KeyGroup.snapshot` (for inspection and comparisons)."""
        return {g: self._groups[g].snapshot() for g in sorted(self._groups)}

    # -- checkpoint --
    def checkpoint(self, batch: int) -> CheckpointReport:
        """Write one file for each dirty key group (a delta, or a base if the policy says so),
        after deleting files abandoned by an ``upto_batch`` load; see the module docstring.

        If writing raises, the key groups written so far are committed and clean, the others
        still dirty. If the failure was before the file was published (the usual case: the
        storage raised while writing), calling ``checkpoint(batch)`` again finishes the job; if
        the file may have been published, the retry fails with ``FileExistsError`` rather than
        forking the chain: reload the key groups (:meth:`load`) instead.
        """
        batch = _check_batch(batch)
        storage = self._storage
        if storage is None:
            raise ObjectSpaceError("this object space has no storage (pass storage=...)")
        for g in sorted(self._groups):
            group = self._groups[g]
            if group._dirty and batch <= group._batch:
                raise ObjectSpaceError(
                    f"key group {g} is already checkpointed at batch {group._batch}: "
                    f"cannot checkpoint batch {batch} (batches must increase)"
                )
        written: list[int] = []
        compacted: list[int] = []
        totals = [0, 0, 0, 0]  # bytes, files, delta bytes, files deleted
        for g in sorted(self._groups):
            self._checkpoint_group(storage, self._groups[g], batch, written, compacted, totals)
        return CheckpointReport(
            batch=batch,
            bytes_written=totals[0],
            files_written=totals[1],
            key_groups_written=tuple(written),
            compacted=tuple(compacted),
            delta_bytes=totals[2],
            files_deleted=totals[3],
        )

    def _checkpoint_group(
        self,
        storage: CheckpointStorage,
        group: KeyGroup,
        batch: int,
        written: list[int],
        compacted: list[int],
        totals: list[int],
    ) -> None:
        g = group.key_group
        chain = group._chain
        while chain.abandoned:  # newest first: what is left is always a consistent chain
            storage.delete_file(g, chain.abandoned[0])
            chain.abandoned.pop(0)
            totals[3] += 1
        if not group._dirty:
            return
        if not chain.known:
            existing = [n for n in storage.list_files(g) if _FILE_RE.match(n)]
            if existing:
                raise ObjectSpaceError(
                    f"key group {g} is new in this object space but storage already holds "
                    f"{storage.describe(g, existing[0])}: load it (ObjectSpace.load) instead"
                )
            chain.known = True
        seq = chain.next_seq
        delta = _dumps(
            {
                "type": "delta",
                "key_group": g,
                "seq": seq,
                "base": chain.base_seq,
                "batch": batch,
                "objects": group._delta_objects(),
            }
        )
        compact = chain.base_seq is None or self._policy.should_compact(
            base_bytes=chain.base_bytes,
            delta_bytes=chain.delta_bytes + len(delta),
            delta_count=chain.delta_count + 1,
        )
        if compact:
            name = f"base-{seq:08d}.json"
            data = _dumps(
                {
                    "type": "base",
                    "key_group": g,
                    "seq": seq,
                    "batch": batch,
                    "max_parallelism": self._max_parallelism,
                    "objects": group._full_objects(),
                }
            )
        else:
            name, data = f"delta-{seq:08d}.json", delta
        storage.create_file(g, name, data)
        # committed: the key group is at ``batch`` on storage
        group._written(batch)
        chain.next_seq = seq + 1
        to_delete = chain.superseded
        if compact:
            chain.superseded = chain.files
            chain.files = [name]
            chain.base_seq, chain.base_bytes = seq, len(data)
            chain.delta_bytes = chain.delta_count = 0
            compacted.append(g)
        else:
            chain.superseded = []
            chain.files.append(name)
            chain.delta_bytes += len(data)
            chain.delta_count += 1
        written.append(g)
        totals[0] += len(data)
        totals[1] += 1
        totals[2] += len(delta)
        for index, old in enumerate(to_delete):  # base first: no base without its deltas
            try:
                storage.delete_file(g, old)
            except BaseException:
                chain.superseded = to_delete[index:] + chain.superseded
                raise
            totals[3] += 1

    # -- load --
    @classmethod
    def load(
        cls,
        storage: CheckpointStorage,
        key_groups: Iterable[int],
        *,
        max_parallelism: int,
        upto_batch: int | None = None,
        policy: CompactionPolicy | None = None,
    ) -> tuple[ObjectSpace, LoadReport]:
        """Load exactly ``key_groups`` from ``storage`` (a key group without files is empty);
        reads nothing of any other key group. ``upto_batch``: the state at that batch (a
        committed batch; -1: before any), ignoring later checkpoints (they are deleted at the
        next checkpoint).
        """
        space = cls(max_parallelism, storage=storage, policy=policy)
        groups = sorted(set(space._check_groups(key_groups)))
        if upto_batch is not None and (
            isinstance(upto_batch, bool) or not isinstance(upto_batch, int) or upto_batch < -1
        ):
            raise ValueError(f"upto_batch must be an integer >= -1, got {upto_batch!r}")
        total_bytes = 0
        total_files = 0
        for g in groups:
            group, read_bytes, read_files = _load_group(storage, g, max_parallelism, upto_batch)
            space._groups[g] = group
            total_bytes += read_bytes
            total_files += read_files
        report = LoadReport(
            bytes_read=total_bytes,
            files_read=total_files,
            batches={g: space._groups[g].batch for g in groups},
        )
        return space, report

    # -- rescaling --
    def extract(self, key_groups: Iterable[int]) -> ObjectSpace:
        """Move ``key_groups`` (state, dirty tracking, chain positions) to a new space."""
        groups = sorted(set(self._check_groups(key_groups)))
        missing = [g for g in groups if g not in self._groups]
        if missing:
            raise ObjectSpaceError(
                f"key groups {missing} are not in this object space ({_ranges_text(self._groups)})"
            )
        other = ObjectSpace(self._max_parallelism, storage=self._storage, policy=self._policy)
        for g in groups:
            other._groups[g] = self._groups.pop(g)
        return other

    def drop(self, key_groups: Iterable[int]) -> None:
        """Forget ``key_groups`` (changes not checkpointed are lost; their handles stop
        working). Missing key groups are ignored."""
        for g in set(self._check_groups(key_groups)):
            group = self._groups.pop(g, None)
            if group is not None:
                group._detach()

    def merge(self, other: ObjectSpace) -> None:
        """Move every key group of ``other`` into this space (``other`` ends up empty)."""
        if other is self:
            raise ObjectSpaceError("cannot merge an object space with itself")
        if other._max_parallelism != self._max_parallelism:
            raise ObjectSpaceError(
                f"cannot merge an object space with max_parallelism {other._max_parallelism} "
                f"into one with {self._max_parallelism}"
            )
        if (
            self._storage is not None
            and other._storage is not None
            and other._storage is not self._storage
            and other._storage != self._storage
        ):
            raise ObjectSpaceError(
                f"cannot merge object spaces of different storages "
                f"({self._storage!r}, {other._storage!r})"
            )
        overlap = sorted(set(self._groups) & set(other._groups))
        if overlap:
            raise ObjectSpaceError(f"both object spaces hold key groups {overlap}")
        if self._storage is None:
            self._storage = other._storage
        self._groups.update(other._groups)
        other._groups = {}

    # -- serialization (a local copy) --
    def to_bytes(self) -> bytes:
        """The whole space: state, dirty tracking and chain positions (not the storage)."""
        return _dumps(
            {
                "type": _SNAPSHOT_TYPE,
                "version": _SNAPSHOT_VERSION,
                "max_parallelism": self._max_parallelism,
                "policy": {
                    "delta_ratio": self._policy.delta_ratio,
                    "max_deltas": self._policy.max_deltas,
                },
                "groups": [self._groups[g]._to_json() for g in sorted(self._groups)],
            }
        )

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        storage: CheckpointStorage | None = None,
        location: str = "object space snapshot",
    ) -> ObjectSpace:
        """The space :meth:`to_bytes` wrote, attached to ``storage``."""
        document = _parse(data, location)
        if document.get("type") != _SNAPSHOT_TYPE or document.get("version") != _SNAPSHOT_VERSION:
            raise CorruptCheckpointError(
                location, f"not a version {_SNAPSHOT_VERSION} {_SNAPSHOT_TYPE} snapshot"
            )
        max_parallelism = _int_field(document, "max_parallelism", location, minimum=1)
        policy_doc = document.get("policy")
        if not isinstance(policy_doc, dict):
            raise CorruptCheckpointError(location, "field 'policy' must be a JSON object")
        try:
            policy = CompactionPolicy(
                delta_ratio=policy_doc.get("delta_ratio", 1.0),
                max_deltas=policy_doc.get("max_deltas"),
            )
        except ValueError as exc:
            raise CorruptCheckpointError(location, str(exc)) from None
        space = cls(max_parallelism, storage=storage, policy=policy)
        groups = document.get("groups")
        if not isinstance(groups, list):
            raise CorruptCheckpointError(location, "field 'groups' must be a list")
        for group_doc in groups:
            group = KeyGroup._from_json(group_doc, max_parallelism, location)
            if group.key_group in space._groups:
                raise CorruptCheckpointError(location, f"key group {group.key_group} twice")
            space._groups[group.key_group] = group
        return space

    def __repr__(self) -> str:
        return (
            f"ObjectSpace(max_parallelism={self._max_parallelism}, "
            f"key_groups={_ranges_text(self._groups)}, dirty={self.dirty_key_groups()})"
        )


def _ranges_text(groups: Iterable[int]) -> str:
    """``0-3, 7, 9-10`` (or ``none``)."""
    ordered = sorted(groups)
    if not ordered:
        return "none"
    parts: list[str] = []
    start = prev = ordered[0]
    for g in [*ordered[1:], None]:
        if g is not None and g == prev + 1:
            prev = g
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if g is not None:
            start = prev = g
    return ", ".join(parts)
