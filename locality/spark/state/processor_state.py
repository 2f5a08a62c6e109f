"""The state variables of a ``StatefulProcessor`` (Spark 4's ``transformWithStateInPandas``)
kept in a task's object space, and the handle its ``init`` gets.

Names and semantics follow ``pyspark.sql.streaming.stateful_processor``: :class:`ValueState`,
:class:`ListState`, :class:`MapState` (values are tuples of the variable's schema, map keys
tuples of the user key schema), each with an optional ``ttlDurationMs`` (ProcessingTime mode
only, as in Spark: a value updated in a batch expires at that batch's processing time plus the
TTL and is not returned from a batch whose time is at or past it); the handle's
``registerTimer``/``deleteTimer``/``listTimers`` (not in time mode None) and ``deleteIfExists``.
Every call acts on the *implicit key*: the grouping key the processor is being called for.

Per key group, one persisted map per variable, so a checkpoint writes only the entries that
changed (the object space's differential checkpoints):

- ``tws/value/<name>``: key -> ``[row, expiry]``;
- ``tws/list/<name>``: key -> ``[[row, expiry], ...]``;
- ``tws/map/<name>``: ``key TAB user key`` -> ``[row, expiry]`` (one entry per map entry: a
  changed map entry writes that entry only);
- ``tws/timers``: key -> the sorted expiry timestamps of its timers,

a key being the compact JSON list of its values (no raw TAB in it), ``expiry`` null without a
TTL. Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from locality.spark.state.objectspace import JSON, KeyGroup, ObjectSpace, PersistedMap
from locality.spark.state.schema import Field, check_state, parse_schema, to_python

__all__ = [
    "TIME_MODES",
    "ListState",
    "MapState",
    "ProcessorContext",
    "ProcessorUsageError",
    "StateHandle",
    "ValueState",
    "key_text",
]

#: The time modes a processor may run in (case-insensitive, as Spark's ``timeMode`` strings).
TIME_MODES = ("None", "ProcessingTime", "EventTime")
TIMERS = "tws/timers"
_SEP = "\t"


class ProcessorUsageError(RuntimeError):
    """The processor used the handle in a way Spark (or affinity) does not allow."""


def key_text(key: Sequence[Any]) -> str:
    """A key as its compact JSON list (``(3, "a")`` -> ``[3,"a"]``)."""
    return json.dumps([to_python(v) for v in key], separators=(",", ":"))


@dataclass
class ProcessorContext:
    """Where the state variables act: the space, the implicit key, the batch's times."""

    space: ObjectSpace | None  # None: the driver's check of ``init`` (no state)
    time_mode: str
    batch_time_ms: int = -1
    watermark_ms: int = -1
    group_id: int = -1
    key: str | None = None  # the implicit key's text
    _map_index: dict[tuple[int, str], dict[str, set[str]]] = field(default_factory=dict)

    def group(self) -> KeyGroup:
        if self.space is None or self.key is None:
            raise ProcessorUsageError(
                "state variables can be read and written only in handleInputRows, "
                "handleExpiredTimer and handleInitialState (there is no grouping key in init)"
            )
        return self.space.group(self.group_id)

    def current(self) -> str:
        self.group()
        assert self.key is not None
        return self.key

    def objects(self, name: str) -> PersistedMap:
        return self.group().get_map(name, create=True)

    def expired(self, expiry: JSON) -> bool:
        return isinstance(expiry, int) and self.batch_time_ms >= expiry

    def map_keys(self, name: str) -> dict[str, set[str]]:
        """The map variable's entries by grouping key in the current key group (built once a
        batch, kept up to date by :class:`MapState`)."""
        index_key = (self.group_id, name)
        index = self._map_index.get(index_key)
        if index is None:
            index = {}
            for entry in self.objects(name):
                index.setdefault(entry.split(_SEP, 1)[0], set()).add(entry)
            self._map_index[index_key] = index
        return index

    def forget_map(self, name: str) -> None:
        for index_key in [k for k in self._map_index if k[1] == name]:
            del self._map_index[index_key]


class _Variable:
    def __init__(self, context: ProcessorContext, name: str, ttl_ms: int | None) -> None:
        self._context = context
        self._name = name
        self._ttl_ms = ttl_ms

    def _expiry(self) -> int | None:
        if self._ttl_ms is None:
            return None
        return self._context.batch_time_ms + self._ttl_ms


