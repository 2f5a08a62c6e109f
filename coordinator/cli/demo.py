"""``affinity demo``: the reference stateful pipeline on a real Spark cluster, placed by a real
coordinator, against Spark's default placement (:mod:`coordinator.demo.spark_demo`); with
``--simulate``, the grouper-only replay of a job's life (:mod:`coordinator.demo.simulation`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["add_commands"]


def run_demo(args: argparse.Namespace) -> int:
    if args.simulate:
        from coordinator.demo.simulation import run_simulation

        return run_simulation(args)
    from coordinator.demo.spark_demo import run_demo as run_spark_demo

    return run_spark_demo(args)


def add_commands(subparsers: Any) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="the reference pipeline on a local Spark cluster, placed by the coordinator",
    )
    demo.add_argument("--json", action="store_true", help="print the totals as JSON last")
    demo.add_argument(
        "--simulate",
        action="store_true",
        help="replay rebalances through the groupers only (no ZooKeeper, no Spark)",
    )
    demo.add_argument(
        "--plot", type=Path, metavar="FILE.png", help="draw warm ratio and bytes restored"
    )
    demo.add_argument(
        "--batches", type=int, default=8, help="batches to run (half before the kill; >= 3)"
    )
    demo.add_argument(
        "--workdir", type=Path, help="work directory (default: a temporary one, removed after)"
    )
    demo.set_defaults(handler=run_demo)
