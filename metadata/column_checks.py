"""Reading a format-2 document (:mod:`metadata.columns`) checked: its containers with their rows
and its columns, each the right type and length and within bounds. Anything wrong raises
:class:`~metadata.errors.JobModelFormatError` naming the field, e.g. ``partitions.partition[3]:
must be >= 0, got -1``; :mod:`metadata.columns` builds the model from what passes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from metadata.errors import JobModelFormatError
from metadata.fields import as_int, as_obj, as_str, describe
from metadata.fields import field as get

__all__ = ["Columns", "Entry", "checked_body", "duplicate_task"]


class Entry(NamedTuple):
    """A container of the document: its processor, location and rows (actives, then standbys)."""

    pid: str
    location: str | None
    active: int
    standby: int = 0

    @property
    def rows(self) -> int:
        return self.active + self.standby


def _column(
    obj: Mapping[str, Any], key: str, path: str, kind: type, rows: int, *, optional: bool = False
) -> list[Any]:
    """Column ``key`` of ``obj``: a list of ``rows`` values of ``kind``; an ``optional`` one
    may be missing: then it is all -1 (the format-1 default)."""
    where = f"{path}.{key}"
    if optional and key not in obj:
        return [-1] * rows
    value = get(obj, key, path)
    if type(value) is not list:
        raise JobModelFormatError(where, f"expected a list, got {describe(value)}")
    if not all(type(item) is kind for item in value):
        index, item = next((i, v) for i, v in enumerate(value) if type(v) is not kind)
        expected = "an integer" if kind is int else "a string"
        raise JobModelFormatError(f"{where}[{index}]", f"expected {expected}, got {describe(item)}")
    if len(value) != rows:
        raise JobModelFormatError(where, f"has {len(value)} rows, expected {rows}")
    return value


def _at_least(column: list[int], floor: int, where: str) -> None:
    if column and min(column) < floor:
        index = next(i for i, v in enumerate(column) if v < floor)
        raise JobModelFormatError(f"{where}[{index}]", f"must be >= {floor}, got {column[index]}")


@dataclass(frozen=True, slots=True)
class Columns:
    """The columns of a format-2 document (checked, when read from one), or of a list of tasks
    (:func:`metadata.columns.task_columns`)."""

    streams: list[tuple[str, str]]
    names: list[str]
    changelog: list[int]
    counts: list[int]
    stream: list[int]
    partition: list[int]
    bucket: list[int]


def _streams(obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    raw = get(obj, "streams", "")
    if type(raw) is not list:
        raise JobModelFormatError("streams", f"expected a list, got {describe(raw)}")
    table = []
    for i, pair in enumerate(raw):
        if type(pair) is not list or len(pair) != 2:
            raise JobModelFormatError(
                f"streams[{i}]", f"expected [system, stream], got {describe(pair)}"
            )
        table.append((as_str(pair[0], f"streams[{i}][0]"), as_str(pair[1], f"streams[{i}][1]")))
    return table


def _columns(obj: Mapping[str, Any], task_rows: int) -> Columns:
    streams = _streams(obj)
    tasks = as_obj(get(obj, "tasks", ""), "tasks")
    names = _column(tasks, "name", "tasks", str, task_rows)
    if "" in names:
        raise JobModelFormatError(f"tasks.name[{names.index('')}]", "task name must not be empty")
    changelog = _column(tasks, "changelog_partition", "tasks", int, task_rows, optional=True)
    counts = _column(tasks, "partitions", "tasks", int, task_rows)
    _at_least(counts, 0, "tasks.partitions")
    rows = sum(counts)
    partitions = as_obj(get(obj, "partitions", ""), "partitions")
    stream = _column(partitions, "stream", "partitions", int, rows)
    _at_least(stream, 0, "partitions.stream")
    if stream and max(stream) >= len(streams):
        index = next(i for i, v in enumerate(stream) if v >= len(streams))
        raise JobModelFormatError(
            f"partitions.stream[{index}]", f"no stream {stream[index]} (there are {len(streams)})"
        )
    partition = _column(partitions, "partition", "partitions", int, rows)
    _at_least(partition, 0, "partitions.partition")
    bucket = _column(partitions, "key_bucket", "partitions", int, rows, optional=True)
    _at_least(bucket, -1, "partitions.key_bucket")
    return Columns(streams, names, changelog, counts, stream, partition, bucket)


def _containers(obj: Mapping[str, Any]) -> list[Entry]:
    """Each container's processor id, location id and rows, checked."""
    raw = get(obj, "containers", "")
    if type(raw) is not list:
        raise JobModelFormatError("containers", f"expected a list, got {describe(raw)}")
    found: list[Entry] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        path = f"containers[{i}]"
        container = as_obj(entry, path)
        pid = as_str(get(container, "processor_id", path), f"{path}.processor_id")
        if not pid or pid in seen:
            problem = "must not be empty" if not pid else f"{pid!r} appears twice"
            raise JobModelFormatError(f"{path}.processor_id", problem)
        seen.add(pid)
        location = as_str(
            get(container, "location_id", path, default=None), f"{path}.location_id", nullable=True
        )
        rows = [
            as_int(get(container, key, path, default=default), f"{path}.{key}")
            for key, default in (("tasks", ...), ("standby_tasks", 0))
        ]
        for key, count in zip(("tasks", "standby_tasks"), rows, strict=True):
            if count < 0:
                raise JobModelFormatError(f"{path}.{key}", f"must be >= 0, got {count}")
        found.append(Entry(pid, location, *rows))
    return found


def checked_body(obj: Mapping[str, Any]) -> tuple[list[Entry], Columns]:
    """The containers of ``obj`` and its columns (as many task rows as the containers have)."""
    containers = _containers(obj)
    return containers, _columns(obj, sum(entry.rows for entry in containers))


def duplicate_task(names: list[str], containers: list[Entry]) -> None:
    """Raise for the first active task named twice (``names``: the active rows in order)."""
    owners: list[str] = [entry.pid for entry in containers for _ in range(entry.active)]
    seen: dict[str, str] = {}
    for index, name in enumerate(names):
        if name in seen:
            raise JobModelFormatError(
                f"tasks.name[{index}]", f"task {name!r} also assigned to {seen[name]!r}"
            )
        seen[name] = owners[index]
