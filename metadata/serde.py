"""Job-model JSON, format 1 (see docs/design.md and DESIGN.md "Job-model format"); readers
also accept format 2, the columns the store writes (:mod:`metadata.columns`).

Writers emit every field, except a container's ``standby_tasks`` (same shape as ``tasks``), written
only when it is not empty so that models without replicas read and write as before. Readers are
lenient where the format allows (unknown fields are ignored, a partition without ``key_bucket`` is
the whole partition, a legacy ``container_id`` is ignored, a missing ``standby_tasks`` is none)
and strict everywhere else: malformed input raises :class:`JobModelFormatError` naming the field
path and the problem, e.g. ``containers.p-1.tasks.Partition 0.partitions[0].partition: expected
an integer, got 'x'``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from metadata.columns import COLUMNS_FORMAT, container_from_columns, document_from_columns
from metadata.errors import JobModelFormatError
from metadata.fields import JobModelDocument
from metadata.fields import as_int as _int
from metadata.fields import as_obj as _obj
from metadata.fields import as_str as _str
from metadata.fields import describe as _describe
from metadata.fields import field as _get
from metadata.model import (
    ContainerModel,
    FrozenMap,
    JobModel,
    SystemStreamPartition,
    TaskModel,
)

__all__ = [
    "FORMAT",
    "FORMATS",
    "JobModelDocument",
    "JobModelFormatError",
    "dump_job_model",
    "job_model_from_dict",
    "job_model_to_dict",
    "load_container",
    "load_job_model",
    "load_job_model_document",
    "task_from_dict",
    "task_to_dict",
]

FORMAT = 1
#: The formats this reader accepts: 1 (this module) and 2 (:mod:`metadata.columns`).
FORMATS = (FORMAT, COLUMNS_FORMAT)


# ---------------------------------------------------------------- writing


def ssp_to_dict(ssp: SystemStreamPartition) -> dict[str, Any]:
    return {
        "system": ssp.system,
        "stream": ssp.stream,
        "partition": ssp.partition,
        "key_bucket": ssp.key_bucket,
    }


def task_to_dict(task: TaskModel) -> dict[str, Any]:
    return {
        "name": task.name,
        "changelog_partition": task.changelog_partition,
        "partitions": [ssp_to_dict(s) for s in sorted(task.partitions)],
    }


def job_model_to_dict(model: JobModel, *, run_id: str = "", grouper: str = "") -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": model.version,
        "run_id": run_id,
        "grouper": grouper,
        "config": dict(sorted(model.config.items())),
        "containers": {pid: _container_to_dict(c) for pid, c in sorted(model.containers.items())},
    }


def _container_to_dict(container: ContainerModel) -> dict[str, Any]:
    written: dict[str, Any] = {
        "processor_id": container.processor_id,
        "location_id": container.location_id,
        "tasks": {name: task_to_dict(t) for name, t in sorted(container.tasks.items())},
    }
    if container.standby_tasks:
        written["standby_tasks"] = {
            name: task_to_dict(t) for name, t in sorted(container.standby_tasks.items())
        }
    return written


def dump_job_model(model: JobModel, *, run_id: str = "", grouper: str = "") -> bytes:
    """Serialise ``model`` as compact UTF-8 JSON (deterministic: keys sorted by name)."""
    return orjson.dumps(job_model_to_dict(model, run_id=run_id, grouper=grouper))


# ---------------------------------------------------------------- reading


def _ssp_from_dict(value: Any, path: str) -> SystemStreamPartition:
    fast = _fast_ssp(value)
    if fast is not None:
        return fast
    obj = _obj(value, path)
    system = _str(_get(obj, "system", path), f"{path}.system")
    stream = _str(_get(obj, "stream", path), f"{path}.stream")
    partition = _int(_get(obj, "partition", path), f"{path}.partition")
    key_bucket = _int(_get(obj, "key_bucket", path, default=-1), f"{path}.key_bucket")
    try:
        return SystemStreamPartition(system, stream, partition, key_bucket)
    except ValueError as exc:
        raise JobModelFormatError(path, str(exc)) from None


def _fast_ssp(value: Any) -> SystemStreamPartition | None:
    """A well-formed partition entry, or None (then the slow path names the problem)."""
    if type(value) is not dict:
        return None
    system, stream = value.get("system"), value.get("stream")
    partition, bucket = value.get("partition"), value.get("key_bucket", -1)
    if (
        type(system) is str
        and type(stream) is str
        and type(partition) is int
        and type(bucket) is int
        and partition >= 0
        and bucket >= -1
    ):
        return SystemStreamPartition(system, stream, partition, bucket)
    return None


def task_from_dict(value: Any, path: str = "task") -> TaskModel:
    """Decode one TaskModel (as written by :func:`task_to_dict`)."""
    if type(value) is dict:  # fast path: no error paths are formatted unless something is wrong
        name, changelog = value.get("name"), value.get("changelog_partition", -1)
        raw = value.get("partitions", [])
        if type(name) is str and name and type(changelog) is int and type(raw) is list:
            fast = [_fast_ssp(p) for p in raw]
            if None not in fast:
                return TaskModel(name, frozenset(fast), changelog)  # type: ignore[arg-type]
    obj = _obj(value, path)
    name = _str(_get(obj, "name", path), f"{path}.name")
    changelog = _int(
        _get(obj, "changelog_partition", path, default=-1), f"{path}.changelog_partition"
    )
    raw_partitions = _get(obj, "partitions", path, default=[])
    if not isinstance(raw_partitions, list):
        raise JobModelFormatError(
            f"{path}.partitions", f"expected a list, got {_describe(raw_partitions)}"
        )
    partitions = frozenset(
        _ssp_from_dict(p, f"{path}.partitions[{i}]") for i, p in enumerate(raw_partitions)
    )
    try:
        return TaskModel(name, partitions, changelog)
    except ValueError as exc:
        raise JobModelFormatError(path, str(exc)) from None


def _container_from_dict(pid: str, value: Any, path: str) -> ContainerModel:
    obj = _obj(value, path)
    processor_id = _str(_get(obj, "processor_id", path, default=pid), f"{path}.processor_id")
    if processor_id != pid:
        raise JobModelFormatError(
            f"{path}.processor_id", f"{processor_id!r} differs from its key {pid!r}"
        )
    location = _str(
        _get(obj, "location_id", path, default=None), f"{path}.location_id", nullable=True
    )
    tasks = _tasks_from_dict(obj, "tasks", path)
    standbys = _tasks_from_dict(obj, "standby_tasks", path)
    try:
        return ContainerModel(processor_id, location, tasks, standbys)
    except ValueError as exc:
        raise JobModelFormatError(path, str(exc)) from None


def _tasks_from_dict(obj: Mapping[str, Any], key: str, path: str) -> FrozenMap[str, TaskModel]:
    """A container's ``tasks`` or ``standby_tasks`` (absent: none)."""
    raw_tasks = _obj(_get(obj, key, path, default={}), f"{path}.{key}")
    tasks: dict[str, TaskModel] = {}
    for name, raw in raw_tasks.items():
        task = task_from_dict(raw, f"{path}.{key}.{name}")
        if task.name != name:
            raise JobModelFormatError(
                f"{path}.{key}.{name}.name", f"{task.name!r} differs from its key"
            )
        tasks[name] = task
    return FrozenMap(tasks)


