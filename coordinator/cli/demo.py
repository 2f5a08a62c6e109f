"""``affinity demo``: a stateful streaming query on a real Spark cluster over a real Kafka
broker, run by a Kafka query whose tasks own their partitions (writing its output to a topic)
with a real coordinator, side by side with Spark's own RocksDB state store over Spark's Kafka
connector, through an executor loss and an application restart
(:mod:`coordinator.demo.spark_demo`); ``--source files``: the same over a file source, with
``stateful_foreach_batch``; ``--simulate``: the grouper-only replay of a job's life
(:mod:`coordinator.demo.simulation`).
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
        help="a stateful streaming query on a local Spark cluster: affinity vs Spark's state store",
    )
    demo.add_argument("--json", action="store_true", help="print the totals as JSON last")
    demo.add_argument(
        "--simulate",
        action="store_true",
        help="replay rebalances through the groupers only (no ZooKeeper, no Spark)",
    )
    demo.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="draw warm ratio, state bytes loaded and batch time",
    )
    demo.add_argument(
        "--batches",
        type=int,
        default=8,
        help="batches to run (an executor killed after 3/8 of them, the application "
        "restarted after 3/4; >= 4)",
    )
    demo.add_argument(
        "--source",
        choices=("kafka", "files"),
        default="kafka",
        help="kafka (default): the clicks are records on a real Kafka broker; files: JSON files "
        "read by Spark's file source, affinity's way through stateful_foreach_batch",
    )
    demo.add_argument(
        "--workdir", type=Path, help="work directory (default: a temporary one, removed after)"
    )
    demo.set_defaults(handler=run_demo)
