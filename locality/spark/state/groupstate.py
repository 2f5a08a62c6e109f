"""The ``state`` argument of an ``applyInPandasWithState`` function, for the affinity store.

:class:`KeyState` behaves as ``pyspark.sql.streaming.state.GroupState``: ``exists``, ``get``,
``getOption`` and ``hasTimedOut`` are properties; ``update(tuple)``, ``remove()``,
``setTimeoutDuration(ms)`` (processing-time timeouts), ``setTimeoutTimestamp(ms or datetime)``
(event-time timeouts: not below the batch's watermark, as pyspark checks),
``getCurrentProcessingTimeMs()`` and ``getCurrentWatermarkMs()`` (with an event-time column
only). One difference, on purpose: ``update`` checks the value against the state schema at once
and names the field that does not fit (Spark fails later, in the JVM, with a conversion error).
:func:`timed_out` is Spark's rule for which keys time out. Standard library only.
"""

from __future__ import annotations

import calendar
import datetime
import time
from collections.abc import Sequence
from typing import Any

from locality.spark.state.schema import Field, check_state

__all__ = [
    "EVENT_TIME_TIMEOUT",
    "NO_TIMEOUT",
    "PROCESSING_TIME_TIMEOUT",
    "TIMEOUTS",
    "KeyState",
    "timed_out",
]

NO_TIMEOUT = "NoTimeout"
PROCESSING_TIME_TIMEOUT = "ProcessingTimeTimeout"
EVENT_TIME_TIMEOUT = "EventTimeTimeout"
#: The timeout configurations ``stateful_foreach_batch(timeout=...)`` accepts (pyspark's
#: ``GroupStateTimeout`` strings; ``EventTimeTimeout`` needs ``event_time=``).
TIMEOUTS = (NO_TIMEOUT, PROCESSING_TIME_TIMEOUT, EVENT_TIME_TIMEOUT)


def timed_out(timeout_ms: Any, threshold_ms: int) -> bool:
    """Whether a key whose timeout is ``timeout_ms`` times out in a batch whose threshold (its
    processing time, or its watermark for event-time timeouts) is ``threshold_ms``: strictly
    before it, as Spark's ``FlatMapGroupsInPandasWithStateExec.processTimedOutState``."""
    return (
        isinstance(timeout_ms, int)
        and timeout_ms != KeyState.NO_TIMESTAMP
        and timeout_ms < threshold_ms
    )


class KeyState:
    """One key's state during one call of the function (see the module docstring)."""

    NO_TIMESTAMP = -1

    def __init__(
        self,
        value: Sequence[Any] | None,
        fields: Sequence[Field],
        *,
        batch_time_ms: int,
        timeout_conf: str = NO_TIMEOUT,
        has_timed_out: bool = False,
        timeout_ms: int = NO_TIMESTAMP,
        watermark_ms: int | None = None,
    ) -> None:
        self._value = tuple(value) if value is not None else None
        self._fields = tuple(fields)
        self._batch_time_ms = batch_time_ms
        self._timeout_conf = timeout_conf
        self._has_timed_out = has_timed_out
        self._old_timeout = timeout_ms
        self._watermark = watermark_ms  # None: the query has no event-time column
        self._timeout = self.NO_TIMESTAMP  # reset at every call, as Spark does
        self.updated = False
        self.removed = False

    @property
    def exists(self) -> bool:
        return self._value is not None

    @property
    def get(self) -> tuple[Any, ...]:
        if self._value is None:
            raise ValueError("state.get: the state of this key does not exist (check state.exists)")
        return self._value

    @property
    def getOption(self) -> tuple[Any, ...] | None:
        return self._value

    @property
    def hasTimedOut(self) -> bool:
        return self._has_timed_out

    @property
    def oldTimeoutTimestamp(self) -> int:
        return self._old_timeout

    @property
    def value(self) -> tuple[Any, ...] | None:
        """The state after the call (None: none or removed)."""
        return self._value

    @property
    def timeout_ms(self) -> int:
        """The timeout set during the call (``NO_TIMESTAMP``: none)."""
        return self._timeout

    def update(self, newValue: Sequence[Any]) -> None:
        self._value = tuple(check_state(newValue, self._fields))
        self.updated, self.removed = True, False

    def remove(self) -> None:
        self._value = None
        self.updated, self.removed = False, True

    def setTimeoutDuration(self, durationMs: int) -> None:
        if isinstance(durationMs, bool) or not isinstance(durationMs, int):
            raise TypeError(
                f"setTimeoutDuration expects an int of milliseconds, got {durationMs!r}"
            )
        if self._timeout_conf != PROCESSING_TIME_TIMEOUT:
            raise RuntimeError(
                "setTimeoutDuration needs processing-time timeouts: pass "
                "timeout='ProcessingTimeTimeout' to stateful_foreach_batch"
            )
        if durationMs <= 0:
            raise ValueError(f"setTimeoutDuration expects a positive duration, got {durationMs}")
        self._timeout = self._batch_time_ms + durationMs

    def setTimeoutTimestamp(self, timestampMs: int | datetime.datetime) -> None:
        """The key times out once the watermark passes ``timestampMs`` (ms since the epoch, or
        a datetime); refused below the batch's watermark, as pyspark's ``GroupState``."""
        if self._timeout_conf != EVENT_TIME_TIMEOUT:
            raise RuntimeError(
                "setTimeoutTimestamp needs event-time timeouts: pass "
                "timeout='EventTimeTimeout' and event_time=(column, delay) to "
                "stateful_foreach_batch"
            )
        if isinstance(timestampMs, datetime.datetime):
            timestampMs = _epoch_ms(timestampMs)
        if isinstance(timestampMs, bool) or not isinstance(timestampMs, int):
            raise TypeError(f"setTimeoutTimestamp expects an int of ms, got {timestampMs!r}")
        if timestampMs <= 0:
            raise ValueError(f"setTimeoutTimestamp expects a positive timestamp, got {timestampMs}")
        watermark = self._watermark
        if watermark is not None and watermark != self.NO_TIMESTAMP and timestampMs < watermark:
            raise ValueError(
                f"timeout timestamp ({timestampMs}) cannot be earlier than the current "
                f"watermark ({watermark})"
            )
        self._timeout = timestampMs

    def getCurrentWatermarkMs(self) -> int:
        """The batch's event-time watermark (ms): the same in every attempt of the batch."""
        if self._watermark is None:
            raise RuntimeError(
                "getCurrentWatermarkMs needs an event-time column: pass event_time=(column, "
                "delay) to stateful_foreach_batch (as withWatermark before applyInPandasWithState)"
            )
        return self._watermark

    def getCurrentProcessingTimeMs(self) -> int:
        """The batch's processing time: the same in every attempt of the batch."""
        return self._batch_time_ms

    def __repr__(self) -> str:
        return f"KeyState(value={self._value!r}, hasTimedOut={self._has_timed_out})"


def _epoch_ms(moment: datetime.datetime) -> int:
    """A datetime as ms since the epoch, as pyspark's ``TimestampType().toInternal`` counts it
    (a naive one in local time), whole milliseconds."""
    if moment.tzinfo is not None:
        seconds = calendar.timegm(moment.utctimetuple())
    else:
        seconds = int(time.mktime(moment.timetuple()))
    return (seconds * 1_000_000 + moment.microsecond) // 1000
