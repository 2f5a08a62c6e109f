"""Job-model format 2: the same model as format 1, as columns (what the store writes).

Format 1 (:mod:`metadata.serde`) spells every task and partition out as an object; at a million
tasks that is 160 MB of JSON and millions of objects to build and parse. Format 2 keeps the
envelope of format 1 and stores the tasks as parallel columns, with a string table of streams::

    {"format": 2, "version": 7, "run_id": "r1", "grouper": "host-affinity", "config": {},
     "streams": [["kafka", "events"]],
     "containers": [{"processor_id": "p-1", "location_id": "zone-a/node-1", "tasks": 2}],
     "tasks": {"name": ["Partition 0", "Partition 3"], "changelog_partition": [0, 3],
               "partitions": [1, 1]},
     "partitions": {"stream": [0, 0], "partition": [0, 3], "key_bucket": [-1, -1]}}

- ``containers`` in order, each owning the next ``tasks`` rows of the task columns, then (when
  it has standby replicas) the next ``standby_tasks`` rows: its standbys, same columns;
- task row i has ``tasks.partitions[i]`` partitions: the next rows of the partition columns,
  whose ``stream`` is an index into ``streams`` (pairs ``[system, stream]``).

Writers sort containers by processor id and each task's partitions, and keep a container's tasks in
the model's order (sorting a million names cost a third of the encoding): models built in the same
order encode to the same bytes. Readers ignore unknown fields; a missing ``run_id``, ``grouper``,
``config`` or ``location_id`` reads as in format 1, and so does a missing ``changelog_partition``
or ``key_bucket`` column (all -1). Anything else wrong raises
:class:`~metadata.errors.JobModelFormatError` naming the field, e.g. ``partitions.partition[3]:
must be >= 0, got -1`` (the checks: :mod:`metadata.column_checks`). A container view
(:mod:`metadata.zk.chunks`) is a format-2 document with some of the containers (and every
stream).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate, chain, pairwise, repeat
from operator import attrgetter, itemgetter
from typing import Any

from metadata.bulk import collector_paused
from metadata.column_checks import Columns, Entry, checked_body, duplicate_task
from metadata.errors import JobModelFormatError
from metadata.fields import JobModelDocument, as_obj, as_str
from metadata.fields import field as get
from metadata.model import (
    ContainerModel,
    FrozenMap,
    JobModel,
    SystemStreamPartition,
    TaskModel,
)

__all__ = [
    "COLUMNS_FORMAT",
    "ModelColumns",
    "container_from_columns",
    "document_from_columns",
    "task_columns",
    "tasks_from_columns",
]

COLUMNS_FORMAT = 2


# ---------------------------------------------------------------- writing


@dataclass(slots=True)
class _Block:
    """One container's rows of the task and partition columns."""

    location_id: str | None
    standbys: int = 0  # the last rows are the container's standby replicas
    names: list[str] = field(default_factory=list)
    changelog: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    streams: list[int] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    buckets: list[int] = field(default_factory=list)


class ModelColumns:
    """A job model encoded as columns, container by container: :meth:`document` is the whole
    format-2 document, or the one of some of its containers (a container view)."""

    def __init__(self, model: JobModel, *, run_id: str = "", grouper: str = "") -> None:
        self.version = model.version
        self._head: dict[str, Any] = {
            "format": COLUMNS_FORMAT,
            "version": model.version,
            "run_id": run_id,
            "grouper": grouper,
            "config": dict(sorted(model.config.items())),
        }
        self._streams: dict[tuple[str, str], int] = {}
        with collector_paused():  # a million (name, task) pairs would set it off
            self.blocks: dict[str, _Block] = {
                pid: self._encode(container) for pid, container in sorted(model.containers.items())
            }

    def _encode(self, container: ContainerModel) -> _Block:
        items = list(container.tasks.items())  # in the model's order: sorting cost 1/3
        items += container.standby_tasks.items()
        block = _rows(items, self._streams)
        block.location_id, block.standbys = container.location_id, len(container.standby_tasks)
        return block

    def document(self, processor_ids: Collection[str] | None = None) -> dict[str, Any]:
        """The format-2 document of every container, or of ``processor_ids`` only (sorted)."""
        pids = list(self.blocks) if processor_ids is None else sorted(processor_ids)
        blocks = [self.blocks[pid] for pid in pids]

        def joined(column: str) -> list[Any]:
            return list(chain.from_iterable(map(attrgetter(column), blocks)))

        return {
            **self._head,
            "streams": [list(key) for key in self._streams],
            "containers": [
                _container_entry(pid, block) for pid, block in zip(pids, blocks, strict=True)
            ],
            "tasks": {
                "name": joined("names"),
                "changelog_partition": joined("changelog"),
                "partitions": joined("counts"),
            },
            "partitions": {
                "stream": joined("streams"),
                "partition": joined("partitions"),
                "key_bucket": joined("buckets"),
            },
        }


