"""``affinity jobmodel show`` and ``affinity locality show``: read a running job's state."""

from __future__ import annotations

import argparse
from typing import Any


def add_commands(subparsers: Any) -> None:
    del subparsers  # filled in with the ZooKeeper metadata store


def _unused(args: argparse.Namespace) -> int:  # pragma: no cover
    return 0
