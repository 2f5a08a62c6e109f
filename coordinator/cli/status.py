"""``affinity status``: a running job at a glance.

::

    affinity status --config job.yaml [--history N] [--json]

Who leads (which replica), the version in force and the latest one, the barrier's state, the
processors on their location tree (zone/rack/host) with their task counts, and the last
rebalances (trigger, outcome, tasks moved and kept local, the time of each phase; below it the
notes, e.g. a model in force that could not be read and what replaced it). For a streaming
query, its last batches (seconds, rows, tasks warm / restored / new, bytes restored and
written, tasks pinned where placed, Kafka lag) and each task of the last batch: its executor
and location (red when it ran off the executor it was pinned to), its state's source and
bytes. A table in a terminal (rich); ``--json`` prints the status document of
:mod:`coordinator.status.data`. Nothing
is written. Exit codes: 0 shown; 2 bad input (unusable config, no such job); 1 ZooKeeper
unreachable, access denied or corrupt data. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from coordinator.cli.common import CommandError, existing_job_store, quiet_logging
from coordinator.config import load_config
from coordinator.escaping import rich_text
from coordinator.status import JobStatusReader
from metadata.model import BarrierState

__all__ = ["add_commands", "render", "show_status"]

#: Reads give up after this long when ZooKeeper does not answer.
READ_DEADLINE_S = 10.0
PHASES = ("debounce", "grouper", "publish", "barrier")


def add_commands(subparsers: Any) -> None:
    status = subparsers.add_parser("status", help="a running job at a glance")
    status.add_argument("--config", required=True, help="the job's YAML configuration")
    status.add_argument(
        "--history", type=int, default=10, metavar="N", help="rebalances shown (default 10)"
    )
    status.add_argument("--json", action="store_true", help="print the status document (JSON)")
    status.set_defaults(handler=show_status)


def show_status(args: argparse.Namespace) -> int:
    quiet_logging()
    if args.history < 0:
        raise CommandError(f"--history must be >= 0, got {args.history}")
    config = load_config(args.config)
    with existing_job_store(config, retry_deadline_s=READ_DEADLINE_S) as store:
        document = JobStatusReader(store, config, history=args.history).read()
    if args.json:
        print(json.dumps(document, sort_keys=True, ensure_ascii=False))
        return 0
    console = Console(width=None if sys.stdout.isatty() else 140, highlight=False)
    for part in render(document):
        console.print(part)
    return 0


# ---------------------------------------------------------------- rendering


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def _summary(document: dict[str, Any]) -> str:
    job, leader, version = document["job"], document["leader"], document["version"]
    replicas = leader["replicas"]
    lines = [
        f"[bold]job {rich_text(job['name'])}-{rich_text(job['id'])}[/] at "
        f"{rich_text(job['folder'])}, run {rich_text(job['run_id'])}",
        f"leader: [bold]{rich_text(leader['replica'] or 'none')}[/] "
        f"({len(replicas)} replica{'s' if len(replicas) != 1 else ''} in the election)",
        f"version in force: [bold]{version['in_force'] or '-'}[/] "
        f"(latest {version['latest'] or '-'})",
    ]
    barrier = document["barrier"]
    if barrier is not None:
        waiting = sorted(set(barrier["expected"]) - set(barrier["joined"]))
        line = (
            f"barrier {barrier['version']}: [bold]{barrier['state']}[/], "
            f"{len(set(barrier['joined']) & set(barrier['expected']))} of "
            f"{len(barrier['expected'])} joined"
        )
        if barrier["state"] == BarrierState.NEW and waiting:
            line += f", waiting for {', '.join(map(rich_text, waiting))}"
        lines.append(line)
    processors = document["processors"]
    live = sum(1 for p in processors if p["live"])
    lines.append(f"{live} live processors, {document['tasks']} tasks")
    return "\n".join(lines)


def _tree(document: dict[str, Any]) -> Tree:
    by_id = {p["id"]: p for p in document["processors"]}
    tree = Tree("[bold]locations[/]")

    def add(branch: Tree, node: dict[str, Any]) -> None:
        for child in node["children"]:
            sub = branch.add(f"{rich_text(child['name'])}  [dim]{child['tasks']} tasks[/]")
            for pid in child["processors"]:
                processor = by_id[pid]
                gone = "" if processor["live"] else "  [red]gone[/]"
                sub.add(f"[bold]{rich_text(pid)}[/]  {processor['tasks']} tasks{gone}")
            add(sub, child)

    add(tree, document["locations"])
    return tree


def _rebalances(document: dict[str, Any]) -> Table:
    table = Table(title="last rebalances", title_justify="left")
    for column in ("version", "decided", "trigger", "outcome", "moved", "kept local"):
        table.add_column(column, justify="right" if column in ("version", "moved") else "left")
    for phase in PHASES:
        table.add_column(phase, justify="right")
    for entry in reversed(document["rebalances"]):
        decided = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["decided_at"]))
        kept = f"{entry['kept_local']}/{entry['with_locality']}" if entry["with_locality"] else "-"
        done = entry["outcome"] == BarrierState.DONE
        outcome = rich_text(entry["outcome"]) if done else f"[red]{rich_text(entry['outcome'])}[/]"
        table.add_row(
            str(entry["version"]),
            decided,
            rich_text(entry["trigger"]),
            outcome,
            str(entry["moved"]),
            kept,
            *(_seconds(entry["phases"].get(p)) for p in PHASES),
        )
    return table


def _notes(document: dict[str, Any]) -> str:
    """What the history says besides its table (e.g. a model in force that could not be read
    and what the leader fell back to), newest first."""
    return "\n".join(
        f"[bold]v{entry['version']}[/] {rich_text(entry['trigger'])}: {rich_text(entry['note'])}"
        for entry in reversed(document["rebalances"])
        if entry.get("note")
    )


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


def _batches(document: dict[str, Any]) -> Table:
    table = Table(title="last batches (streaming)", title_justify="left")
    columns = ("batch", "seconds", "rows", "warm", "restored", "new", "bytes restored")
    for column in (*columns, "bytes written", "pinned", "lag"):
        table.add_column(column, justify="left" if column == "lag" else "right")
    for entry in reversed(document["batches"]):
        pinned = f"{entry['pinned_ok']}/{entry['pinned_total']}"
        if entry["pinned_ok"] < entry["pinned_total"]:
            pinned = f"[red]{pinned}[/]"
        restored = f"[red]{entry['restored']}[/]" if entry["restored"] else "0"
        lag = ", ".join(f"{rich_text(p)}: {n}" for p, n in entry["lag"].items()) or "-"
        table.add_row(
            str(entry["batch"]),
            _seconds(entry["seconds"]),
            str(entry["rows_in"]),
            f"{entry['warm']}/{entry['tasks']}",
            restored,
            str(entry["new"]),
            _size(entry["bytes_restored"]),
            _size(entry["bytes_written"]),
            pinned,
            lag,
        )
    return table


def _places(document: dict[str, Any]) -> Table:
    last = document["batches"][-1]
    table = Table(title=f"tasks of batch {last['batch']}", title_justify="left")
    for column in ("task", "executor", "location", "state", "restored", "written", "rows"):
        table.add_column(
            column, justify="right" if column in ("restored", "written", "rows") else "left"
        )
    for place in last["places"]:
        off = place["pinned_to"] is not None and place["executor"] != place["pinned_to"]
        executor = rich_text(place["executor"] or "-")
        if off:
            executor = f"[red]{executor} (pinned to {rich_text(place['pinned_to'])})[/]"
        table.add_row(
            rich_text(place["task"]),
            executor,
            rich_text(place["location"] or "-"),
            rich_text(place["source"]),
            _size(place["bytes_restored"]),
            _size(place["bytes_written"]),
            str(place["rows_in"]),
        )
    return table


def render(document: dict[str, Any]) -> list[Any]:
    """The rich renderables of a status document: the summary, the location tree, the table
    and its notes, then a streaming query's last batches and the last batch's tasks."""
    parts: list[Any] = [_summary(document), _tree(document)]
    if document["rebalances"]:
        parts.append(_rebalances(document))
        notes = _notes(document)
        if notes:
            parts.append(notes)
    if document.get("batches"):
        parts += [_batches(document), _places(document)]
    return parts
