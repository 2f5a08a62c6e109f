"""Event time: a query's event-time column and delay, each batch's watermark, and late rows,
with Spark's semantics (pyspark 4.3; read from Spark's ``WatermarkTracker``,
``PropagateWatermarkSimulator`` and ``WatermarkSupport``).

:class:`EventTime` is what ``withWatermark(column, delay)`` says: the column (a timestamp) and
the delay. The rules, for batches ``0, 1, ...`` of one query:

- **The batch's watermark** ``wm(0) = 0``; after batch ``N`` ran,
  ``wm(N+1) = max(wm(N), maxEventTime(N) - delay)``, ``maxEventTime(N)`` being the largest event
  time (ms, truncated from the timestamp's microseconds) of the rows batch ``N`` read, late rows
  included; a batch without event times leaves it. It never goes back. Timeouts, timers and
  ``getCurrentWatermarkMs()`` of batch ``N`` use ``wm(N)``.
- **Late rows** of batch ``N`` are those whose event time is at or before ``wm(N-1)`` (the
  *previous* batch's watermark; ``wm(-1) = 0``): Spark's default watermark propagation filters
  late rows with it, so a chain of stateful operators agrees. Rows with a null event time are
  not late. Whether late rows are dropped is the operator's: ``applyInPandasWithState`` with
  ``EventTimeTimeout``, ``transformWithStateInPandas`` in time mode ``EventTime``; otherwise
  every row is kept.

:class:`Watermark` is a batch's pair (``late_ms = wm(N-1)``, ``current_ms = wm(N)``); the commit
record of batch ``N`` keeps ``wm(N)`` and ``wm(N+1)`` (:meth:`Watermark.extra`), so batch
``N+1`` (and a replay of it, and an application restart) reads both back
(:meth:`Watermark.after`). Standard library only; :func:`scan` and :func:`drop_late` (run on
the executors) import pyarrow lazily.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "EventTime",
    "EventTimeError",
    "Watermark",
    "batch_watermark",
    "commit_extra",
    "drop_late",
    "next_watermark",
    "parse_delay",
    "scan",
]

#: The key of a commit record's ``extra`` that holds the watermark.
EXTRA_KEY = "watermark"

_US = {
    "microsecond": 1,
    "millisecond": 1000,
    "second": 1_000_000,
    "minute": 60_000_000,
    "hour": 3_600_000_000,
    "day": 86_400_000_000,
    "week": 7 * 86_400_000_000,
    "month": 31 * 86_400_000_000,  # Spark's IntervalUtils.getDuration: 31 days a month
    "year": 12 * 31 * 86_400_000_000,
}
_ALIASES = {"us": "microsecond", "ms": "millisecond", "s": "second", "sec": "second",
            "min": "minute", "h": "hour", "d": "day"}  # fmt: skip
_PART = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*([a-z]+)")


class EventTimeError(ValueError):
    """An event-time option that cannot be used (the message says what)."""


def parse_delay(delay: object) -> int:
    """A watermark delay in milliseconds: an interval string as ``withWatermark`` takes it
    (``"10 seconds"``, ``"1 minute 30 seconds"``, ``"interval 2 hours"``; a month is 31 days, as
    in Spark), a ``timedelta``, or an int of milliseconds. Negative delays are refused."""
    if isinstance(delay, datetime.timedelta):
        total_us = (delay.days * 86_400 + delay.seconds) * 1_000_000 + delay.microseconds
    elif isinstance(delay, int) and not isinstance(delay, bool):
        total_us = delay * 1000
    elif isinstance(delay, str):
        total_us = _interval_us(delay)
    else:
        raise EventTimeError(f"the watermark delay must be an interval string, got {delay!r}")
    if total_us < 0:
        raise EventTimeError(f"the watermark delay must not be negative, got {delay!r}")
    return total_us // 1000


def _interval_us(text: str) -> int:
    body = text.strip().lower()
    body = body[len("interval") :].strip() if body.startswith("interval") else body
    parts = _PART.findall(body)
    if not parts or _PART.sub("", body).strip():
        raise EventTimeError(f"the watermark delay {text!r} is not an interval like '10 seconds'")
    total = 0
    for number, unit in parts:
        name = _ALIASES.get(unit, unit.removesuffix("s") if unit.endswith("s") else unit)
        if name not in _US:
            raise EventTimeError(f"the watermark delay {text!r} has an unknown unit {unit!r}")
        total += round(float(number) * _US[name])
    return total


@dataclass(frozen=True)
class EventTime:
    """A query's event-time column and watermark delay (``withWatermark(column, delay)``)."""

    column: str
    delay_ms: int

    @classmethod
    def of(cls, option: object) -> EventTime:
        """``event_time=(column, delay)`` as a user gives it (:func:`parse_delay`)."""
        if isinstance(option, EventTime):
            return option
        if not isinstance(option, tuple | list) or len(option) != 2:
            raise EventTimeError(
                f"event_time must be (column, delay), e.g. ('ts', '10 seconds'), got {option!r}"
            )
        column, delay = option
        if not isinstance(column, str) or not column:
            raise EventTimeError(f"event_time's column must be a column name, got {column!r}")
        return cls(column, parse_delay(delay))