class ValueState(_Variable):
    """One value per grouping key (pyspark's ``ValueState``)."""

    def __init__(
        self, context: ProcessorContext, name: str, fields: tuple[Field, ...], ttl: int | None
    ) -> None:
        super().__init__(context, f"tws/value/{name}", ttl)
        self._fields = fields

    def exists(self) -> bool:
        return self.get() is not None

    def get(self) -> tuple[Any, ...] | None:
        stored = self._context.objects(self._name).get(self._context.current())
        if not isinstance(stored, list) or self._context.expired(stored[1]):
            return None
        return tuple(stored[0]) if isinstance(stored[0], list) else None

    def update(self, newValue: tuple[Any, ...]) -> None:
        row = check_state(newValue, self._fields)
        self._context.objects(self._name)[self._context.current()] = [row, self._expiry()]

    def clear(self) -> None:
        self._context.objects(self._name).pop(self._context.current(), None)


class ListState(_Variable):
    """A list of values per grouping key (pyspark's ``ListState``); a TTL applies per element."""

    def __init__(
        self, context: ProcessorContext, name: str, fields: tuple[Field, ...], ttl: int | None
    ) -> None:
        super().__init__(context, f"tws/list/{name}", ttl)
        self._fields = fields

    def _live(self) -> list[list[JSON]]:
        stored = self._context.objects(self._name).get(self._context.current())
        items = stored if isinstance(stored, list) else []
        return [i for i in items if isinstance(i, list) and not self._context.expired(i[1])]

    def exists(self) -> bool:
        return bool(self._live())

    def get(self) -> Iterator[tuple[Any, ...]]:
        return iter([tuple(i[0]) for i in self._live() if isinstance(i[0], list)])

    def put(self, newState: list[tuple[Any, ...]]) -> None:
        self._store([self._item(v) for v in newState])

    def appendValue(self, newState: tuple[Any, ...]) -> None:
        self._store([*self._live(), self._item(newState)])

    def appendList(self, newState: list[tuple[Any, ...]]) -> None:
        self._store([*self._live(), *(self._item(v) for v in newState)])

    def clear(self) -> None:
        self._context.objects(self._name).pop(self._context.current(), None)

    def _item(self, value: tuple[Any, ...]) -> list[JSON]:
        return [check_state(value, self._fields), self._expiry()]

    def _store(self, items: list[list[JSON]]) -> None:
        objects = self._context.objects(self._name)
        if items:
            objects[self._context.current()] = list(items)
        else:
            objects.pop(self._context.current(), None)


