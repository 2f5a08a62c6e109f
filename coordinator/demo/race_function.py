"""The ``applyInPandasWithState`` function both ways of the streaming race run (imported on the
executors: the standard library and pandas only).

:func:`count_clicks_random` is ``affinity_pipeline.streaming.count_clicks`` with a padding that
does not compress: per user, ``pad`` characters drawn from the user's name alone (hex digits of
seeded random bytes), so Spark's compressed changelogs and snapshots hold as many bytes as the
state really has and both ways checkpoint the same state.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

__all__ = ["count_clicks_random", "padding"]


def padding(user: str, size: int) -> str:
    """``size`` hex digits drawn from ``user`` alone (the same on every executor and run)."""
    return random.Random(user).randbytes((size + 1) // 2).hex()[:size]


def count_clicks_random(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """Running clicks and value total per user; the state carries ``pad`` random characters."""
    import pandas as pd

    clicks, total, blob = state.get if state.exists else (0, 0, "")
    pad = len(blob)
    for pdf in pdfs:
        clicks += len(pdf)
        total += int(pdf["value"].sum())
        pad = max(pad, int(pdf["pad"].max()))
    state.update((clicks, total, blob if len(blob) == pad else padding(str(key[0]), pad)))
    yield pd.DataFrame({"user": [key[0]], "clicks": [clicks], "total": [total]})