@dataclass(frozen=True)
class Watermark:
    """A batch's watermarks: rows at or before ``late_ms`` are late; ``current_ms`` is the
    batch's watermark (timeouts, timers). See the module docstring."""

    late_ms: int = 0
    current_ms: int = 0

    @classmethod
    def after(cls, extra: Mapping[str, Any] | None) -> Watermark:
        """The watermarks of the batch after the commit whose ``extra`` this is (none, or one
        written without event time: the first batch's, 0 and 0)."""
        kept = (extra or {}).get(EXTRA_KEY)
        if not isinstance(kept, Mapping):
            return cls()
        return cls(int(kept["ms"]), int(kept["next_ms"]))

    def extra(self, next_ms: int) -> dict[str, Any]:
        """What the batch's commit record keeps: its watermark and the next batch's."""
        return {EXTRA_KEY: {"ms": self.current_ms, "next_ms": next_ms}}

    def is_late(self, event_us: int | None) -> bool:
        """Spark's predicate: ``eventTime <= late watermark`` (a null event time is not late)."""
        return event_us is not None and event_us <= self.late_ms * 1000


def next_watermark(current_ms: int, maxima: Iterable[int | None], delay_ms: int) -> int:
    """``wm(N+1)`` from ``wm(N)``, the batch's tasks' maximum event times (None: a task without
    event times) and the delay: it moves only forward."""
    seen = [m for m in maxima if m is not None]
    if not seen:
        return current_ms
    return max(current_ms, max(seen) - delay_ms)


def batch_watermark(event_time: EventTime | None, start: Any) -> Watermark | None:
    """A batch's watermarks: those kept by ``start`` (the commit record it starts from, None:
    none); None without an event-time column."""
    if event_time is None:
        return None
    return Watermark.after(getattr(start, "extra", None))


def commit_extra(
    watermark: Watermark | None, event_time: EventTime | None, maxima: Iterable[int | None]
) -> dict[str, Any]:
    """What a batch's commit record keeps of event time (nothing without it): the batch's
    watermark, and the next batch's from the tasks' largest event times (:func:`next_watermark`)."""
    if watermark is None or event_time is None:
        return {}
    return watermark.extra(next_watermark(watermark.current_ms, maxima, event_time.delay_ms))


def event_ms(event_us: int) -> int:
    """An event time in ms as Spark counts it: microseconds / 1000, truncated toward zero."""
    return event_us // 1000 if event_us >= 0 else -((-event_us) // 1000)


def _micros(table: pa.Table, column: str) -> pa.ChunkedArray:
    import pyarrow as pa

    values = table.column(column)
    if not pa.types.is_timestamp(values.type):
        raise EventTimeError(
            f"the event-time column {column!r} must be a timestamp, found {values.type}"
        )
    if values.type.unit != "us":
        values = values.cast(pa.timestamp("us", values.type.tz))
    return values.cast(pa.int64())


def scan(table: pa.Table | None, column: str) -> int | None:
    """The largest event time (ms) of ``table``'s rows (None: no row has one)."""
    import pyarrow.compute as pc

    if table is None or table.num_rows == 0:
        return None
    largest = pc.max(_micros(table, column)).as_py()
    return None if largest is None else event_ms(int(largest))


def drop_late(
    table: pa.Table | None, column: str, watermark: Watermark
) -> tuple[pa.Table | None, int]:
    """``table`` without its late rows (module docstring), and how many were dropped."""
    import pyarrow.compute as pc

    if table is None or table.num_rows == 0:
        return table, 0
    late = pc.fill_null(pc.less_equal(_micros(table, column), watermark.late_ms * 1000), False)
    dropped = int(pc.sum(late).as_py() or 0)
    return (table.filter(pc.invert(late)) if dropped else table), dropped