def _rows(items: list[tuple[str, TaskModel]], streams: dict[tuple[str, str], int]) -> _Block:
    """The rows of ``items`` (name, task), built with ``map`` over attribute getters (C-level
    passes); new streams join the table ``streams`` in order."""
    tasks = list(map(itemgetter(1), items))
    sets = list(map(attrgetter("partitions"), tasks))
    counts = list(map(len, sets))
    if counts.count(1) == len(counts):
        ssps = list(chain.from_iterable(sets))
    else:
        ssps = list(chain.from_iterable(map(sorted, sets)))
    return _Block(
        None,
        names=list(map(itemgetter(0), items)),
        changelog=list(map(attrgetter("changelog_partition"), tasks)),
        counts=counts,
        streams=_stream_column(ssps, streams),
        partitions=list(map(attrgetter("partition"), ssps)),
        buckets=list(map(attrgetter("key_bucket"), ssps)),
    )


def _stream_column(
    ssps: list[SystemStreamPartition], streams: dict[tuple[str, str], int]
) -> list[int]:
    """The stream index of each partition (new streams join the table in order)."""
    systems = list(map(attrgetter("system"), ssps))
    names = list(map(attrgetter("stream"), ssps))
    if ssps and systems.count(systems[0]) == len(ssps) == names.count(names[0]):
        key = (systems[0], names[0])  # one stream: the common case
        return [streams.setdefault(key, len(streams))] * len(ssps)
    keys = list(zip(systems, names, strict=True))
    for key in dict.fromkeys(keys):
        streams.setdefault(key, len(streams))
    return list(map(streams.__getitem__, keys))


def _container_entry(pid: str, block: _Block) -> dict[str, Any]:
    entry = {
        "processor_id": pid,
        "location_id": block.location_id,
        "tasks": len(block.names) - block.standbys,
    }
    return {**entry, "standby_tasks": block.standbys} if block.standbys else entry


def task_columns(tasks: Iterable[TaskModel]) -> Columns:
    """``tasks`` as format 2's task and partition columns, in order, with no document around
    them: for another wire than the store's (the grouper's process). :func:`tasks_from_columns`
    reads them back."""
    streams: dict[tuple[str, str], int] = {}
    with collector_paused():
        block = _rows([(task.name, task) for task in tasks], streams)
    return Columns(
        streams=list(streams),
        names=block.names,
        changelog=block.changelog,
        counts=block.counts,
        stream=block.streams,
        partition=block.partitions,
        bucket=block.buckets,
    )


# ---------------------------------------------------------------- reading


def tasks_from_columns(columns: Columns) -> list[TaskModel]:
    """The tasks of :func:`task_columns`, equal and in order. The columns are not checked as a
    document's are (:func:`~metadata.column_checks.checked_body`): they must come from
    :func:`task_columns`. Partition columns shorter than the counts say, or a name listed
    twice, raise ``ValueError``."""
    with collector_paused():
        tasks = _tasks(columns, 0, len(columns.names), 0)
    if len(tasks) != len(columns.names):
        raise ValueError("a task name is listed twice")
    return list(tasks.values())


