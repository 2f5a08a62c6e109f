"""``affinity repair``: find the job's unusable nodes in ZooKeeper and remove what can go.

::

    affinity repair --config job.yaml            # dry run: what is unusable, what would be done
    affinity repair --config job.yaml --apply    # remove what the plan removes
    affinity repair --config job.yaml --json     # the same, as JSON

It reads every node a reader could fail on (:mod:`coordinator.status.damage`) and follows the
plan of :func:`coordinator.protocol.repair.plan_repair`: old job-model versions and barriers
nobody can read, corrupt locality and history entries are removed (with ``--apply``: each
removal is one transaction, conditional on the node being as it was read, so a node rewritten
meanwhile is left); the version pointer and the version it names are left to a coordinator's
leader, which publishes a clean version above them (the plan says what it falls back to); a
corrupt checkpoint or locality run marker is left to be fixed by hand. Exit codes: 0 done (or
nothing found); 2 bad input (unusable config, no such job); 1 ZooKeeper unreachable or access
denied. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from coordinator.cli.common import existing_job_store, quiet_logging
from coordinator.config import load_config
from coordinator.protocol.repair import Kind, Step, plan_repair
from coordinator.status.damage import find_damage
from metadata.zk import ZkMetadataStore

__all__ = ["add_commands", "apply_step", "run_repair"]

#: Reads give up after this long when ZooKeeper does not answer.
READ_DEADLINE_S = 10.0


def add_commands(subparsers: Any) -> None:
    repair = subparsers.add_parser(
        "repair",
        help="find unusable nodes of a job in ZooKeeper (dry run) and remove what can go",
        description="Find the job's unusable nodes in ZooKeeper and say what would be done; "
        "with --apply, remove what can go.",
    )
    repair.add_argument("--config", required=True, help="the job's YAML configuration")
    repair.add_argument("--apply", action="store_true", help="remove what the plan removes")
    repair.add_argument("--json", action="store_true", help="print the findings as JSON")
    repair.set_defaults(handler=run_repair)


def apply_step(store: ZkMetadataStore, step: Step) -> bool:
    """Carry out a removal; False if the node changed or went since it was read."""
    finding = step.finding
    what = f"repair: remove {finding.node}"
    unchanged = {}  # the chunk that failed to read, as it was then (rewritten: left)
    if finding.unreadable not in ("", finding.node) and finding.unreadable_zversion >= 0:
        unchanged[finding.unreadable] = finding.unreadable_zversion
    if not store.remove_unusable(
        finding.node, zversion=finding.zversion, what=what, unchanged=unchanged
    ):
        return False
    if finding.kind is Kind.VERSION and finding.version is not None:  # and its barrier
        barrier = store.layout.barrier(finding.version)
        found = store.read_node(barrier)
        if found is not None:
            store.remove_unusable(barrier, zversion=found[1], what=what)
    return True


def _line(step: Step, done: bool | None) -> str:
    finding = step.finding
    where = f" ({finding.unreadable})" if finding.unreadable else ""
    if done is None:
        verb = "remove" if step.remove else "leave"
    elif step.remove:
        verb = "removed" if done else "left (it changed since it was read)"
    else:
        verb = "left"
    return f"  {finding.kind}: {finding.node}{where}: {finding.problem}\n    {verb}: {step.why}"


def run_repair(args: argparse.Namespace) -> int:
    quiet_logging()
    config = load_config(args.config)
    with existing_job_store(config, retry_deadline_s=READ_DEADLINE_S) as store:
        damage = find_damage(store)
        steps = plan_repair(damage.findings, pointer=damage.pointer, states=damage.states)
        done: list[bool | None] = [
            (apply_step(store, step) if step.remove else False) if args.apply else None
            for step in steps
        ]
    if args.json:
        print(json.dumps(_document(config.job_folder, steps, done, args.apply), sort_keys=True))
        return 0
    job = f"job {config.job.name}-{config.job.id} at {config.job_folder}"
    if not steps:
        print(f"{job}: no unusable node found")
        return 0
    print(f"{job}: {len(steps)} unusable node{'s' if len(steps) != 1 else ''}")
    for step, outcome in zip(steps, done, strict=True):
        print(_line(step, outcome))
    removable = sum(1 for step in steps if step.remove)
    if not args.apply:
        print(
            f"dry run: nothing changed; with --apply, {removable} node"
            f"{'s' if removable != 1 else ''} would be removed"
        )
    return 0


def _document(
    folder: str, steps: list[Step], done: list[bool | None], applied: bool
) -> dict[str, Any]:
    return {
        "folder": folder,
        "applied": applied,
        "findings": [
            {
                "kind": str(step.finding.kind),
                "node": step.finding.node,
                "unreadable": step.finding.unreadable or step.finding.node,
                "problem": step.finding.problem,
                "version": step.finding.version,
                "action": "remove" if step.remove else "leave",
                "why": step.why,
                "removed": outcome if step.remove else None,
            }
            for step, outcome in zip(steps, done, strict=True)
        ],
    }