def _envelope(value: Any) -> tuple[Mapping[str, Any], int, int]:
    """The document as an object, its format and its version, once both are checked."""
    obj = _obj(value, "")
    fmt = _int(_get(obj, "format", ""), "format")
    if fmt not in FORMATS:
        known = " and ".join(map(str, FORMATS))
        raise JobModelFormatError("format", f"unsupported format {fmt} (this reader knows {known})")
    version = _int(_get(obj, "version", ""), "version")
    if version < 0:
        raise JobModelFormatError("version", f"must be >= 0, got {version}")
    return obj, fmt, version


def job_model_from_dict(value: Any) -> JobModelDocument:
    """Decode a format-1 or format-2 document (already parsed from JSON)."""
    obj, fmt, version = _envelope(value)
    if fmt == COLUMNS_FORMAT:
        return document_from_columns(obj, version)
    run_id = _str(_get(obj, "run_id", "", default=""), "run_id")
    grouper = _str(_get(obj, "grouper", "", default=""), "grouper")
    raw_config = _obj(_get(obj, "config", "", default={}), "config")
    config = {k: _str(v, f"config.{k}") for k, v in raw_config.items()}
    raw_containers = _obj(_get(obj, "containers", ""), "containers")
    containers: dict[str, ContainerModel] = {}
    seen: dict[str, str] = {}
    for pid, raw in raw_containers.items():
        container = _container_from_dict(pid, raw, f"containers.{pid}")
        for name in container.tasks:
            if name in seen:
                raise JobModelFormatError(
                    f"containers.{pid}.tasks.{name}", f"task also assigned to {seen[name]!r}"
                )
            seen[name] = pid
        containers[pid] = container
    model = JobModel(version, FrozenMap(containers), FrozenMap(config))
    return JobModelDocument(model, run_id, grouper)


def load_job_model_document(data: bytes | str) -> JobModelDocument:
    """Parse JSON bytes/text into a :class:`JobModelDocument`."""
    try:
        value = orjson.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, huge numbers
        raise JobModelFormatError("<document>", f"not valid JSON: {exc}") from None
    return job_model_from_dict(value)


def load_container(data: bytes | str, processor_id: str) -> tuple[int, ContainerModel | None]:
    """From a format-1 or format-2 document, its version and ``processor_id``'s container alone
    (None if it has none): the other containers are parsed as JSON but not decoded, so a
    processor reading a container view pays for its own tasks only."""
    try:
        value = orjson.loads(data)
    except (ValueError, RecursionError) as exc:
        raise JobModelFormatError("<document>", f"not valid JSON: {exc}") from None
    obj, fmt, version = _envelope(value)
    if fmt == COLUMNS_FORMAT:
        return version, container_from_columns(obj, processor_id)
    raw_containers = _obj(_get(obj, "containers", ""), "containers")
    raw = raw_containers.get(processor_id)
    if raw is None:
        return version, None
    return version, _container_from_dict(processor_id, raw, f"containers.{processor_id}")


def load_job_model(data: bytes | str) -> JobModel:
    """Parse JSON bytes/text into a :class:`JobModel`."""
    return load_job_model_document(data).model
