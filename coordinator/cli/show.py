"""``affinity jobmodel show`` and ``affinity locality show``: read a running job's state.

::

    affinity jobmodel show --config job.yaml [--version N] [--json]
    affinity locality show --config job.yaml [--json]

``--json`` prints the job-model JSON (format 1, DESIGN.md "Job-model format"; standby replicas as
each container's ``standby_tasks``), or for locality ``{"processors": {id: location}, "tasks":
{task: location}, "standbys": {id: [task, ...]}}`` (the standby replicas each processor keeps in
the latest job model). Without it, a readable summary.
Nothing is written to ZooKeeper. Exit codes: 0 shown; 2 bad input (unusable config, no such job,
no such version, nothing published yet); 1 ZooKeeper unreachable, access denied or corrupt data.
Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from coordinator.cli.common import CommandError, existing_job_store, quiet_logging
from coordinator.config import JobConfig, load_config
from coordinator.escaping import terminal_text
from metadata.serde import dump_job_model
from metadata.zk import NotFound, ZkMetadataStore

__all__ = ["add_commands", "show_job_model", "show_locality"]

#: How many task names a summary line lists before "... (+N more)".
SHOWN_TASKS = 8
#: Reads give up after this long when ZooKeeper does not answer.
READ_DEADLINE_S = 10.0


class _NothingToShow(Exception):
    """The job exists but has nothing of what was asked (exit code 2)."""


def add_commands(subparsers: Any) -> None:
    jobmodel = subparsers.add_parser("jobmodel", help="show a running job's job model")
    jobmodel_commands = jobmodel.add_subparsers(dest="jobmodel_command", required=True)
    show = jobmodel_commands.add_parser("show", help="show the latest (or a given) job model")
    show.add_argument("--config", required=True, help="the job's YAML configuration")
    show.add_argument("--version", type=int, help="the job-model version (default: the latest)")
    show.add_argument("--json", action="store_true", help="print the job-model JSON (format 1)")
    show.set_defaults(handler=show_job_model)

    locality = subparsers.add_parser("locality", help="show a running job's locality")
    locality_commands = locality.add_subparsers(dest="locality_command", required=True)
    show = locality_commands.add_parser("show", help="show processor and task locality")
    show.add_argument("--config", required=True, help="the job's YAML configuration")
    show.add_argument("--json", action="store_true", help='print {"processors", "tasks"} JSON')
    show.set_defaults(handler=show_locality)


def show_job_model(args: argparse.Namespace) -> int:
    return _with_store(args.config, lambda config, store: _show_job_model(args, config, store))


def show_locality(args: argparse.Namespace) -> int:
    return _with_store(args.config, lambda config, store: _show_locality(args, config, store))


# ---------------------------------------------------------------- plumbing


def _with_store(config_path: str, action: Callable[[JobConfig, ZkMetadataStore], int]) -> int:
    quiet_logging()
    config = load_config(config_path)
    with existing_job_store(config, retry_deadline_s=READ_DEADLINE_S) as store:
        try:
            return action(config, store)
        except (_NothingToShow, NotFound) as exc:
            raise CommandError(str(exc)) from None


def _natural_key(name: str) -> list[Any]:
    """ "Partition 2" before "Partition 10"."""
    return [
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)
    ]


def _names(names: Iterable[str]) -> str:
    ordered = sorted(names, key=_natural_key)
    shown = ", ".join(ordered[:SHOWN_TASKS])
    more = len(ordered) - SHOWN_TASKS
    return f"{shown}, ... (+{more} more)" if more > 0 else shown


def _tasks(count: int) -> str:
    return f"{count} task" if count == 1 else f"{count} tasks"


# ---------------------------------------------------------------- jobmodel show


def _show_job_model(args: argparse.Namespace, config: JobConfig, store: ZkMetadataStore) -> int:
    latest = store.job_models.latest_version()
    version = args.version if args.version is not None else latest
    if version is None:
        raise _NothingToShow(
            f"job {config.job.name}-{config.job.id} has no published job model yet"
        )
    document = store.job_models.read_document(version)
    model = document.model
    if args.json:
        sys.stdout.write(
            dump_job_model(model, run_id=document.run_id, grouper=document.grouper).decode() + "\n"
        )
        return 0
    lines = [
        f"job {config.job.name}-{config.job.id} at {config.job_folder} "
        f"(ZooKeeper {config.zookeeper.connect})",
        f"job model version {version} (latest {latest}), run {document.run_id or '-'}, "
        f"grouper {document.grouper or '-'}",
    ]
    state = store.barriers.state(version)
    if state is None:
        lines.append(f"barrier {version}: gone (removed by retention)")
    else:
        expected = store.barriers.expected(version)
        joined = store.barriers.participants(version)
        lines.append(
            f"barrier {version}: {state}, {len(joined & expected)} of {len(expected)} expected "
            "processors joined"
        )
    total = sum(len(c.tasks) for c in model.containers.values())
    standbys = sum(len(c.standby_tasks) for c in model.containers.values())
    replicas = f", {standbys} standby replicas" if standbys else ""
    lines.append(f"{len(model.containers)} processors, {_tasks(total)}{replicas}")
    width = max((len(pid) for pid in model.containers), default=0)
    for pid in sorted(model.containers, key=_natural_key):
        container = model.containers[pid]
        names = f": {_names(container.tasks)}" if container.tasks else ""
        copies = container.standby_tasks
        kept = f"; standby {len(copies)}: {_names(copies)}" if copies else ""
        lines.append(
            f"  {pid.ljust(width)}  {container.location_id or '-'}  "
            f"{_tasks(len(container.tasks))}{names}{kept}"
        )
    print("\n".join(map(terminal_text, lines)))
    return 0


# ---------------------------------------------------------------- locality show


def _show_locality(args: argparse.Namespace, config: JobConfig, store: ZkMetadataStore) -> int:
    processors = store.processors.locality()
    tasks = store.locality.read()
    standbys = _standbys_in_force(store)
    if args.json:
        document = {"processors": processors, "tasks": tasks, "standbys": standbys}
        print(json.dumps(document, sort_keys=True, ensure_ascii=False))
        return 0
    by_location: dict[str, list[str]] = defaultdict(list)
    for task, location in tasks.items():
        by_location[location].append(task)
    lines = [
        f"job {config.job.name}-{config.job.id} at {config.job_folder}, run {config.job.run_id}",
        f"{len(processors)} live processors:",
    ]
    width = max((len(pid) for pid in processors), default=0)
    lines += [
        f"  {pid.ljust(width)}  {processors[pid]}" for pid in sorted(processors, key=_natural_key)
    ]
    lines.append(f"{_tasks(len(tasks))} with locality, at {len(by_location)} locations:")
    width = max((len(loc) for loc in by_location), default=0)
    lines += [
        f"  {loc.ljust(width)}  {_tasks(len(names))}: {_names(names)}"
        for loc, names in sorted(by_location.items())
    ]
    if standbys:
        lines.append(f"standby replicas ({sum(map(len, standbys.values()))}, latest job model):")
        width = max(len(pid) for pid in standbys)
        lines += [
            f"  {pid.ljust(width)}  {_tasks(len(names))}: {_names(names)}"
            for pid, names in sorted(standbys.items(), key=lambda item: _natural_key(item[0]))
        ]
    print("\n".join(map(terminal_text, lines)))
    return 0


def _standbys_in_force(store: ZkMetadataStore) -> dict[str, list[str]]:
    """Processor id -> the standby replicas it keeps in the latest job model (none: empty)."""
    latest = store.job_models.latest_version()
    if latest is None:
        return {}
    model = store.job_models.read_document(latest).model
    return {
        pid: sorted(c.standby_tasks, key=_natural_key)
        for pid, c in model.containers.items()
        if c.standby_tasks
    }
