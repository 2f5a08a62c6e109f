""":class:`CompactionPolicy`: when a checkpoint writes a new base instead of a delta.

See the package docstring ("Compaction policy") for the amortized cost. Imports only
:mod:`.encoding`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from locality.spark.state.objectspace.encoding import positive_int

__all__ = ["CompactionPolicy"]


@dataclass(frozen=True)
class CompactionPolicy:
    """When a checkpoint writes a new base instead of a delta (see the module docstring).

    ``delta_ratio``: compact when the generation's delta bytes, with the new delta, exceed
    ``delta_ratio`` times its base (bytes written <= (2 + 1/delta_ratio) x changes, a load reads
    <= (1 + delta_ratio) x the base). ``max_deltas``: also compact when the generation would
    hold more deltas than this (bounds the files a load replays; None: no bound).
    """

    delta_ratio: float = 1.0
    max_deltas: int | None = None

    def __post_init__(self) -> None:
        ratio = self.delta_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio > 0:
            raise ValueError(f"delta_ratio must be a number > 0, got {ratio!r}")
        if not math.isfinite(ratio):
            raise ValueError(f"delta_ratio must be finite, got {ratio!r}")
        if self.max_deltas is not None:
            positive_int(self.max_deltas, "max_deltas")

    def should_compact(self, *, base_bytes: int, delta_bytes: int, delta_count: int) -> bool:
        """``delta_bytes`` / ``delta_count``: the generation's, including the next delta."""
        if delta_bytes > self.delta_ratio * base_bytes:
            return True
        return self.max_deltas is not None and delta_count > self.max_deltas
