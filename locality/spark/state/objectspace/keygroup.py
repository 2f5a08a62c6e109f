""":class:`KeyGroup`: the named persisted objects of one key group, its dirty set and chain.

Besides the user's API (create, get, delete objects), a key group builds what a checkpoint
writes (:meth:`KeyGroup._delta_objects`, :meth:`KeyGroup._full_objects`), applies what a load
reads (:meth:`KeyGroup._apply`) and serializes itself for a local copy. Imports the object kinds,
:mod:`.chain` and :mod:`.encoding`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from locality.spark.state.objectspace.chain import Chain
from locality.spark.state.objectspace.encoding import (
    JSON,
    CorruptCheckpointError,
    ObjectKind,
    ObjectSpaceError,
    check_json,
    check_name,
    int_field,
    json_list,
)
from locality.spark.state.objectspace.lists import PersistedList
from locality.spark.state.objectspace.maps import PersistedMap
from locality.spark.state.objectspace.objects import PersistedObject, PersistedValue

__all__ = ["KeyGroup", "decode_object"]

_O = TypeVar("_O", bound=PersistedObject)


def decode_object(name: str, document: object, owner: KeyGroup, location: str) -> PersistedObject:
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


class KeyGroup:
    """The named persisted objects of one key group, with its dirty set and chain position."""

    __slots__ = ("_batch", "_chain", "_dirty", "_dropped", "_key_group", "_objects")

    def __init__(self, key_group: int) -> None:
        self._key_group = key_group
        self._objects: dict[str, PersistedObject] = {}
        self._dirty: set[str] = set()  # names changed since the last checkpoint
        self._dropped: set[str] = set()  # checkpointed names deleted since then
        self._batch = -1  # the batch of the last checkpoint written for it (-1: none)
        self._chain = Chain()

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

    def _get(self, name: str) -> PersistedObject:
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
        check_json(initial, f"persisted value {name!r} of key group {self._key_group}")
        return self._add(PersistedValue(check_name(name), self, initial))

    def create_list(self, name: str, items: Iterable[JSON] = ()) -> PersistedList:
        values = list(items)
        check_json(values, f"persisted list {name!r} of key group {self._key_group}")
        return self._add(PersistedList(check_name(name), self, values))

    def create_map(self, name: str, entries: Mapping[str, JSON] | None = None) -> PersistedMap:
        values = dict(entries or {})
        check_json(values, f"persisted map {name!r} of key group {self._key_group}")
        return self._add(PersistedMap(check_name(name), self, values))

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
                self._objects[name] = decode_object(name, document, self, location)

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
            "dirty": json_list(sorted(self._dirty)),
            "dropped": json_list(sorted(self._dropped)),
            "chain": self._chain.to_json(),
        }

    @classmethod
    def _from_json(cls, document: object, max_parallelism: int, location: str) -> KeyGroup:
        if not isinstance(document, dict):
            raise CorruptCheckpointError(location, "a key group is not a JSON object")
        group_id = int_field(document, "key_group", location)
        if group_id >= max_parallelism:
            raise CorruptCheckpointError(
                location, f"key group {group_id} is out of range [0, {max_parallelism})"
            )
        group = cls(group_id)
        where = f"{location} (key group {group_id})"
        group._batch = int_field(document, "batch", where, minimum=-1)
        objects = document.get("objects")
        if not isinstance(objects, dict):
            raise CorruptCheckpointError(where, "field 'objects' must be a JSON object")
        for name, obj_doc in objects.items():
            obj = decode_object(name, obj_doc, group, where)
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
        group._chain = Chain.from_json(document.get("chain"), where)
        return group

    def __repr__(self) -> str:
        return (
            f"KeyGroup({self._key_group}, objects={self.names()}, batch={self._batch}, "
            f"dirty={sorted(self._dirty)})"
        )
