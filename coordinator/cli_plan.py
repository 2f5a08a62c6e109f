"""``affinity plan``: a dry run of a grouper on a snapshot (filled in with the groupers)."""

from __future__ import annotations

from typing import Any


def add_commands(subparsers: Any) -> None:
    del subparsers
