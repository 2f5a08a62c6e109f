"""A clicks query for Structured Streaming, run both ways: Spark's ``applyInPandasWithState``
and affinity's ``stateful_foreach_batch``, with the same function.

- :func:`count_clicks`: an ``applyInPandasWithState`` function (per user: clicks and the sum of
  the ``value`` column so far, and a padding string that makes the state as large as wanted);
  with processing-time timeouts, a user idle for ``IDLE_MS`` is dropped and reported with
  ``clicks = -1``;
- :class:`ClickFiles`: the file source's input: batch ``b`` is one JSON-lines file drawn from
  ``(seed, b)`` alone, dropped atomically into a directory;
- :func:`reference_clicks`: the single-process reference output of batches ``0..n-1``.

Importable on executors (the function must be: Spark pickles it by reference).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "INPUT_SCHEMA",
    "OUTPUT_SCHEMA",
    "STATE_SCHEMA",
    "ClickFiles",
    "count_clicks",
    "count_clicks_idle",
    "reference_clicks",
]

INPUT_SCHEMA = "user string, value long, pad long"
OUTPUT_SCHEMA = "user string, clicks long, total long"
STATE_SCHEMA = "clicks long, total long, blob string"
IDLE_MS = 3_600_000


def count_clicks(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """Running clicks and value total per user; the state carries ``pad`` bytes of padding."""
    import pandas as pd

    if state.hasTimedOut:
        state.remove()
        yield pd.DataFrame({"user": [key[0]], "clicks": [-1], "total": [0]})
        return
    clicks, total, blob = state.get if state.exists else (0, 0, "")
    pad = len(blob)
    for pdf in pdfs:
        clicks += len(pdf)
        total += int(pdf["value"].sum())
        pad = max(pad, int(pdf["pad"].max()))
    state.update((clicks, total, blob if len(blob) == pad else "x" * pad))
    yield pd.DataFrame({"user": [key[0]], "clicks": [clicks], "total": [total]})


def count_clicks_idle(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """:func:`count_clicks` with a processing-time timeout: a user idle for ``IDLE_MS`` is
    dropped (run with ``ProcessingTimeTimeout``)."""
    yield from count_clicks(key, pdfs, state)
    if state.exists:
        state.setTimeoutDuration(IDLE_MS)


@dataclass(frozen=True)
class ClickFiles:
    """Batch ``b``: ``rows`` clicks of users ``u00000..`` (``users`` of them), values 1..9,
    each row asking for ``pad`` bytes of state padding."""

    directory: Path
    users: int = 200
    rows: int = 400
    pad: int = 0
    seed: int = 7

    def batch(self, b: int) -> list[dict[str, Any]]:
        rng = random.Random(f"{self.seed}/{b}")
        return [
            {
                "user": f"u{rng.randrange(self.users):05d}",
                "value": rng.randint(1, 9),
                "pad": self.pad,
            }
            for _ in range(self.rows)
        ]

    def drop(self, b: int) -> Path:
        """Write batch ``b``'s file (atomically: a hidden temporary name, then a rename)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / f"clicks-{b:06d}.json"
        tmp = self.directory / f".clicks-{b:06d}.json.tmp"
        tmp.write_text("".join(json.dumps(row) + "\n" for row in self.batch(b)))
        os.replace(tmp, target)
        return target


def reference_clicks(
    files: ClickFiles, batches: Iterable[int]
) -> dict[int, list[tuple[str, int, int]]]:
    """Batch -> sorted output rows ``(user, clicks, total)``, computed in one process."""
    state: dict[str, tuple[int, int]] = {}
    out: dict[int, list[tuple[str, int, int]]] = {}
    for b in batches:
        touched: set[str] = set()
        for row in files.batch(b):
            clicks, total = state.get(row["user"], (0, 0))
            state[row["user"]] = (clicks + 1, total + row["value"])
            touched.add(row["user"])
        out[b] = sorted((u, *state[u]) for u in touched)
    return out
