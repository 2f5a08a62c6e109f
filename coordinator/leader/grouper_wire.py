"""How a grouper's inputs and answer cross to its worker process, cheaply.

Pickling the model types as they are costs about a second at 10,000 tasks (every frozen,
slotted dataclass goes through Python-level reduce and ``__init__``). The job's tasks do not
change between rebalances, so the worker receives them once and keeps them. They cross as the
task and partition columns of job-model format 2 (:func:`metadata.columns.task_columns`), built
back with the garbage collector paused: at 1,000,000 tasks the hand-over took 9.1 s as a list of
tuples and takes about 4 s as columns (build, pickle, unpickle, build back). Each request then
carries the metadata as plain dicts (``task_state`` as a dict of dicts), and the answer comes back
as ``(processor id, location id, task names, standby task names)`` per container, rebuilt here
from the same task objects. Anything else (an answer
that is not a collection of ``ContainerModel`` holding the job's own tasks) travels as it is,
so the leader machine checks exactly what the grouper returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, cast

from groupers import GrouperMetadata
from metadata.bulk import collector_paused
from metadata.column_checks import Columns
from metadata.columns import task_columns, tasks_from_columns
from metadata.model import ContainerModel, FrozenMap, SystemStreamPartition, TaskModel

__all__ = [
    "decode_answer",
    "decode_metadata",
    "decode_tasks",
    "encode_answer",
    "encode_metadata",
    "encode_tasks",
]

_SSPS = "previous_task_to_ssps"
_STATE = "task_state"
_Ssp = tuple[str, str, int, int]


def encode_tasks(tasks: tuple[TaskModel, ...]) -> Columns:
    return task_columns(tasks)


def decode_tasks(columns: Columns) -> tuple[TaskModel, ...]:
    return tuple(tasks_from_columns(columns))


def _same_partitions(task: TaskModel | None, ssps: frozenset[SystemStreamPartition]) -> bool:
    return task is not None and (task.partitions is ssps or task.partitions == ssps)


def _ssps(ssps: frozenset[SystemStreamPartition]) -> list[_Ssp]:
    return [(p.system, p.stream, p.partition, p.key_bucket) for p in ssps]


def encode_metadata(metadata: GrouperMetadata, known: Mapping[str, TaskModel]) -> dict[str, Any]:
    """The metadata as plain dicts; a task's previous partitions are None when they are the
    task's own (the usual case)."""
    encoded: dict[str, Any] = {}
    for f in fields(metadata):
        value = getattr(metadata, f.name)
        if f.name == _SSPS:
            encoded[f.name] = {
                name: None if _same_partitions(known.get(name), ssps) else _ssps(ssps)
                for name, ssps in value.items()
            }
        elif f.name == _STATE:
            encoded[f.name] = {name: dict(copies.items()) for name, copies in value.items()}
        elif isinstance(value, Mapping):
            encoded[f.name] = dict(value.items())
        else:
            encoded[f.name] = value
    return encoded


def decode_metadata(encoded: dict[str, Any], known: Mapping[str, TaskModel]) -> GrouperMetadata:
    values = dict(encoded)
    values[_SSPS] = FrozenMap(
        {
            name: known[name].partitions
            if ssps is None
            else frozenset(SystemStreamPartition(*p) for p in ssps)
            for name, ssps in encoded.get(_SSPS, {}).items()
        }
    )
    return GrouperMetadata(**values)


def encode_answer(answer: object, known: Mapping[str, TaskModel]) -> tuple[str, object]:
    """``("containers", (kind, [(pid, location, names, standby names)]))`` when the answer is a
    set or list of ContainerModel holding the job's own tasks (active and standby); else
    ``("raw", answer)``."""
    try:
        if type(answer) not in (set, frozenset, list, tuple):
            return "raw", answer
        rows = []
        for container in answer:  # type: ignore[attr-defined]
            if type(container) is not ContainerModel:
                return "raw", answer
            if not _all_known(container.tasks, known) or not _all_known(
                container.standby_tasks, known
            ):
                return "raw", answer
            rows.append(
                (
                    container.processor_id,
                    container.location_id,
                    list(container.tasks),
                    list(container.standby_tasks),
                )
            )
        return "containers", (type(answer).__name__, rows)
    except Exception:  # an odd answer: the leader machine will say what is wrong with it
        return "raw", answer


def _all_known(tasks: Mapping[str, TaskModel], known: Mapping[str, TaskModel]) -> bool:
    """Every task is one of the job's own (the same object or an equal one)."""
    for name, task in tasks.items():
        mine = known.get(name)
        if mine is not task and mine != task:
            return False
    return True


def decode_answer(kind: str, payload: object, known: Mapping[str, TaskModel]) -> object:
    """The grouper's answer rebuilt from the job's own task objects; with the garbage
    collector paused (at 1,000,000 tasks: 2.2-3.0 s with it, 1.6 s without)."""
    if kind != "containers":
        return payload
    collection, rows = cast(tuple[str, list[tuple[str, str | None, list[str], list[str]]]], payload)
    with collector_paused():
        containers = [
            ContainerModel(pid, location, _named(names, known), _named(standbys, known))
            for pid, location, names, standbys in rows
        ]
        if collection in ("set", "frozenset"):
            return set(containers) if collection == "set" else frozenset(containers)
    return containers if collection == "list" else tuple(containers)


def _named(names: list[str], known: Mapping[str, TaskModel]) -> FrozenMap[str, TaskModel]:
    return FrozenMap({name: known[name] for name in names})
