"""``affinity dev up|down|status [--dir DIR]``: a local environment to try affinity in
(:mod:`coordinator.dev`): a private ZooKeeper and a Spark standalone cluster on loopback that
outlive the command. ``up`` prints the ZooKeeper connect string, the Spark master URL and the job
config to use; ``down`` stops them. Exit code 2 for bad use (already up, nothing up), 1 when a
daemon does not start.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from coordinator.cli.common import CommandError
from coordinator.dev import DEFAULT_DIR, DevEnvironment, DevError, dev_down, dev_up
from coordinator.dev.environment import describe
from coordinator.launchers.zookeeper import ZooKeeperUnavailable

__all__ = ["add_commands"]


def run_up(args: argparse.Namespace) -> int:
    print(f"starting ZooKeeper and {args.workers} Spark worker(s) in {args.dir}/ ...", flush=True)
    try:
        env = dev_up(args.dir, workers=args.workers)
    except DevError as exc:
        raise CommandError(str(exc)) from None
    except (ZooKeeperUnavailable, TimeoutError, OSError) as exc:
        raise CommandError(f"the dev environment did not start: {exc}", code=1) from None
    print("affinity dev: up")
    for line in describe(env):
        print("  " + line)
    print("stop it with: affinity dev down")
    return 0


def run_down(args: argparse.Namespace) -> int:
    try:
        stopped = dev_down(args.dir, keep=args.keep)
    except DevError as exc:
        raise CommandError(str(exc)) from None
    print(f"affinity dev: down ({len(stopped)} daemon(s) stopped)")
    return 0


def run_status(args: argparse.Namespace) -> int:
    try:
        env = DevEnvironment.load(args.dir)
    except DevError as exc:
        raise CommandError(str(exc)) from None
    running = env.processes()
    if args.json:
        print(json.dumps({**asdict(env), "running": running}, indent=2))
    else:
        for line in describe(env):
            print(line)
    return 0 if all(running.values()) else 1


def add_commands(subparsers: Any) -> None:
    dev = subparsers.add_parser(
        "dev", help="a local ZooKeeper and Spark cluster on loopback to try affinity in"
    )
    commands = dev.add_subparsers(dest="action", required=True)
    up = commands.add_parser("up", help="start them (they outlive the command)")
    up.add_argument(
        "--workers", type=int, default=2, help="Spark workers, one per loopback host (0: no Spark)"
    )
    up.set_defaults(handler=run_up)
    down = commands.add_parser("down", help="stop them and remove the directory")
    down.add_argument("--keep", action="store_true", help="keep the directory (logs, state)")
    down.set_defaults(handler=run_down)
    status = commands.add_parser("status", help="what runs (exit code 1 if a daemon is gone)")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=run_status)
    for command in (up, down, status):
        command.add_argument(
            "--dir", type=Path, default=DEFAULT_DIR, help=f"state directory (default {DEFAULT_DIR})"
        )
