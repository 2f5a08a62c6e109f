"""coordinator.cli: the ``affinity`` command line (DESIGN.md "Command line").

Each command group lives in its own module exposing ``add_commands(subparsers)``; this module
assembles them, and every command's errors take the one path of :mod:`coordinator.cli.common`:
one line on stderr naming the problem, exit code 2 for bad input (config, snapshot, unknown
grouper), 1 for a failure at run time. May import everything in ``coordinator`` and the three
other packages.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from coordinator.cli import demo, dev, plan, repair, run, show, spark, status
from coordinator.cli.common import report

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="affinity",
        description="Host-affinity job coordinator for stateful pipelines on Spark.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (demo, dev, plan, run, spark, show, status, repair):
        module.add_commands(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        reported = report(exc)
        if reported is None:
            raise
        return reported
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
