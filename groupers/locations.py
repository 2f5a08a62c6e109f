"""Hierarchical location ids: ``zone/rack/host`` is a path; nearness is the common prefix."""

from __future__ import annotations

__all__ = ["Path", "common_depth", "location_path"]

Path = tuple[str, ...]


def location_path(location: str | None) -> Path:
    """``"zone-a/rack-1/host-3"`` -> ``("zone-a", "rack-1", "host-3")``; empty or None -> ``()``."""
    if not location:
        return ()
    return tuple(part for part in location.split("/") if part)


def common_depth(a: Path, b: Path) -> int:
    """How many leading components two location paths share (0: nothing in common)."""
    depth = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        depth += 1
    return depth