class MapState(_Variable):
    """A map per grouping key (pyspark's ``MapState``); a TTL applies per entry. Each entry is
    one entry of the persisted map: changing it checkpoints that entry only."""

    def __init__(
        self,
        context: ProcessorContext,
        name: str,
        key_fields: tuple[Field, ...],
        value_fields: tuple[Field, ...],
        ttl: int | None,
    ) -> None:
        super().__init__(context, f"tws/map/{name}", ttl)
        self._key_fields = key_fields
        self._value_fields = value_fields

    def _entry(self, key: tuple[Any, ...]) -> str:
        user = json.dumps(check_state(key, self._key_fields), separators=(",", ":"))
        return f"{self._context.current()}{_SEP}{user}"

    def _live(self) -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        objects = self._context.objects(self._name)
        found = []
        for entry in sorted(self._context.map_keys(self._name).get(self._context.current(), ())):
            stored = objects.get(entry)
            if isinstance(stored, list) and not self._context.expired(stored[1]):
                user = json.loads(entry.split(_SEP, 1)[1])
                found.append((tuple(user), tuple(stored[0])))  # type: ignore[arg-type]
        return found

    def exists(self) -> bool:
        return bool(self._live())

    def getValue(self, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        stored = self._context.objects(self._name).get(self._entry(key))
        if not isinstance(stored, list) or self._context.expired(stored[1]):
            return None
        return tuple(stored[0]) if isinstance(stored[0], list) else None

    def containsKey(self, key: tuple[Any, ...]) -> bool:
        return self.getValue(key) is not None

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:
        entry = self._entry(key)
        row = check_state(value, self._value_fields)
        self._context.objects(self._name)[entry] = [row, self._expiry()]
        self._context.map_keys(self._name).setdefault(self._context.current(), set()).add(entry)

    def iterator(self) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        return iter(self._live())

    def keys(self) -> Iterator[tuple[Any, ...]]:
        return iter([k for k, _ in self._live()])

    def values(self) -> Iterator[tuple[Any, ...]]:
        return iter([v for _, v in self._live()])

    def removeKey(self, key: tuple[Any, ...]) -> None:
        entry = self._entry(key)
        self._context.objects(self._name).pop(entry, None)
        self._context.map_keys(self._name).get(self._context.current(), set()).discard(entry)

    def clear(self) -> None:
        objects = self._context.objects(self._name)
        for entry in self._context.map_keys(self._name).pop(self._context.current(), set()):
            objects.pop(entry, None)


class StateHandle:
    """The handle ``StatefulProcessor.init`` gets (pyspark's ``StatefulProcessorHandle``)."""

    def __init__(self, context: ProcessorContext) -> None:
        self._context = context
        self.in_init = True
        self.ttl_names: list[str] = []  # the persisted maps whose entries carry a TTL

    def _ttl(self, name: str, ttl: int | None, stored: str) -> int | None:
        if not self.in_init:
            raise ProcessorUsageError(f"state variable {name!r}: declare state variables in init")
        if ttl is None:
            return None
        if self._context.time_mode.lower() != "processingtime":
            raise ProcessorUsageError(
                f"state variable {name!r}: a TTL needs timeMode 'ProcessingTime' (as in Spark), "
                f"the query runs in {self._context.time_mode!r}"
            )
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
            raise ProcessorUsageError(f"state variable {name!r}: ttlDurationMs must be > 0")
        self.ttl_names.append(stored)
        return ttl

    def getValueState(
        self, stateName: str, schema: Any, ttlDurationMs: int | None = None
    ) -> ValueState:
        fields = parse_schema(schema, f"value state {stateName!r}")
        ttl = self._ttl(stateName, ttlDurationMs, f"tws/value/{stateName}")
        return ValueState(self._context, stateName, fields, ttl)

    def getListState(
        self, stateName: str, schema: Any, ttlDurationMs: int | None = None
    ) -> ListState:
        fields = parse_schema(schema, f"list state {stateName!r}")
        ttl = self._ttl(stateName, ttlDurationMs, f"tws/list/{stateName}")
        return ListState(self._context, stateName, fields, ttl)

    def getMapState(
        self,
        stateName: str,
        userKeySchema: Any,
        valueSchema: Any,
        ttlDurationMs: int | None = None,
    ) -> MapState:
        keys = parse_schema(userKeySchema, f"map state {stateName!r} key")
        values = parse_schema(valueSchema, f"map state {stateName!r} value")
        ttl = self._ttl(stateName, ttlDurationMs, f"tws/map/{stateName}")
        return MapState(self._context, stateName, keys, values, ttl)

    def _timers(self, what: str) -> PersistedMap:
        if self._context.time_mode.lower() == "none":
            raise ProcessorUsageError(f"{what}: timers need timeMode ProcessingTime or EventTime")
        return self._context.objects(TIMERS)

    def registerTimer(self, expiryTimestampMs: int) -> None:
        timers = self._timers("registerTimer")
        key = self._context.current()
        held = timers.get(key)
        current = set(held) if isinstance(held, list) else set()
        timers[key] = sorted(current | {int(expiryTimestampMs)})  # type: ignore[type-var]

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        timers = self._timers("deleteTimer")
        key = self._context.current()
        held = timers.get(key)
        if isinstance(held, list) and expiryTimestampMs in held:
            left = [t for t in held if t != expiryTimestampMs]
            if left:
                timers[key] = left
            else:
                del timers[key]

    def listTimers(self) -> Iterator[int]:
        held = self._timers("listTimers").get(self._context.current())
        return iter([t for t in held if isinstance(t, int)] if isinstance(held, list) else [])

    def deleteIfExists(self, stateName: str) -> None:
        """Drop the variable ``stateName`` (every kind, every key) from this task's state."""
        space = self._context.space
        if space is None:
            return
        for kind in ("value", "list", "map"):
            name = f"tws/{kind}/{stateName}"
            for group_id in space.key_groups:
                group = space.group(group_id)
                if name in group:
                    group.delete(name)
            self._context.forget_map(name)