def _tasks(columns: Columns, first: int, end: int, first_partition: int) -> dict[str, TaskModel]:
    """Task rows ``first`` to ``end`` (their partitions from row ``first_partition``). Built with
    ``map`` (no Python loop per task): the cost is the model's own constructors."""
    names = columns.names[first:end]
    counts = columns.counts[first:end]
    last = first_partition + sum(counts)
    rows = slice(first_partition, last)
    table, stream = columns.streams, columns.stream[rows]
    if len(table) == 1:
        systems: Iterable[str] = repeat(table[0][0])
        streams: Iterable[str] = repeat(table[0][1])
    else:
        systems = [table[i][0] for i in stream]
        streams = [table[i][1] for i in stream]
    ssps = map(
        SystemStreamPartition, systems, streams, columns.partition[rows], columns.bucket[rows]
    )
    if counts.count(1) == len(counts):
        partitions: Iterable[frozenset[SystemStreamPartition]] = map(
            frozenset, zip(ssps, strict=True)
        )
    else:
        every = list(ssps)
        starts = list(accumulate(counts, initial=0))
        partitions = [frozenset(every[a:b]) for a, b in pairwise(starts)]
    tasks = map(TaskModel, names, partitions, columns.changelog[first:end])
    return dict(zip(names, tasks, strict=True))


def _container(columns: Columns, entry: Entry, first: int, row: int) -> ContainerModel:
    """``entry``'s container from its rows (from task row ``first``, partition row ``row``)."""
    middle = first + entry.active
    tasks = _tasks(columns, first, middle, row)
    standbys: dict[str, TaskModel] = {}
    if entry.standby:
        after = row + sum(columns.counts[first:middle])
        standbys = _tasks(columns, middle, middle + entry.standby, after)
    try:
        return ContainerModel(entry.pid, entry.location, FrozenMap(tasks), FrozenMap(standbys))
    except ValueError as exc:
        raise JobModelFormatError(f"containers.{entry.pid}", str(exc)) from None


def _active_names(columns: Columns, containers: list[Entry]) -> list[str]:
    """The names of the active rows (a task is active on one processor at most)."""
    if not any(entry.standby for entry in containers):
        return columns.names
    names: list[str] = []
    first = 0
    for entry in containers:
        names += columns.names[first : first + entry.active]
        first += entry.rows
    return names


def document_from_columns(obj: Mapping[str, Any], version: int) -> JobModelDocument:
    """Decode a format-2 document (parsed from JSON, its format and ``version`` checked)."""
    run_id = as_str(get(obj, "run_id", "", default=""), "run_id")
    grouper = as_str(get(obj, "grouper", "", default=""), "grouper")
    raw_config = as_obj(get(obj, "config", "", default={}), "config")
    config = {k: as_str(v, f"config.{k}") for k, v in raw_config.items()}
    containers, columns = checked_body(obj)
    names = _active_names(columns, containers)
    if len(set(names)) != len(names):
        duplicate_task(names, containers)
    models: dict[str, ContainerModel] = {}
    first = row = 0
    with collector_paused():
        for entry in containers:
            models[entry.pid] = _container(columns, entry, first, row)
            row += sum(columns.counts[first : first + entry.rows])
            first += entry.rows
    model = JobModel(version, FrozenMap(models), FrozenMap(config))
    return JobModelDocument(model, run_id, grouper)


def container_from_columns(obj: Mapping[str, Any], processor_id: str) -> ContainerModel | None:
    """``processor_id``'s container of a format-2 document (None if it has none); the other
    containers' rows are checked but not decoded."""
    containers, columns = checked_body(obj)
    first = 0
    for entry in containers:
        if entry.pid == processor_id:
            names = columns.names[first : first + entry.active]
            if len(set(names)) != len(names):
                duplicate_task(names, [entry])
            with collector_paused():
                return _container(columns, entry, first, sum(columns.counts[:first]))
        first += entry.rows
    return None
