"""The ``affinity`` command line (DESIGN.md "Command line").

Each command group lives in its own module exposing ``add_commands(subparsers)``; this module only
assembles them. Exit codes: 0 success, 1 failure at run time, 2 bad input (config, snapshot,
unknown grouper), which is always reported as one line naming the problem.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from coordinator import cli_demo, cli_plan, cli_run, cli_spark, cli_store

__all__ = ["build_parser", "main"]


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="affinity",
        description="Host-affinity job coordinator for stateful pipelines on Spark.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (cli_demo, cli_plan, cli_run, cli_spark, cli_store):
        module.add_commands(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = args.handler
    try:
        code: int = handler(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
