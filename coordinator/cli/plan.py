"""``affinity plan --grouper NAME --input snapshot.json [--json]``: a dry run of a grouper.

The snapshot is what the leader would feed the grouper::

    {"tasks": ["Partition 0", {"name": "Partition 1", "partitions": [...]}],
     "processor_locality": {"p-1": "zone-a/host-1"},
     "task_locality": {"Partition 0": "zone-a/host-1"},
     "previous_task_to_processor": {"Partition 0": "p-1"},
     "processor_capacity": {"p-1": 4},  # optional: capacity per live processor (default 1)
     "task_state": {"Partition 0": {"p-1": 0}},  # optional: task -> {processor: lag} of copies
     "version": 6}                      # optional: the version in force (the plan is version + 1)

Tasks are names or TaskModel JSON (as in the job-model format). The plan prints what would move,
the locality kept, the balance and the standby replicas (``--option standby_replicas=1``), or
with ``--json`` the job model it would publish (standbys as each container's ``standby_tasks``).
A bad snapshot or an unknown grouper exits with code 2 and one line naming the problem; a grouper
that raises or returns an invalid answer exits with code 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.cli.common import CommandError
from groupers import GrouperError, GrouperMetadata, get_grouper, validate
from groupers.measures import tasks_kept_local, tasks_moved, tasks_with_locality
from metadata.errors import JobModelFormatError
from metadata.ids import location_id_problem, processor_id_problem
from metadata.model import FrozenMap, JobModel, TaskModel
from metadata.serde import dump_job_model, task_from_dict

__all__ = ["PlanSummary", "SnapshotError", "add_commands", "load_snapshot", "summarize"]


class SnapshotError(ValueError):
    """The snapshot file is unusable; the message names the field and the problem."""


@dataclass(frozen=True)
class Snapshot:
    tasks: list[TaskModel]
    metadata: GrouperMetadata
    version: int


def _string_map(document: Mapping[str, Any], key: str) -> dict[str, str]:
    value = document.get(key, {})
    if not isinstance(value, dict):
        raise SnapshotError(f"{key}: expected an object of strings, got {type(value).__name__}")
    for k, v in value.items():
        if not isinstance(v, str):
            raise SnapshotError(f"{key}.{k}: expected a string, got {v!r}")
    return dict(value)


def _id_map(
    document: Mapping[str, Any], key: str, values: Callable[[object], str | None]
) -> dict[str, str]:
    """An object of strings whose keys are ids (none empty, none with control characters) and
    whose values pass ``values`` (the metadata store's rule, :mod:`metadata.ids`)."""
    mapping = _string_map(document, key)
    for k, v in mapping.items():
        if not k or not k.isprintable():
            raise SnapshotError(f"{key}: {k!r} is not a usable id (empty or not printable)")
        problem = values(v)
        if problem is not None:
            raise SnapshotError(f"{key}.{k}: {problem}")
    return mapping


def _count_map(document: Mapping[str, Any], key: str) -> dict[str, int]:
    """An object of whole numbers >= 0 (``key`` names it in errors)."""
    value = document.get(key, {})
    if not isinstance(value, dict):
        raise SnapshotError(f"{key}: expected an object of numbers, got {type(value).__name__}")
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise SnapshotError(f"{key}.{k}: expected a whole number >= 0, got {v!r}")
    return dict(value)


def _task_state(document: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """``task_state``: task -> {processor id: lag}."""
    value = document.get("task_state", {})
    if not isinstance(value, dict):
        raise SnapshotError(f"task_state: expected an object, got {type(value).__name__}")
    return {task: _count_map(value, task) for task in value} if value else {}


#: A whole number in a snapshot has at most this many digits (a version, a partition).
MAX_DIGITS = 30


def _parse_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_DIGITS:
        raise SnapshotError(
            f"not valid JSON: a number has {len(digits)} digits (at most {MAX_DIGITS})"
        )
    return int(digits)


def load_snapshot(text: str) -> Snapshot:
    """Parse a snapshot (see the module docstring); raise SnapshotError naming the problem."""
    try:
        document = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise SnapshotError("not valid JSON: nested too deeply") from None
    if not isinstance(document, dict):
        raise SnapshotError("the snapshot must be a JSON object")
    raw_tasks = document.get("tasks")
    if not isinstance(raw_tasks, list):
        raise SnapshotError("tasks: expected a list of task names or task objects")
    tasks: list[TaskModel] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_tasks):
        if isinstance(raw, str):
            if not raw:
                raise SnapshotError(f"tasks[{index}]: empty task name")
            task = TaskModel(raw, frozenset())
        else:
            try:
                task = task_from_dict(raw, f"tasks[{index}]")
            except JobModelFormatError as exc:
                raise SnapshotError(str(exc)) from None
        if task.name in seen:
            raise SnapshotError(f"tasks[{index}]: task {task.name!r} is listed twice")
        seen.add(task.name)
        tasks.append(task)
    version = document.get("version", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise SnapshotError(f"version: expected a whole number >= 0, got {version!r}")
    try:
        metadata = GrouperMetadata(
            processor_locality=_id_map(document, "processor_locality", location_id_problem),
            task_locality=_id_map(document, "task_locality", location_id_problem),
            previous_task_to_processor=_id_map(
                document, "previous_task_to_processor", processor_id_problem
            ),
            processor_capacity=_count_map(document, "processor_capacity"),
            task_state=_task_state(document),
        )
    except GrouperError as exc:
        raise SnapshotError(str(exc)) from None
    if tasks and not metadata.processor_locality:
        raise SnapshotError("processor_locality: no live processor to assign tasks to")
    return Snapshot(tasks, metadata, version)


@dataclass(frozen=True)
class PlanSummary:
    tasks: int
    processors: int
    moved: int
    with_locality: int
    locality_kept: int
    min_tasks: int
    max_tasks: int
    standbys: int = 0  # standby replicas in all


def summarize(model: JobModel, metadata: GrouperMetadata) -> PlanSummary:
    """Moved tasks, locality kept (tasks on a processor at their recorded location), balance."""
    owner = model.task_to_processor()
    where = metadata.processor_locality
    previous = metadata.previous_task_to_processor
    recorded = metadata.task_locality
    sizes = [len(c.tasks) for c in model.containers.values()] or [0]
    return PlanSummary(
        tasks=len(owner),
        processors=len(model.containers),
        moved=tasks_moved(previous, owner),
        with_locality=tasks_with_locality(owner, recorded),
        locality_kept=tasks_kept_local(owner, where, recorded),
        min_tasks=min(sizes),
        max_tasks=max(sizes),
        standbys=sum(len(c.standby_tasks) for c in model.containers.values()),
    )


def _parse_option(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise SnapshotError(f"--option {text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def run_plan(args: argparse.Namespace) -> int:
    try:
        options = dict(_parse_option(o) for o in args.option)
        grouper = get_grouper(args.grouper, **options)
        try:
            with open(args.input, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise SnapshotError(f"cannot read {args.input}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise SnapshotError(f"{args.input} is not UTF-8 text: {exc}") from None
        snapshot = load_snapshot(text)
    except SnapshotError as exc:
        raise CommandError(f"plan: {exc}") from None
    try:
        containers = grouper.group(snapshot.tasks, snapshot.metadata)
        validate(snapshot.tasks, snapshot.metadata, containers)
    except Exception as exc:
        raise CommandError(f"plan: grouper {args.grouper!r} failed: {exc}", code=1) from None
    model = JobModel(
        snapshot.version + 1, FrozenMap({c.processor_id: c for c in containers}), FrozenMap()
    )
    if args.json:
        sys.stdout.write(dump_job_model(model, grouper=args.grouper).decode() + "\n")
        return 0
    summary = summarize(model, snapshot.metadata)
    kept = (
        f"{summary.locality_kept}/{summary.with_locality}"
        f" ({100 * summary.locality_kept / summary.with_locality:.1f}%)"
        if summary.with_locality
        else "n/a (no task locality)"
    )
    print(f"grouper        {args.grouper}")
    print(f"version        {model.version}")
    print(f"tasks          {summary.tasks} on {summary.processors} processors")
    print(f"moved          {summary.moved}")
    print(f"locality kept  {kept}")
    print(f"balance        min {summary.min_tasks}, max {summary.max_tasks} tasks per processor")
    print(f"standbys       {summary.standbys}")
    print()
    print(f"{'processor':<24} {'location':<32} {'tasks':>5}  standbys")
    for pid in sorted(model.containers):
        container = model.containers[pid]
        standbys = ", ".join(sorted(container.standby_tasks)) or "-"
        print(
            f"{pid:<24} {container.location_id or '-':<32} {len(container.tasks):>5}  "
            f"{len(container.standby_tasks)}: {standbys}"
            if container.standby_tasks
            else f"{pid:<24} {container.location_id or '-':<32} {len(container.tasks):>5}  -"
        )
    return 0


def add_commands(subparsers: Any) -> None:
    plan = subparsers.add_parser(
        "plan",
        help="dry run of a grouper on a snapshot",
        description="Run a grouper on a snapshot file and show (or print as JSON) its job model.",
    )
    plan.add_argument("--grouper", required=True, help="grouper name (built-in or plugin)")
    plan.add_argument("--input", required=True, help="snapshot JSON file")
    plan.add_argument("--json", action="store_true", help="print the job-model JSON")
    plan.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="grouper option (value parsed as JSON when it can be), e.g. balance_slack=1",
    )
    plan.set_defaults(handler=run_plan)
